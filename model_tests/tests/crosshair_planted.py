"""Three planted mistakes that CrossHair must find (``test_formal.py``): proof that ``make
crosshair`` can fail where the product is wrong. Test-only code; the runner is pointed at it.

1. a wrong body under the reference's own contract: an allocation that evicts a cached block
   although a free one is left (``take_block``'s first postcondition, over the plugin's pools);
2. a false postcondition over the reference itself: that a single block ranks first for eviction
   (ties are allowed, ``first_to_evict``);
3. a diffbehavior pair whose twin differs on an edge case: the allocation that would take the
   pool's last block fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pagedkv.model_tests.formal.pairs import reference_allocation_order
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


def last_block_refused_allocation_order(num_blocks: int, events: list[int]) -> list[int] | None:
    """``reference_allocation_order`` with an off-by-one in the bound of the ids handed out:
    an allocation that would take the pool's last block fails (``-1``) instead."""
    order = reference_allocation_order(num_blocks, events)
    return None if order is None else [-1 if b == num_blocks - 1 else b for b in order]
