"""The block pool operations, as pure functions of a ``PoolState``.

Each function validates all of its input before it computes anything, returns the new state (and
its result), and never changes the state it was given. ``specs/block_pool.md`` is the prose twin
of this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from itertools import takewhile

from pagedkv.reference.allocation import discard_pending_copies, take_block
from pagedkv.reference.hash_index import forget_hash, index_block
from pagedkv.reference.pool_state import (
    PoolState,
    accessed,
    callers_count,
    counted,
    facts,
    is_computed,
    known_block,
    live_block,
    new_state,
    with_block,
)
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import DoubleFreeError, UnsupportedError
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.pool_view import BLANK
from pagedkv.specs.types import NEVER_ACCESSED, BlockId, CopyPair, PoolConfig, Token
from pagedkv.specs.validation import (
    check_append,
    check_appendable,
    check_block_id,
    check_block_ids,
    check_chains,
    check_full_block,
    check_pool_config,
    check_prefix,
    check_time,
)


def create(config: PoolConfig, policy: Policy = PAGEDKV) -> PoolState:
    check_pool_config(config)
    return _with_own_null_block(new_state(config, policy))


def _with_own_null_block(state: PoolState) -> PoolState:
    """Policy ``pool_null_block``: the pool keeps its first block for itself, held for good."""
    if not state.policy.pool_null_block:
        return state
    state, null_block = take_block(state, min(state.config.block_ids))
    return replace(state, null_block=null_block)


# --- references: taking and releasing -------------------------------------------------------


def _acquire(state: PoolState, block: BlockId) -> PoolState:
    """One more reference; a cached block at count 0 leaves the evictor by this."""
    view = state.blocks[block]
    return with_block(state, block, counted(view, view.ref_count + 1))


def _release(state: PoolState, block: BlockId) -> PoolState:
    """One reference fewer. At zero a hashed block stays cached (evictable); any other block
    returns to the free list blank, and its contents, pending copies into it included, are gone."""
    view = state.blocks[block]
    view = counted(view, view.ref_count - 1)
    if view.ref_count == 0 and state.policy.eviction == "free_list":
        state = replace(  # every block nobody holds waits in one line, cached or not
            state,
            released=state.released.set(block, state.release_clock),
            release_clock=state.release_clock + 1,
        )
    if view.ref_count == 0 and view.content_hash is not None:
        if not state.policy.keep_freed_cache:  # its hash goes with its last holder
            state = forget_hash(with_block(state, block, view), block)
            return replace(state, promoted=state.promoted - {block})
        if state.policy.eviction == "release_order":
            state = replace(
                state,
                released=state.released.set(block, state.release_clock),
                release_clock=state.release_clock + 1,
            )
    if view.ref_count == 0 and view.content_hash is None:
        if block in state.promoted:
            state = replace(state, promoted=state.promoted - {block})
        return with_block(discard_pending_copies(state, block), block, BLANK)
    return with_block(state, block, view)


def _take_cached(state: PoolState, block: BlockId) -> PoolState:
    """A hit, or a dedup: one more holder of a cached block. Under ``computed_marks=
    promoted_batch`` a block taken back from the evictor counts as computed, and under
    ``revival_access=reset`` its last access starts over."""
    view = state.blocks[block]
    if view.ref_count == 0:
        if block in state.released:
            state = replace(state, released=state.released.delete(block))
        if state.policy.computed_marks == "promoted_batch":
            view = replace(view, computed=True)
        if state.policy.revival_access == "reset":
            view = replace(view, last_accessed=NEVER_ACCESSED)
        state = with_block(state, block, view)
    return _acquire(state, block)


# --- allocation --------------------------------------------------------------------------------


def allocate_mutable(state: PoolState, choice: BlockId | None = None) -> tuple[PoolState, BlockId]:
    """An empty block the caller may append to."""
    return take_block(state, choice)


def allocate_immutable(
    state: PoolState, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
) -> tuple[PoolState, BlockId]:
    """A full block of ``tokens`` after ``prefix``: the cached block when there is one (a hit),
    else a new block that becomes the cached block for its hash. ``choice`` is only consulted
    when a block is allocated. A hit keeps the block's computed mark as it is: a block filled in
    this very step holds no KV until the model has run and ``mark_computed`` says so."""
    checked = check_full_block(tokens, state.config.block_size)
    check_prefix(prefix, state.config.block_size)
    if not state.config.enable_caching:
        state, block = take_block(state, choice)
        return with_block(state, block, replace(state.blocks[block], tokens=tuple(checked))), block
    content_hash = prefix.child_hash(checked)
    state = replace(state, queries=state.queries + 1)
    hit = state.cached.get(content_hash)
    if hit is not None:
        return _take_cached(replace(state, hits=state.hits + 1), hit), hit
    state, block = take_block(state, choice)
    return _cache(state, block, prefix, checked), block


def _cache(state: PoolState, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> PoolState:
    """Give a full block its hash and make it the cached block for that hash."""
    content_hash = prefix.child_hash(tokens)
    view = replace(
        state.blocks[block], tokens=tuple(tokens), content_hash=content_hash, prefix=prefix
    )
    state = with_block(state, block, view)
    state = index_block(state, block, content_hash)
    return replace(state, promoted=state.promoted | {block})


# --- appending, promotion and copy-on-write ----------------------------------------------------


def cow_if_not_appendable(
    state: PoolState, block: BlockId, choice: BlockId | None = None
) -> tuple[PoolState, BlockId]:
    """The block to append into: ``block`` itself when only one holder has it, else a new copy
    (the caller's reference moves to the copy and the pair waits for the copy kernel)."""
    check_appendable(state.config, block, partial(facts, state))
    view = state.blocks[block]
    if view.ref_count == 1:
        return state, block
    if not state.policy.copy_on_write:
        raise UnsupportedError(
            f"block {block} is shared ({view.ref_count} holders): under this policy a shared"
            " block is never written (no copy-on-write)"
        )
    state, copy = take_block(state, choice)
    state = with_block(state, copy, replace(state.blocks[copy], tokens=view.tokens))
    state = _release(state, block)
    return _record_copy(state, block, copy), copy


def _record_copy(state: PoolState, source: BlockId, destination: BlockId) -> PoolState:
    """Queue a copy for the kernel, which runs all pending copies at once (every source read
    before any destination is written). A source that is itself still waiting for its own copy
    holds no data yet, so the new copy reads from where that one would."""
    waiting_for = [s for s, d in state.pending_cows if d == source]
    if waiting_for and state.policy.cow_pairs == "pending":
        source = waiting_for[0]
    return replace(state, pending_cows=(*state.pending_cows, (source, destination)))


def append_tokens(
    state: PoolState,
    block: BlockId,
    prefix: Prefix,
    tokens: Sequence[Token],
    choice: BlockId | None = None,
) -> tuple[PoolState, BlockId]:
    """Append ``tokens`` to ``block`` and return the block the caller holds now. A block that
    fills gets its hash (``prefix`` is what precedes it); if another block already holds that
    hash, the caller switches to it and releases its own (dedup; policy ``promotion``). Otherwise
    a shared block is copied first (copy-on-write) and the caller appends into its copy."""
    block, checked = check_append(state.config, block, prefix, tokens, partial(facts, state))
    filled = (*state.blocks[block].tokens, *checked)
    fills = len(filled) == state.config.block_size
    content_hash = (
        prefix.child_hash(filled)
        if state.config.enable_caching and fills and state.policy.promotion != "keep"
        else None
    )
    cached = None if content_hash is None else state.cached.get(content_hash)
    if cached is not None and state.policy.promotion == "dedup":
        return _switch_to_cached(state, block, cached), cached
    state, target = cow_if_not_appendable(state, block, choice)
    # promotion=copy_then_dedup: the copy is made, then given up for the cached block, looked
    # up once the copy is made (it may have evicted that very block: then the copy keeps it)
    cached = None if content_hash is None else state.cached.get(content_hash)
    if cached is not None:
        return _switch_to_cached(state, target, cached), cached
    state = with_block(state, target, replace(state.blocks[target], tokens=filled))
    if state.config.enable_caching and fills:
        state = _cache(state, target, prefix, filled)
    return state, target


def _switch_to_cached(state: PoolState, block: BlockId, cached: BlockId) -> PoolState:
    """Dedup: the caller's reference moves from its own block to the cached one (no copy is
    needed even when its block is shared: the cached block has, or will have, the content)."""
    return _take_cached(_release(state, block), cached)


def clear_copy_on_writes(state: PoolState) -> tuple[PoolState, list[CopyPair]]:
    """The (source, destination) pairs the copy kernel must run, in order; the list empties."""
    return replace(state, pending_cows=()), list(state.pending_cows)


# --- freeing and forking -----------------------------------------------------------------------


def free(state: PoolState, block: BlockId) -> PoolState:
    check_block_id(state.config, block)
    if callers_count(state, block) == 0:
        raise DoubleFreeError(f"block {block} is already free (ref count 0)")
    return _release(state, block)


def fork(state: PoolState, chain: Sequence[BlockId]) -> tuple[PoolState, list[BlockId]]:
    """Share every block of ``chain`` with one more holder; nothing is allocated."""
    blocks = check_block_ids(state.config, chain)
    for block in blocks:
        live_block(state, block)
    for block in blocks:
        state = _acquire(state, block)
    return state, blocks


# --- access times, computed marks and the computed prefix --------------------------------------


def mark_accessed(state: PoolState, blocks: Sequence[BlockId], now: float) -> PoolState:
    """Record ``now`` as the last access of held or cached blocks (it orders eviction)."""
    time = check_time(now)
    checked = check_block_ids(state.config, blocks)
    for block in checked:
        known_block(state, block)
    for block in checked:
        state = with_block(state, block, accessed(state.blocks[block], time))
    return state


def mark_computed(state: PoolState, blocks: Sequence[BlockId]) -> PoolState:
    """Record that the KV of these blocks is written. Only full blocks of a caching pool keep
    the mark: a partial block will still change, and without caching nothing is reused."""
    checked = check_block_ids(state.config, blocks)
    for block in checked:
        known_block(state, block)
    if not state.config.enable_caching:
        return state
    if state.policy.computed_marks == "promoted_batch":
        checked = sorted(b for b in state.promoted if state.blocks[b].ref_count > 0)
        state = replace(state, promoted=frozenset())
    for block in checked:
        view = state.blocks[block]
        if len(view.tokens) == state.config.block_size:
            state = with_block(state, block, replace(view, computed=True))
    return state


def common_computed_prefix(state: PoolState, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
    """The longest run of leading computed blocks that every chain shares. A chain's last block
    never counts: the model must compute at least one token of every sequence."""
    checked = check_chains(state.config, chains)
    for chain in checked:
        for block in chain:
            live_block(state, block)
    if not state.config.enable_caching or not checked:
        return []
    runs = [list(takewhile(partial(is_computed, state), chain[:-1])) for chain in checked]
    if state.policy.common_prefix == "nonempty_runs" and len(runs) > 1:
        runs = [run for run in runs if run] or [[]]
    common: list[BlockId] = []
    for column in zip(*runs, strict=False):
        if any(b != column[0] for b in column):
            break
        common.append(column[0])
    return common


# --- counts, hit rate and reset ----------------------------------------------------------------


def num_free_blocks(state: PoolState) -> int:
    """Blocks an allocation could take now: free plus evictable, i.e. those nobody holds."""
    return len([view for view in state.blocks.values() if view.ref_count == 0])


def hit_rate(state: PoolState) -> float:
    """Hits over lookups of ``allocate_immutable``; 0.0 before any, -1.0 without caching.

    pre: 0 <= state.hits <= state.queries
    post: _ == -1.0 or 0.0 <= _ <= 1.0
    """
    if not state.config.enable_caching:
        return -1.0
    return state.hits / state.queries if state.queries else 0.0


def reset_prefix_cache(state: PoolState) -> tuple[PoolState, bool]:
    """Forget every cached block, only when no block is in use (else nothing changes)."""
    if any(view.ref_count > 0 for b, view in state.blocks.items() if b != state.null_block):
        return state, False
    return _with_own_null_block(new_state(state.config, state.policy)), True
