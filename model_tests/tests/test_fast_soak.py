"""The fast soak (``specs/oracle.md`` §6): in exact mode the optimized manager stands in for the
reference as the soak's model, and nothing it finds is reported before the reference has seen
it. A divergence of the target's is confirmed by the reference and reported as the target's
FAIL; a disagreement between the stand-in and the reference is pagedkv's own bug (exit code 2),
never the target's. Each test plants one of the two."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from pagedkv import cli
from pagedkv.model_tests.oracle import soak_model, stand_in_guard
from pagedkv.model_tests.oracle.guard import guard
from pagedkv.model_tests.oracle.incremental_compact import own_code_only
from pagedkv.model_tests.oracle.soak import Lockstep, Walk, diverges, random_config, soak
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED, REFERENCE, Model
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.types import ManagerConfig

HERE = "pagedkv.model_tests.tests.test_fast_soak"


class ForgetsARepeatedAccess(OptimizedBlockSpaceManager):
    """A laziness bug only the whole state shows: a second access of a sequence is dropped."""

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        table = self.live().seqs.get(seq_id)
        if table is not None and table.access_stamp and now > 1:
            return
        super().access_all_blocks_in_seq(seq_id, now)


class Twin(OptimizedBlockSpaceManager):
    """The optimized manager under another name: a target the stand-in may model."""


BROKEN_STAND_IN = Model("optimized", ForgetsARepeatedAccess, OPTIMIZED.state, OPTIMIZED.compact)
"""A stand-in with a bug of its own, as if the optimized manager had drifted from the
reference."""


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_divergence_the_stand_in_finds_is_confirmed_by_the_reference() -> None:
    result = soak(ForgetsARepeatedAccess, 30_000, 2, exact=True, model=OPTIMIZED)
    assert not result.passed and result.model == "optimized"
    assert result.confirmed and result.own_bug is None, (result.failure, result.own_bug)
    assert "last_accessed" in (result.failure or ""), result.failure
    assert result.config is not None
    assert diverges(ForgetsARepeatedAccess, result.config, result.calls, True) is not None


def test_a_stand_in_that_disagrees_with_the_reference_is_pagedkvs_bug() -> None:
    """The target (the reference itself) is right; the stand-in is not. The target is not
    blamed: the disagreement is the stand-in's, shrunk, and replays against it."""
    result = soak(ReferenceBlockSpaceManager, 30_000, 2, exact=True, model=BROKEN_STAND_IN)
    assert not result.passed and not result.confirmed
    assert result.own_bug is not None and "last_accessed" in result.own_bug, result.own_bug
    assert result.config is not None
    assert diverges(ForgetsARepeatedAccess, result.config, result.calls, True) is not None
    assert diverges(ReferenceBlockSpaceManager, result.config, result.calls, True) is None


def test_the_command_says_who_is_at_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "t.jsonl")
    target = f"{HERE}:ForgetsARepeatedAccess"
    common = ["--exact", "--steps", "30000", "--seed", "2", "--trace-out", path]
    code, out, _ = run_cli("soak", "--target", target, *common)
    assert code == 1 and "the optimized manager as the model" in out, out
    assert "confirmed by the reference" in out, out
    monkeypatch.setattr(soak_model, "choose", lambda sample: BROKEN_STAND_IN)
    code, out, _ = run_cli("soak", "--target", f"{HERE}:Twin", *common)
    assert code == 2 and "a bug of pagedkv's, not the target's" in out, out
    assert "--target optimized" in out, out


def test_the_stand_in_passes_a_correct_target_and_never_models_itself() -> None:
    assert soak(Twin, 3000, 5, exact=True, model=OPTIMIZED).passed
    assert soak_model.choose(OptimizedBlockSpaceManager(_config())) is REFERENCE
    assert soak_model.choose(Twin(_config())) is OPTIMIZED
    guarded = guard(OptimizedBlockSpaceManager)(_config())
    assert soak_model.choose(guarded) is REFERENCE
    code, out, _ = run_cli("soak", "--steps", "300", "--seed", "5")
    assert code == 0 and "the optimized manager as the model" not in out, out


def _config() -> ManagerConfig:
    return ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2)


def test_a_mutant_of_the_optimized_manager_fails_the_default_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pagedkv soak`` as a user runs it (the optimized manager, against the reference): a bug
    planted in the optimized manager itself (the stand-in's bug above, in the class) is a FAIL
    with the shrunk steps printed and a trace to replay."""
    original = OptimizedBlockSpaceManager.access_all_blocks_in_seq

    def forgets_a_repeated_access(
        self: OptimizedBlockSpaceManager, seq_id: int, now: float
    ) -> None:
        table = self.live().seqs.get(seq_id)
        if table is not None and table.access_stamp and now > 1:
            return
        original(self, seq_id, now)

    monkeypatch.setattr(
        OptimizedBlockSpaceManager, "access_all_blocks_in_seq", forgets_a_repeated_access
    )
    path = str(tmp_path / "t.jsonl")
    code, out, _ = run_cli("soak", "--steps", "30000", "--seed", "2", "--trace-out", path)
    assert code == 1 and "FAIL after" in out and "(manager level, exact mode, seed 2)" in out, out
    assert "the optimized manager as the model" not in out, out  # the reference is the model
    assert "1. allocate(" in out and "<-- diverges" in out and "last_accessed" in out, out
    # a divergence of the whole state only, which replay (isomorphic) would pass: not offered
    assert "replay: " not in out, out
    assert f"pagedkv replay {path} --target optimized compares isomorphically" in out, out


PATCHES_THE_BASE = """
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager

_counted = OptimizedBlockSpaceManager.get_num_free_gpu_blocks


def _one_less(self):
    return _counted(self) - 1


OptimizedBlockSpaceManager.get_num_free_gpu_blocks = _one_less  # every instance, the model's too


class Patched(OptimizedBlockSpaceManager):
    pass
"""


def _soak_a_patching_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, factory: str
) -> tuple[int, str]:
    """``pagedkv soak --exact`` of ``factory`` in a module of that text, which patches
    ``get_num_free_gpu_blocks`` on the optimized manager itself (undone after the test)."""
    base = OptimizedBlockSpaceManager
    monkeypatch.setattr(base, "get_num_free_gpu_blocks", base.get_num_free_gpu_blocks)
    (tmp_path / f"patching_{factory.lower()}.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    argv = ["soak", "--target", f"patching_{factory.lower()}:{factory}", "--exact"]
    argv += ["--steps", "3000", "--seed", "1", "--trace-out", str(tmp_path / "t.jsonl")]
    code = cli.main(argv, out, err)
    return code, out.getvalue() + err.getvalue()


def test_a_target_that_patches_the_optimized_manager_is_soaked_against_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its patch reached the stand-in model as well, which then agreed with it: a PASS of a
    manager that miscounts its free blocks at every call (``stand_in_guard.py``)."""
    code, said = _soak_a_patching_target(tmp_path, monkeypatch, PATCHES_THE_BASE, "Patched")
    assert code == 1, said
    assert "note: the reference is the model: pagedkv's optimized code was changed" in said
    assert "OptimizedBlockSpaceManager.get_num_free_gpu_blocks" in said
    patched_class = OptimizedBlockSpaceManager.__subclasses__()[-1]  # the target's, loaded
    assert patched_class.__name__ == "Patched"
    assert not own_code_only(patched_class(_config()))  # its state read by fingerprints


PATCHES_THE_BASE_LATER = """
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager

_counted = OptimizedBlockSpaceManager.get_num_free_gpu_blocks


def _one_more(self):
    return _counted(self) + 1


class Later(OptimizedBlockSpaceManager):
    def allocate(self, *args, **kwargs):
        OptimizedBlockSpaceManager.get_num_free_gpu_blocks = _one_more  # at its first call
        return super().allocate(*args, **kwargs)
"""


def test_a_target_that_patches_the_optimized_manager_at_a_call_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in was chosen before any call, so a patch made at the target's first call ran
    in the model too: a PASS, with a note that the reference had been the model (the tryout's
    ``lazy_patch``). Each checkpoint now looks again."""
    code, said = _soak_a_patching_target(tmp_path, monkeypatch, PATCHES_THE_BASE_LATER, "Later")
    assert code == 1, said
    assert "pagedkv's optimized code was changed while the soak ran" in said
    assert "get_num_free_gpu_blocks" in said


def test_a_function_given_other_code_counts_as_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same function object with a new ``__code__`` (the tryout's ``code_swap``) passed the
    identity check alone."""
    counted = OptimizedBlockSpaceManager.get_num_free_gpu_blocks
    monkeypatch.setattr(counted, "__code__", (lambda self: 0).__code__)
    assert stand_in_guard.patched() == [
        "pagedkv.optimized.block_manager.OptimizedBlockSpaceManager.get_num_free_gpu_blocks"
        ".__code__"
    ]


@pytest.mark.parametrize("model", [REFERENCE, OPTIMIZED], ids=lambda m: m.name)
def test_the_walk_continues_each_sequence_from_its_token_count(
    model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk continues a sequence along its template from its token count; the optimized
    model's live tables hold their tokens packed, 8 bytes each, and the walk once read their
    ``len``: its decode tokens then left the template (fewer repeated blocks to hit). Here
    a sequence's token at position ``i`` is ``i``, so a count read wrong shows as a gap."""
    monkeypatch.setattr(Walk, "tokens", lambda _, start, count: list(range(start, start + count)))
    side = Lockstep(Twin, random_config(random.Random(1)), True, model)
    walk = Walk(random.Random(1), side)
    side.begin()
    while len(side.calls) < 600:
        walk.step()
    seqs = side.model.view().seqs
    assert seqs and all(seq.tokens == tuple(range(len(seq.tokens))) for seq in seqs.values())
    assert any(len(seq.tokens) > 8 for seq in seqs.values())
