"""The oracle's defrag level (``specs/defragmenter.md``, "The oracle's defrag level"): the
reference defragmenter as a public name, the level's calls on the wire, its machine against the
reference, the optimized and the written-apart defragmenter, and the wrong variants it must
catch."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import pagedkv
from pagedkv import cli
from pagedkv.model_tests.independent.defragmenter import IndependentDefragmenter
from pagedkv.model_tests.independent.defragmenter_broken import DefragExchangeForgetsFreeSide
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.machines.defrag_machine import Tier, defrag_case
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.api import check
from pagedkv.model_tests.oracle.record import record_level
from pagedkv.model_tests.teaching import defrag_demo, page, terminal, walkthrough
from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture
from pagedkv.optimized.defragmenter import OptimizedDefragmenter
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import interface, wire
from pagedkv.specs.types import DefragConfig


def test_the_reference_defragmenter_is_public() -> None:
    """``pagedkv.ReferenceDefragmenter`` is the reference's mutable face, and it does what the
    picture of ``specs/defragmenter.md`` §5 says."""
    assert pagedkv.ReferenceDefragmenter is ReferenceDefragmenter
    defrag = pagedkv.ReferenceDefragmenter(pagedkv.DefragConfig(12, threshold=2))
    defrag.update_state({"A": [1, 2], "B": [9, 10, 11]}, finished=[])
    assert defrag.defragment() == [(11, 3), (10, 4), (9, 5)]
    assert defrag.resolve_all([[1, 2], [9, 10, 11]]) == [[1, 2], [5, 4, 3]]
    assert defrag.resolve(3) == 11
    assert pagedkv.Defragmenter is interface.Defragmenter


# --- the level's calls on the wire --------------------------------------------------------------


def test_the_level_s_values_round_trip_through_json() -> None:
    """``changed`` keeps integer and string keys and their order; a configuration's pad sizes
    and reserved ids come back as a tuple and a frozenset."""
    changed = {3: [1, 2], "r1": [0, 5]}
    args = wire.encode_args("defrag", "update_state", (changed, ["r0", 7]))
    assert args == [[[3, [1, 2]], ["r1", [0, 5]]], ["r0", 7]]
    decoded = wire.decode_args("defrag", "update_state", codec.parse_json(codec.dumps(args)))
    assert decoded == (changed, ["r0", 7]) and list(decoded[0]) == [3, "r1"]
    config = DefragConfig(9, threshold=1, pad_sizes=(2, 4), reserved=frozenset({0, 3}))
    encoded = wire.encode_config(config)
    assert encoded["reserved"] == [0, 3] and encoded["pad_sizes"] == [2, 4]
    assert wire.decode_config("defrag", codec.parse_json(codec.dumps(encoded))) == config
    assert wire.config_level(config) == "defrag"
    assert wire.encode_args("defrag", "update_state", ({"m": 0}, 5)) == [
        {"raw": {"m": 0}},
        {"raw": 5},
    ]


# --- the machine and the check --------------------------------------------------------------------


def _run(factory: Any, tier: Tier, examples: int = 40) -> None:
    case = defrag_case(factory, tier=tier)
    case.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=20,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    case.TestCase().runTest()


@pytest.mark.parametrize("tier", ["isomorphic", "safety"])
@pytest.mark.parametrize(
    "factory", [ReferenceDefragmenter, OptimizedDefragmenter, IndependentDefragmenter]
)
def test_pagedkv_s_three_defragmenters_hold_to_the_level(factory: Any, tier: Tier) -> None:
    """The reference, the optimized and the written-apart one (``independent``)."""
    _run(factory, tier)


def triggers_one_early(config: DefragConfig) -> ReferenceDefragmenter:
    """Planted: the trigger read as ``>=`` (a threshold one lower)."""
    return ReferenceDefragmenter(replace(config, threshold=max(0, config.threshold - 1)))


@pytest.mark.parametrize("tier", ["isomorphic", "safety"])
def test_the_machine_catches_a_trigger_off_by_one(tier: Tier) -> None:
    with pytest.raises(Divergence, match=r"not triggered|exchanges|reference returned"):
        _run(triggers_one_early, tier, examples=200)


@pytest.mark.parametrize("profile", ["pagedkv", "safety"])
def test_check_passes_the_optimized_and_fails_the_planted(profile: str, tmp_path: Path) -> None:
    passed = check("optimized", "defrag", steps=300, seed=0, profile=profile)
    assert passed.passed, passed.message
    failed = check(
        triggers_one_early,
        "defrag",
        steps=2000,
        seed=0,
        profile=profile,
        trace_out=tmp_path / "t.jsonl",
    )
    assert not failed.passed and failed.trace is not None
    assert len(failed.trace.ops) <= 12
    assert failed.replayed is not None and not failed.replayed.ok
    loaded = trace.read(tmp_path / "t.jsonl")
    assert loaded.level == "defrag" and loaded.safety == (profile == "safety")
    assert not trace.replay(loaded, triggers_one_early).ok
    assert trace.replay(loaded, OptimizedDefragmenter).ok


# --- teaching ---------------------------------------------------------------------------------


def test_the_demo_shows_the_compaction_of_the_spec_picture() -> None:
    """``pagedkv demo --level defrag``: the pairs of §5, and c3's KV carried up to 11."""
    walk = defrag_demo.walk()
    compaction = walk.frames[3]
    assert compaction.copies == ((11, 3), (10, 4), (9, 5))
    assert isinstance(compaction.picture, DefragPicture)
    assert compaction.picture.kv is not None and compaction.picture.kv[11] == "c3"
    assert compaction.picture.backward == (0, 1, 2, 11, 10, 9, 6, 7, 8, 5, 4, 3)
    text = terminal.plain_frame(compaction, len(walk.frames) - 1)
    assert "logical   0  1  2 11 10  9" in text
    assert 'class="defrag"' in page.render(walk)


@pytest.mark.parametrize("profile", ["pagedkv", "safety"])
def test_show_draws_a_defrag_trace_beside_its_target(profile: str, tmp_path: Path) -> None:
    """``pagedkv show``: the mapping per step, and the target's forward and backward tables read
    through its calls, the diverging step marked."""
    failed = check(
        DefragExchangeForgetsFreeSide,
        "defrag",
        steps=2000,
        seed=0,
        profile=profile,
        trace_out=tmp_path / "t.jsonl",
    )
    loaded = trace.read(tmp_path / "t.jsonl")
    walk = walkthrough.walk_trace(loaded, "t.jsonl", DefragExchangeForgetsFreeSide, "broken")
    assert walk.finding is not None
    html = page.render(walk)
    assert "forward (resolve)" in html and "backward (unresolve)" in html
    alone = page.render(walkthrough.walk_trace(loaded, "t.jsonl"))
    assert ('class="defrag"' in alone) == (profile == "pagedkv")
    assert not failed.passed


def test_record_covers_the_level_and_its_traces_replay(tmp_path: Path) -> None:
    """``pagedkv record --level defrag``: every operation and error type; the written-apart
    defragmenter replays every trace."""
    corpus = record_level("defrag", tmp_path, runs=8, seed=0)
    assert corpus.complete, corpus.summary()
    loaded = [trace.read(path) for path in corpus.files]
    assert set().union(*(t.operations() for t in loaded)) == set(codec.OPS["defrag"])
    assert set().union(*(t.errors() for t in loaded)) == set(codec.ERRORS["defrag"])
    assert all(trace.replay(one, IndependentDefragmenter).ok for one in loaded)


def test_the_command_line_demo_and_its_page(tmp_path: Path) -> None:
    stream = io.StringIO()
    code = cli.main(["demo", "--level", "defrag"], stdout=stream, stderr=io.StringIO())
    assert code == 0
    assert "defragment() -> [(11, 3), (10, 4), (9, 5)]" in stream.getvalue()
    page_path = tmp_path / "demo.html"
    code = cli.main(
        ["demo", "--level", "defrag", "-o", str(page_path)],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert code == 0 and 'class="defrag"' in page_path.read_text(encoding="utf-8")
