"""Three planted mistakes that CrossHair must find (``test_formal.py``): proof that ``make
crosshair`` can fail where the product is wrong. Test-only code; the runner is pointed at it.

1. a wrong body under the reference's own contract: an allocation that evicts a cached block
   although a free one is left (``take_block``'s first postcondition, over the plugin's pools);
2. a false postcondition over the reference itself: that a single block ranks first for eviction
   (ties are allowed, ``first_to_evict``);
3. a diffbehavior pair whose twin differs on an edge case: eviction that breaks a tie in rank by
   the highest id instead of the lowest (``own_eviction_pick``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pagedkv.model_tests.formal.pairs import Events, Ranks, reference_eviction_order
from pagedkv.reference.allocation import allowed_choices, first_to_evict  # noqa: F401
from pagedkv.reference.pool_state import PoolState, evictable_ids, free_ids, with_block
from pagedkv.specs.pool_view import BLANK, BlockView
from pagedkv.specs.types import BlockId


def take_highest_unheld(state: PoolState) -> tuple[PoolState, BlockId]:
    """Takes the highest id nobody holds, free or cached: wrong when a free block is left.

    pre: bool(free_ids(state) or evictable_ids(state))
    post: _[1] in allowed_choices(state)
    """
    choice = max(free_ids(state) | evictable_ids(state))
    return with_block(state, choice, replace(BLANK, ref_count=1)), choice


def claimed_unique_first(views: Mapping[BlockId, BlockView]) -> frozenset[BlockId]:
    """Claims that one block at most ranks first: false where two tie.

    pre: all(-1 <= view.last_accessed < float("inf") for view in views.values())
    post: len(_) <= 1
    """
    return first_to_evict(views)


def highest_id_eviction_order(ranks: Ranks, events: Events) -> list[int] | None:
    """``reference_eviction_order`` with the ids mirrored (block ``b`` is ``n - 1 - b``), so
    that ties in rank go to the highest id: the same order wherever no two blocks tie."""

    def mirror(block: int) -> int:
        return len(ranks) - 1 - block if 0 <= block < len(ranks) else block

    order = reference_eviction_order(ranks[::-1], [(mirror(b), time) for b, time in events])
    return None if order is None else [mirror(block) for block in order]
