"""Which block a new allocation takes: the rule of ``specs/block_pool.md`` §4, the one place
that states it (free blocks first; only when none is left, the evictable blocks in the eviction
order, ``eviction_rank``). Where the rule leaves the choice open, the reference makes its own
(``own_free_pick``, ``own_eviction_pick``); the optimized pool must make the same.

Why every allocating function takes ``pick``: a correct implementation may make the open choices
differently, and the oracle's isomorphic session checks it by making the reference adopt the
target's choice, when it is one the rule allows (``specs/comparison.md``, isomorphic mode). Pure
functions learn that choice only from an argument, so each function that may allocate, here and
in ``block_table``, ``block_manager``, ``swap`` and ``manager_state``, takes a ``pick`` (a
``Picker``, or per device a ``DevicePicker``) and hands it down to ``take_block``. The default,
``lowest_id``, leaves every choice to the reference; the session's ``_picker``
(``pagedkv.model_tests.lockstep.manager_session``) returns the target's block where it is one of
``allowed_choices``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from immutables import Map

from pagedkv.reference.hash_index import unindex_block
from pagedkv.reference.pool_state import (
    PoolState,
    counted,
    evictable_ids,
    free_ids,
    with_block,
)
from pagedkv.specs.errors import ForeignBlockError, InvalidArgumentError, OutOfBlocksError  # noqa: F401
from pagedkv.specs.pool_view import BLANK, BlockView
from pagedkv.specs.types import BlockId
from pagedkv.specs.validation import check_block_id

Picker = Callable[[PoolState], BlockId | None]
"""Makes the spec's open choice for the next allocation from a pool (one of
``allowed_choices``), or returns None to leave it to the reference (``own_choice``)."""

EVICTION_ORDER = "the oldest access first, then the most hashed tokens (a chain's tail first)"
"""The eviction order in words (``eviction_rank``), for every message that names it."""


def lowest_id(_: PoolState) -> BlockId | None:
    """Leaves every open choice to the reference."""
    return None


def eviction_rank(view: BlockView) -> tuple[float, int]:
    """Smaller ranks are evicted first (``EVICTION_ORDER``).

    post: _ == (view.last_accessed, -view.num_hashed_tokens)
    """
    return (view.last_accessed, -view.num_hashed_tokens)


def first_to_evict(views: Mapping[BlockId, BlockView]) -> frozenset[BlockId]:
    """The evictable blocks (``views``) that rank first, all of them where several tie.

    post: _ <= views.keys() and bool(_) == bool(views)
    pre: all(-1 <= view.last_accessed < float("inf") for view in views.values())
    post: all(eviction_rank(views[b]) <= eviction_rank(v) for b in _ for v in views.values())
    post: all(eviction_rank(views[b]) == eviction_rank(views[c]) for b in _ for c in _)
    """
    if not views:
        return frozenset()
    best = min(eviction_rank(view) for view in views.values())
    return frozenset(b for b, view in views.items() if eviction_rank(view) == best)


def allowed_choices(state: PoolState) -> frozenset[BlockId]:
    """Every block the spec allows the next allocation to take: any free block; only when none
    is left, the evictable blocks that rank first (policy ``eviction=free_list``: the first in
    one line of both).

    pre: all(-1 <= view.last_accessed < float("inf") for view in state.blocks.values())
    post: _ == free_ids(state) or not free_ids(state) or state.policy.eviction == "free_list"
    post: _ <= free_ids(state) | evictable_ids(state)
    post: bool(_) == bool(free_ids(state) or evictable_ids(state))
    """
    free = free_ids(state)
    if state.policy.eviction == "free_list":
        return _first_in_free_list(state, free)
    if free:
        return free
    evictable = evictable_ids(state)
    if state.policy.eviction == "release_order" and evictable:
        return frozenset({min(evictable, key=lambda b: state.released[b])})
    return first_to_evict({b: state.blocks[b] for b in evictable})


def _first_in_free_list(state: PoolState, free: frozenset[BlockId]) -> frozenset[BlockId]:
    """Policy ``eviction=free_list``: any block never given back (they lead the list, in an
    order the caller cannot see), else the one given back first, cached or not."""
    never_released = frozenset(b for b in free if b not in state.released)
    if never_released:
        return never_released
    waiting = free | evictable_ids(state)
    return frozenset({min(waiting, key=lambda b: state.released[b])}) if waiting else frozenset()


def own_free_pick(free: frozenset[BlockId]) -> BlockId:
    """The reference's pick among free blocks: the lowest id.

    pre: bool(free)
    post: _ in free
    """
    return min(free)


def own_eviction_pick(tied: frozenset[BlockId]) -> BlockId:
    """The reference's pick among the evictable blocks that rank first: the lowest id.

    pre: bool(tied)
    post: _ in tied
    """
    return min(tied)


def own_choice(state: PoolState, allowed: frozenset[BlockId]) -> BlockId:
    """The reference's pick among ``allowed_choices``, free blocks or else evictable ones."""
    return own_free_pick(allowed) if free_ids(state) else own_eviction_pick(allowed)


def take_block(state: PoolState, choice: BlockId | None = None) -> tuple[PoolState, BlockId]:
    """Allocate one block with ref count 1, evicting a cached block if the free list is empty.

    pre: state.config.num_blocks >= 1 and state.config.first_id >= 0
    pre: set(state.blocks) == set(state.config.block_ids)
    pre: all(-1 <= view.last_accessed < float("inf") for view in state.blocks.values())
    pre: all(state.cached.get(v.content_hash) == b for b, v in state.blocks.items() if v.prefix)
    pre: all((v.content_hash is None) == (v.prefix is None) for v in state.blocks.values())
    raises: OutOfBlocksError, InvalidArgumentError, ForeignBlockError
    post: _[1] in allowed_choices(state)
    post: choice is not None or _[1] == own_choice(state, allowed_choices(state))
    post: _[0].blocks[_[1]] == replace(BLANK, ref_count=1) and _[1] not in _[0].cached.values()
    """
    allowed = allowed_choices(state)
    if not allowed:
        raise OutOfBlocksError(
            f"no free or evictable block left (all {state.config.num_blocks} are in use)"
        )
    if choice is None:
        choice = own_choice(state, allowed)
    elif check_block_id(state.config, choice) not in allowed:
        raise InvalidArgumentError(
            f"block {choice} may not be allocated now; allowed: {sorted(allowed)}"
        )
    if state.blocks[choice].content_hash is not None:  # an eviction
        state = discard_pending_copies(unindex_block(state, choice), choice)
    if choice in state.promoted or choice in state.released:  # most allocations: neither
        state = replace(state, promoted=state.promoted - {choice}, released=_without(state, choice))
    return with_block(state, choice, counted(BLANK, 1)), choice


def _without(state: PoolState, block: BlockId) -> Map[BlockId, int]:
    return state.released.delete(block) if block in state.released else state.released


def discard_pending_copies(state: PoolState, block: BlockId) -> PoolState:
    """A block whose contents are given up (back to the free list, or evicted) needs no copy
    (policy ``cow_pairs=pending``; under ``as_recorded`` the pair stays)."""
    if state.policy.cow_pairs == "as_recorded":
        return state
    kept = tuple(pair for pair in state.pending_cows if pair[1] != block)
    if len(kept) == len(state.pending_cows):  # most calls: no copy into it was pending
        return state
    return replace(state, pending_cows=kept)
