"""The soak keeps parts of the optimized manager's compact state between calls
(``model_tests/oracle/incremental_compact.py``: from the manager's record of its changes where
all its code is pagedkv's, else a pool's while its fingerprint stays the same), so a change the
record or the fingerprint missed would leave the comparison after each call looking at old rows
or columns. The checkpoint is what makes that safe: it builds both compact states fresh and
holds the kept ones equal to them, and an episode whose kept state was stale is replayed
comparing fresh states after every call. The tests here plant a staleness of the fingerprint
route (a fingerprint blind to the ref counts, every reader made to take that route)
under a target whose query corrupts a ref count: the comparison after the call misses it, the
checkpoint does not. ``test_soak_record.py`` plants a change the record misses."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from pagedkv import cli
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import incremental_compact, soak, stand_in_guard
from pagedkv.model_tests.oracle.guard import guard
from pagedkv.model_tests.oracle.soak import Lockstep, StaleCache, diverges
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED, REFERENCE
from pagedkv.model_tests.tests.test_fast_soak import Twin
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.types import ManagerConfig

STEPS = 20_000
CONFIG = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4, enable_caching=True)


class BumpsARefCount(OptimizedBlockSpaceManager):
    """A state corruption that only the ref counts show, and only for one call: each
    ``get_num_free_cpu_blocks`` (a query, which changes nothing) adds one to the ref count of
    the first held GPU block, and the next call of any kind takes it back first."""

    bumped: int | None = None

    def restore(self) -> None:
        if self.bumped is not None:
            self._gpu._ref_counts[self.bumped] -= 1
            self.bumped = None

    def get_num_free_cpu_blocks(self) -> int:
        self.restore()
        counts = self._gpu._ref_counts
        self.bumped = next((i for i, count in enumerate(counts) if count), None)
        if self.bumped is not None:
            counts[self.bumped] += 1
        return super().get_num_free_cpu_blocks()


def _restoring(name: str) -> None:
    original = getattr(OptimizedBlockSpaceManager, name)

    def restoring(self: BumpsARefCount, *args: object, **kwargs: object) -> object:
        self.restore()
        return original(self, *args, **kwargs)

    setattr(BumpsARefCount, name, restoring)


for _name in (
    "can_allocate",
    "allocate",
    "can_append_slots",
    "append_slots",
    "fork",
    "free",
    "can_swap_out",
    "can_swap_in",
    "swap_out",
    "swap_in",
    "get_block_table",
    "get_cross_block_table",
    "get_num_free_gpu_blocks",
    "access_all_blocks_in_seq",
    "mark_blocks_as_computed",
    "get_common_computed_block_ids",
    "get_num_cached_tokens",
    "get_prefix_cache_hit_rate",
    "reset_prefix_cache",
):
    _restoring(_name)


def blind_to_ref_counts(self: OptimizedBlockPool) -> tuple[object, ...]:
    """A planted staleness: the fingerprint without the ref counts."""
    return FINGERPRINT(self)[1:]


FINGERPRINT = OptimizedBlockPool.fingerprint


@pytest.fixture
def stale_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted fingerprint, and every reader on the fingerprint route (the optimized
    manager's own record of its changes is not read): the soak's rule for a stale state still
    goes by whose code the target runs (``soak.own_code_only``)."""
    monkeypatch.setattr(OptimizedBlockPool, "fingerprint", blind_to_ref_counts)
    monkeypatch.setattr(stand_in_guard, "LOADED", stand_in_guard.take_down())  # pagedkv's code
    monkeypatch.setattr(incremental_compact, "own_code_only", lambda manager: False)


class OwnCode(OptimizedBlockSpaceManager):
    """A subclass with code of its own (which does what the optimized manager does): its own
    code may change the manager's structures in ways the fingerprint was not made for."""

    def pools(self) -> tuple[OptimizedBlockPool, OptimizedBlockPool]:
        return super().pools()


def corrupted(model: object = OPTIMIZED) -> Lockstep:
    """A lockstep of the corrupting target, a group allocated, the corrupting query made."""
    side = Lockstep(BumpsARefCount, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.append_slots(1, [4]))
    side.call(calls.get_num_free_cpu_blocks())
    return side


def test_the_kept_state_misses_it_and_the_checkpoint_does_not(stale_fingerprint: None) -> None:
    side = corrupted()  # the comparison after each call saw nothing (no Divergence)
    assert side.target.compact() != side.model.compact()  # though the states differ
    with pytest.raises(StaleCache, match="the target's kept compact state is stale"):
        side.check_state("at the checkpoint")


def test_without_the_planted_staleness_the_call_itself_is_caught() -> None:
    with pytest.raises(Divergence, match="ref_count"):
        corrupted()


def test_the_soak_replays_a_stale_episode_fresh_and_reports_the_divergence(
    stale_fingerprint: None,
) -> None:
    result = soak.soak(BumpsARefCount, STEPS, 1, exact=True, model=OPTIMIZED)
    assert not result.passed and result.confirmed, (result.failure, result.own_bug)
    assert result.stale and "the target's kept compact state is stale" in result.stale[0]
    assert result.calls[-1][0] == "get_num_free_cpu_blocks", result.calls
    assert result.config is not None
    assert diverges(BumpsARefCount, result.config, result.calls, True) is not None


def test_without_the_checkpoints_fresh_look_the_soak_would_pass(
    stale_fingerprint: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the checkpoint is for: with its fresh comparisons left out (the kept states
    compared instead), the same soak sees nothing."""

    def kept_only(self: Lockstep, when: str) -> None:
        assert self.target_compact is not None
        if self.read_compact() != self.target_compact():
            raise Divergence(when)

    monkeypatch.setattr(Lockstep, "check_state", kept_only)
    corrupted().check_state("at the checkpoint")  # no Divergence: the corruption is not seen
    result = soak.soak(BumpsARefCount, STEPS, 1, exact=True, model=OPTIMIZED)
    assert result.passed, result.failure


def test_a_correct_target_is_never_stale() -> None:
    for model in (OPTIMIZED, REFERENCE):
        result = soak.soak(OptimizedBlockSpaceManager, 3000, 2, exact=True, model=model)
        assert result.passed and not result.stale, (result.failure, result.stale)


class HangsWhenItsPoolsAreRead(OptimizedBlockSpaceManager):
    """A target whose own code, run by the kept compact state's reader, never returns."""

    def pools(self) -> tuple[OptimizedBlockPool, OptimizedBlockPool]:
        time.sleep(30)
        return super().pools()


def test_the_kept_state_is_read_under_the_targets_timeout() -> None:
    """The reader runs the target's code (its ``pools``, its structures' methods), so it is
    one of the target's calls: a hang there is the target's, reported as one."""
    factory = guard(HangsWhenItsPoolsAreRead, timeout=0.5)
    result = soak.soak(factory, 100, 1, exact=True, model=OPTIMIZED)
    assert not result.passed and result.hung, result.failure
    assert "compact" in (result.failure or ""), result.failure


def test_a_stale_kept_state_with_no_divergence_is_pagedkvs_bug_never_a_pass(
    stale_fingerprint: None,
) -> None:
    """A correct target under the planted staleness: both sides' kept states miss the same
    ref-count changes (a fork's), the fresh replay finds no divergence, and what is left is
    pagedkv's own fault: an ERROR (exit 2 from the command line), not a PASS."""
    result = soak.soak(OptimizedBlockSpaceManager, STEPS, 1, exact=True, model=OPTIMIZED)
    assert result.stale, "the planted fingerprint went unnoticed"
    assert result.failure is None and not result.passed
    assert result.own_bug is not None and "missed a change" in result.own_bug


def test_a_subclass_whose_kept_state_goes_stale_is_read_fresh_and_can_pass(
    stale_fingerprint: None,
) -> None:
    """A subclass's own code may change what the kept state's fingerprint reads (a pool of its
    own made anew): where the replay finds no divergence, the target is not wrong and pagedkv is
    not either; the soak reads the target's own compact state after every call from then on."""
    result = soak.soak(OwnCode, STEPS, 1, exact=True, model=REFERENCE)
    assert result.stale, "the planted fingerprint went unnoticed"
    assert all("the target's kept" in stale for stale in result.stale)
    assert len(result.stale) == 1, "the target's state is kept no longer after the first"
    assert result.passed, (result.failure, result.own_bug)


def test_a_subclass_without_code_of_its_own_is_pagedkvs_code(stale_fingerprint: None) -> None:
    """Its stale kept state can only be pagedkv's fault, as the optimized manager's."""
    result = soak.soak(Twin, STEPS, 1, exact=True, model=REFERENCE)
    assert result.stale and not result.passed and result.failure is None
    assert result.own_bug is not None and "missed a change" in result.own_bug


def test_the_models_stale_kept_state_stays_pagedkvs_bug_under_a_subclass(
    stale_fingerprint: None,
) -> None:
    result = soak.soak(OwnCode, STEPS, 1, exact=True, model=OPTIMIZED)
    assert not result.passed and result.failure is None
    assert result.own_bug is not None and "the model's" in result.own_bug


def test_the_command_line_says_error_and_writes_no_verdict_file(
    stale_fingerprint: None, tmp_path: Path
) -> None:
    """pagedkv's own bug is an exit 2, which has no verdict file (``verdict_json.VERDICTS``):
    a file written with the code's verdict would say 'stale', a word the schema keeps for a
    replayed trace."""
    out, err = io.StringIO(), io.StringIO()
    verdict = tmp_path / "verdict.json"
    argv = ["soak", "--steps", "3000", "--seed", "1", "--json", str(verdict)]
    code = cli.main(argv, stdout=out, stderr=err)
    assert code == 2, out.getvalue() + err.getvalue()
    assert "a bug of pagedkv's, not the target's" in out.getvalue()
    assert not verdict.exists()
