"""Which block a new allocation takes (``specs/semantics.md`` 5 and 6; pool §4).

A free block first; only when none is left, an evictable one, oldest access first and, among
equally old, the one with the most hashed tokens (a chain's tail before its head). The spec lets
the implementation pick among the blocks that remain tied; the reference picks the lowest id and
also accepts an explicit pick, which it checks is one of the allowed ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from immutables import Map

from reference.hash_index import unindex_block
from reference.pool_state import PoolState, evictable_ids, free_ids, with_block
from specs.errors import InvalidArgumentError, OutOfBlocksError
from specs.pool_view import BLANK, BlockView
from specs.types import BlockId
from specs.validation import check_block_id

Picker = Callable[[PoolState], BlockId | None]
"""Makes the spec's open choice for the next allocation from a pool (one of
``allowed_choices``), or returns None for the reference's own (the lowest id). The oracle passes
one that replays another implementation's choices."""


def lowest_id(_: PoolState) -> BlockId | None:
    return None


def eviction_rank(view: BlockView) -> tuple[float, int]:
    """Smaller ranks are evicted first."""
    return (view.last_accessed, -view.num_hashed_tokens)


def allowed_choices(state: PoolState) -> frozenset[BlockId]:
    """Every block the spec allows the next allocation to take."""
    free = free_ids(state)
    if free:
        return free
    evictable = evictable_ids(state)
    if not evictable:
        return frozenset()
    if state.policy.eviction == "release_order":
        return frozenset({min(evictable, key=lambda b: state.released[b])})
    best = min(eviction_rank(state.blocks[b]) for b in evictable)
    return frozenset(b for b in evictable if eviction_rank(state.blocks[b]) == best)


def take_block(state: PoolState, choice: BlockId | None = None) -> tuple[PoolState, BlockId]:
    """Allocate one block with ref count 1, evicting a cached block if the free list is empty."""
    allowed = allowed_choices(state)
    if not allowed:
        raise OutOfBlocksError(
            f"no free or evictable block left (all {state.config.num_blocks} are in use)"
        )
    if choice is None:
        choice = min(allowed)
    elif check_block_id(state.config, choice) not in allowed:
        raise InvalidArgumentError(
            f"block {choice} may not be allocated now; allowed: {sorted(allowed)}"
        )
    if state.blocks[choice].content_hash is not None:  # an eviction
        state = discard_pending_copies(unindex_block(state, choice), choice)
    state = replace(state, promoted=state.promoted - {choice}, released=_without(state, choice))
    return with_block(state, choice, replace(BLANK, ref_count=1)), choice


def _without(state: PoolState, block: BlockId) -> Map[BlockId, int]:
    return state.released.delete(block) if block in state.released else state.released


def discard_pending_copies(state: PoolState, block: BlockId) -> PoolState:
    """A block whose contents are given up (back to the free list, or evicted) needs no copy
    (policy ``cow_pairs=pending``; under ``as_recorded`` the pair stays)."""
    if state.policy.cow_pairs == "as_recorded":
        return state
    kept = tuple(pair for pair in state.pending_cows if pair[1] != block)
    return replace(state, pending_cows=kept)
