"""The defragmenter of seed 003 on its own: the picture of ``specs/defragmenter.md`` §5, the
reference and the optimized one in lockstep over random updates, the cap, the errors, and the
checks of I4 and I8 failing where they must.

The manager machine runs both under the block space manager with the KV data; this file covers
what its small pools cannot reach (the 512-pair cap, long tables) and says each rule once in a
story.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.optimized import kernels
from pagedkv.optimized.defragmenter import OptimizedDefragmenter
from pagedkv.optimized.kv_store import KVStore
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import defrag_rule, invariants
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.errors import (
    ConfigurationError,
    ForeignBlockError,
    InvalidArgumentError,
    UnknownSequenceError,
)
from pagedkv.specs.interface import Defragmenter
from pagedkv.specs.types import DEFRAG_PAD_SIZES, DefragConfig, TableKey

Factory = Callable[[DefragConfig], Defragmenter]
FACTORIES: list[Factory] = [ReferenceDefragmenter, OptimizedDefragmenter]


@pytest.fixture(params=FACTORIES, ids=lambda f: f.__name__)
def make(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def checked_defragment(defrag: Defragmenter) -> list[tuple[int, int]]:
    """``defragment()`` with I8 held to it and I4 after it."""
    before = defrag.view()
    pairs = defrag.defragment()
    after = defrag.view()
    assert invariants.defragmentation(before, after, pairs) == []
    assert invariants.defragmenter_state(after, after.tables) == []
    return pairs


# --- the picture of specs/defragmenter.md §5 ----------------------------------------------------


def test_the_spec_picture(make: Factory) -> None:
    defrag = make(DefragConfig(12, threshold=2))
    defrag.update_state({"A": [1, 2], "B": [9, 10, 11]}, [])
    pairs = checked_defragment(defrag)
    assert pairs == [(11, 3), (10, 4), (9, 5)]
    view = defrag.view()
    assert view.backward == (0, 1, 2, 11, 10, 9, 6, 7, 8, 5, 4, 3)
    assert view.forward == view.backward  # this run's exchanges are their own inverse
    assert dict(view.ref_counts) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    assert defrag.resolve_all([[1, 2], [9, 10, 11]]) == [[1, 2], [5, 4, 3]]
    assert defrag.resolve(3) == 11 and defrag.unresolve(11) == 3
    assert checked_defragment(defrag) == []  # compact now: 5 - 2 > 5 is false


def test_the_spec_picture_on_a_kv_store() -> None:
    """The exchange carries the evictable cached block's KV (logical 3) to physical 11, where
    ``resolve(3)`` points afterwards; B's KV is read through the resolved table."""
    defrag = OptimizedDefragmenter(DefragConfig(12, threshold=2))
    store = KVStore(1, 12, 2, 1, 1, torch.float32, "cpu", mla=True)
    for block in (1, 2, 3, 9, 10, 11):  # KV of logical block b is the value b
        store.write([(block, 0), (block, 1)], [torch.full((2, 1, 1), float(block))], [None])
    defrag.update_state({"A": [1, 2], "B": [9, 10, 11]}, [])
    pairs = defrag.defragment()
    kernels.swap_blocks_in_place(store, pairs, defrag.config.pad_sizes)
    for logical in (1, 2, 3, 9, 10, 11):
        (k, _), *_ = store.gather([defrag.resolve(logical)])
        assert torch.equal(k, torch.full((2, 1, 1), float(logical))), logical


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("high", "fires"), [(7, False), (8, True)])
def test_the_trigger_is_the_seed_inequality(make: Factory, high: int, fires: bool) -> None:
    """Used {1, 2, high} with threshold 4: it acts when ``high - 4 > 3``, not at equality."""
    defrag = make(DefragConfig(16, threshold=4))
    defrag.update_state({"r": [1, 2, high]}, [])
    assert bool(checked_defragment(defrag)) is fires


def test_the_cap_is_the_largest_pad_size(make: Factory) -> None:
    """1000 misplaced blocks: one run moves the 512 highest into the 512 lowest holes."""
    defrag = make(DefragConfig(2048))
    defrag.update_state({"long": list(range(1048, 2048))}, [])
    pairs = checked_defragment(defrag)
    assert len(pairs) == max(DEFRAG_PAD_SIZES) == 512
    assert pairs[0] == (2047, 1) and pairs[-1] == (1536, 512)
    assert defrag_rule.padded_size(len(pairs), DEFRAG_PAD_SIZES) == 512
    assert len(checked_defragment(defrag)) == 488  # the rest next time
    assert max(defrag.view().used) == 1000


def test_reserved_ids_never_move(make: Factory) -> None:
    defrag = make(DefragConfig(10, threshold=0, reserved=frozenset({0, 2})))
    defrag.update_state({"r": [0, 8, 9]}, [])
    assert checked_defragment(defrag) == [(9, 1), (8, 3)]
    assert defrag.resolve(0) == 0 and defrag.resolve(2) == 2


def test_a_pool_of_one_block(make: Factory) -> None:
    """The smallest pool: its one block used, nothing to move (the high-water mark starts
    below every id, not at one past the last)."""
    defrag = make(DefragConfig(1, threshold=0))
    defrag.update_state({"r": [0]}, [])
    assert checked_defragment(defrag) == []
    assert defrag.resolve(0) == 0


def test_tables_change_in_place_and_finish(make: Factory) -> None:
    """A copy-on-write replaces an entry, a window release points one at the null block, a
    table is passed again unchanged; ref counts follow each table as it is now."""
    defrag = make(DefragConfig(8, threshold=0))
    defrag.update_state({"a": [1, 2, 3], "b": [1, 2]}, [])
    defrag.update_state({"a": [1, 2, 3], "b": [1, 4]}, [])  # b's copy-on-write of block 2
    defrag.update_state({"a": [0, 2, 3, 5]}, ["b"])  # a slid past block 1 and grew; b finished
    view = defrag.view()
    assert dict(view.ref_counts) == {0: 1, 2: 1, 3: 1, 5: 1}
    assert dict(view.tables) == {"a": (0, 2, 3, 5)}
    assert invariants.defragmenter_state(view, {"a": [0, 2, 3, 5]}) == []


# --- reference and optimized in lockstep ---------------------------------------------------------

KEYS: list[TableKey] = ["a", "b", "c", ("seq", 1), ("cross", 1)]


@st.composite
def configs(draw: st.DrawFn) -> DefragConfig:
    num_blocks = draw(st.integers(1, 40))
    return DefragConfig(
        num_blocks,
        threshold=draw(st.integers(0, 4)),
        pad_sizes=draw(st.sampled_from([(1,), (2, 4), (1, 3), DEFRAG_PAD_SIZES])),
        reserved=frozenset(draw(st.sets(st.integers(0, num_blocks - 1), max_size=2))),
    )


@given(config=configs(), data=st.data())
def test_reference_and_optimized_agree(config: DefragConfig, data: st.DataObject) -> None:
    sides: list[Defragmenter] = [ReferenceDefragmenter(config), OptimizedDefragmenter(config)]
    ids = st.integers(0, config.num_blocks - 1)
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        held = list(sides[0].view().tables)
        finished = data.draw(st.lists(st.sampled_from(held), unique=True) if held else st.just([]))
        free_keys = [k for k in KEYS if k not in finished]
        changed = data.draw(
            st.dictionaries(st.sampled_from(free_keys), st.lists(ids, max_size=8), max_size=3)
            if free_keys
            else st.just({})
        )
        for side in sides:
            side.update_state(changed, finished)
        tables = dict(sides[0].view().tables)
        results = [checked_defragment(side) for side in sides]
        assert results[0] == results[1]
        views = [side.view() for side in sides]
        assert views[0] == views[1]
        assert invariants.defragmenter_state(views[0], tables) == []
        probe = data.draw(ids, label="probe")
        assert len({(s.resolve(probe), s.unresolve(probe)) for s in sides}) == 1


# --- errors: typed, and nothing changes ----------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"num_blocks": 0},
        {"threshold": -1},
        {"threshold": True},
        {"pad_sizes": ()},
        {"pad_sizes": (8, 4)},
        {"pad_sizes": [8]},
        {"pad_sizes": (0,)},
        {"pad_sizes": (8, 2**24 + 1)},
        {"reserved": frozenset({12})},
        {"reserved": {0}},
    ],
)
def test_bad_configurations_are_refused(make: Factory, changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        make(replace(DefragConfig(12), **changes))


@pytest.mark.parametrize(
    ("changed", "finished", "error", "says"),
    [
        ([("a", [1])], [], InvalidArgumentError, "changed must map"),
        ({"a": "12"}, [], InvalidArgumentError, "block table"),
        ({"a": [1, 2.0]}, [], InvalidArgumentError, "must be an int"),
        ({"a": [1, True]}, [], InvalidArgumentError, "must be an int"),
        ({"a": [12]}, [], ForeignBlockError, "logical block 12"),
        ({"a": [-1]}, [], ForeignBlockError, "-1"),
        ({}, "held", InvalidArgumentError, "finished must be"),
        ({}, [["held"]], InvalidArgumentError, "hashable"),
        ({"held": [1]}, ["held"], InvalidArgumentError, "both changed and finished"),
        ({}, ["nobody"], UnknownSequenceError, "'nobody'"),
        ({}, ["held", "held"], UnknownSequenceError, "'held'"),
        ({"a": [1], "b": [99]}, [], ForeignBlockError, "99"),
    ],
)
def test_bad_updates_are_refused_and_change_nothing(
    make: Factory, changed: Any, finished: Any, error: type[Exception], says: str
) -> None:
    defrag = make(DefragConfig(12, threshold=0))
    defrag.update_state({"held": [5, 6]}, [])
    defrag.defragment()
    before = defrag.view()
    with pytest.raises(error, match=says):
        defrag.update_state(changed, finished)
    assert defrag.view() == before


@pytest.mark.parametrize(
    ("block", "error"),
    [
        (12, ForeignBlockError),
        (-1, ForeignBlockError),
        ("1", InvalidArgumentError),
        (None, InvalidArgumentError),
    ],
)
def test_bad_ids_are_refused(make: Factory, block: Any, error: type[Exception]) -> None:
    defrag = make(DefragConfig(12))
    for call in (defrag.resolve, defrag.unresolve, lambda b: defrag.resolve_all([[1, b]])):
        with pytest.raises(error):
            call(block)
    flat: Any = [1, 2]  # a table, not a list of tables
    with pytest.raises(InvalidArgumentError):
        defrag.resolve_all(flat)


# --- padding -------------------------------------------------------------------------------------


def test_the_seeds_minus_one_padding_fails_on_cpu_torch() -> None:
    """What ``specs/defragmenter.md`` §4 says: the seed's ``-1`` becomes slot indices
    ``-block_size .. -1``, which CPU ``index_select`` and ``index_copy_`` refuse, while Python
    indexing would take them for the last block; pagedkv's kernel refuses ``-1`` up front."""
    cache = torch.arange(8.0).reshape(4, 2)
    slots = (torch.tensor([-1]) * 2).unsqueeze(-1) + torch.arange(2)
    with pytest.raises(IndexError):
        cache.index_select(0, slots.flatten())
    with pytest.raises(IndexError):
        cache.index_copy_(0, slots.flatten(), torch.zeros(2, 2))
    assert torch.equal(cache[slots.flatten()], cache[2:4])  # the last block, silently
    store = KVStore(1, 4, 2, 1, 1, torch.float32, "cpu")
    with pytest.raises(ForeignBlockError):
        kernels.swap_blocks_in_place(store, [(1, 2), (-1, -1)])


# --- the checks can fail -------------------------------------------------------------------------


def _picture() -> tuple[DefragmenterView, DefragmenterView, list[tuple[int, int]]]:
    defrag = ReferenceDefragmenter(DefragConfig(12, threshold=2))
    defrag.update_state({"A": [1, 2], "B": [9, 10, 11]}, [])
    before = defrag.view()
    pairs = defrag.defragment()
    return before, defrag.view(), pairs


def test_the_state_check_catches_broken_tables() -> None:
    _, after, _ = _picture()
    tables: dict[TableKey, list[int]] = {"A": [1, 2], "B": [9, 10, 11]}
    assert invariants.defragmenter_state(after, tables) == []
    stale = replace(after, backward=tuple(range(12)))
    assert "not inverse" in invariants.defragmenter_state(stale, tables)[0]
    counts = replace(after, ref_counts={**after.ref_counts, 3: 2})
    assert "ref counts" in invariants.defragmenter_state(counts, tables)[0]
    swapped = (1, 0, *after.forward[2:])
    moved = replace(after, forward=swapped, backward=swapped)
    assert "reserved ids [0]" in invariants.defragmenter_state(moved, tables)[0]
    del tables["B"]
    assert "holds tables" in invariants.defragmenter_state(after, tables)[0]


def test_the_run_check_catches_wrong_pairs() -> None:
    before, after, pairs = _picture()
    assert invariants.defragmentation(before, after, pairs) == []
    problems = invariants.defragmentation(before, after, pairs[:2])
    assert any("minimum that compacts is 3" in p for p in problems)
    assert any(
        "moves a used block upward" in p
        for p in invariants.defragmentation(before, after, [(3, 11), *pairs[1:]])
    )
    assert any(
        "the pairs give" in p
        for p in invariants.defragmentation(before, replace(after, backward=before.backward), pairs)
    )
    lazy = replace(
        after, forward=before.forward, backward=before.backward, ref_counts=before.ref_counts
    )
    assert any(
        "as compact as the cap allows" in p for p in invariants.defragmentation(before, lazy, pairs)
    )
    quiet = replace(before, config=replace(before.config, threshold=8))
    assert "not triggered" in invariants.defragmentation(quiet, after, pairs)[0]
