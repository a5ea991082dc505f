"""``get_common_computed_block_ids`` on the optimized manager, against the reference, for every
ordered choice of up to three sequences, each asked twice (the optimized manager keeps its last
answers): sequences that share a prefix, one that shares part of it, a fork, one with nothing
computed, a swapped-out one and an unknown one (refused), the empty list, the same as tuples
(the long way), and a manager without caching; then again after the tables grew. The
faster killers ask about one sequence at a time, so the optimized shortcuts for several went
unseen (found by ``make mutate``'s first pass, ``specs/mutation.md``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.types import ManagerConfig


def _build(manager: BlockSpaceManager) -> None:
    manager.allocate(1, [1], [1, 2, 3, 4, 5, 6, 7])
    manager.mark_blocks_as_computed(1)
    manager.allocate(2, [2], [1, 2, 3, 4, 9])
    manager.mark_blocks_as_computed(2)
    manager.fork(1, 3)
    manager.append_slots(3, [8, 8, 8])
    manager.mark_blocks_as_computed(1)
    manager.allocate(4, [4], [5, 5, 5])
    manager.allocate(5, [5], [6, 6, 6])
    manager.swap_out(5)


def _grow(manager: BlockSpaceManager) -> None:
    """More blocks filled and marked: the kept answers must grow."""
    for seq_id in (1, 2, 3):
        manager.append_slots(seq_id, [7, 7, 7])
    manager.mark_blocks_as_computed(1)
    manager.mark_blocks_as_computed(2)


def _answer(manager: BlockSpaceManager, seq_ids: Sequence[int]) -> object:
    try:
        return manager.get_common_computed_block_ids(seq_ids)
    except PagedKVError as error:
        return type(error).__name__


@pytest.mark.parametrize("caching", [True, False])
def test_every_choice_of_sequences_agrees(caching: bool) -> None:
    config = ManagerConfig(2, 16, 8, enable_caching=caching)
    reference, optimized = ReferenceBlockSpaceManager(config), OptimizedBlockSpaceManager(config)
    ids = (1, 2, 3, 4, 5, 99)  # 99: no such sequence
    chosen = [list(c) for c in itertools.product(ids, repeat=2)]  # [1, 1] too; pairs first
    chosen += [list(c) for size in (3, 0, 1) for c in itertools.permutations(ids, size)]
    choices = [*chosen, *map(tuple, chosen), [True], [1, True]]  # tuples take the long way
    for build in (_build, _grow):
        build(reference)
        build(optimized)
        for seq_ids in choices:
            for _ in range(2):
                assert _answer(reference, seq_ids) == _answer(optimized, seq_ids), seq_ids
    if caching:
        assert _answer(reference, [1, 2]) == [0, 1]
        assert _answer(reference, [1]) == [0, 1, 2, 3]
