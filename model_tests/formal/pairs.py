"""Pure helpers of the reference beside their optimized counterparts, for ``crosshair
diffbehavior`` (``make crosshair``).

Each pair has one signature and returns the same plain value on both sides, so that any input on
which the two differ is a counterexample. Inputs outside what the managers can produce (a block
size of 0, a negative count, a list longer than a tiny pool) return ``None`` on both sides before
either helper runs, so the search spends its time on inputs that matter.
"""

from __future__ import annotations

import math

from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.block_table import BlockTable, SequenceGroup, num_out_of_window, packed
from pagedkv.optimized.evictor import Evictor
from pagedkv.reference import block_pool
from pagedkv.reference.allocation import first_to_evict, own_eviction_pick
from pagedkv.reference.block_table import out_of_window, prefix_at
from pagedkv.reference.pool_state import new_state
from pagedkv.specs.content_hash import ROOT, Prefix
from pagedkv.specs.errors import OutOfBlocksError
from pagedkv.specs.pool_view import BlockView
from pagedkv.specs.types import MAX_TOKEN, NEVER_ACCESSED, Device, ExtraKey, PoolConfig

MAX_BLOCKS = 6
"""The largest pool or table a pair is asked about: bounded loops keep each path short."""

# --- which blocks a sliding window releases --------------------------------------------------


def _window_inputs(num_tokens: int, window: int, block_size: int, num_blocks: int) -> bool:
    return num_tokens >= 0 and window >= 1 and block_size >= 1 and 0 <= num_blocks <= MAX_BLOCKS


def reference_window_release(
    num_tokens: int, window: int, block_size: int, num_blocks: int
) -> list[int] | None:
    if not _window_inputs(num_tokens, window, block_size, num_blocks):
        return None
    return out_of_window(num_blocks, num_tokens, window, block_size)


def optimized_window_release(
    num_tokens: int, window: int, block_size: int, num_blocks: int
) -> list[int] | None:
    """The optimized table releases ``range(num_released, num_out)``: over a table's life, the
    leading ``num_out`` blocks."""
    if not _window_inputs(num_tokens, window, block_size, num_blocks):
        return None
    return list(range(num_out_of_window(num_tokens, window, block_size, num_blocks)))


# --- the order in which cached blocks are evicted ----------------------------------------------

Ranks = list[tuple[float, int]]
"""Block ``i`` is evictable with last access ``ranks[i][0]`` and ``ranks[i][1]`` hashed tokens.
Times are floats, as the pool keeps them: given ints that the helpers convert with ``float``,
CrossHair never made two ranks equal (the ties that ``own_eviction_pick`` breaks) and spent its
search on ``OverflowError``, raised alike on both sides."""
Events = list[tuple[int, float]]
"""``(block, time)``: the block is accessed again at ``time`` (re-ranked), or with a negative
``time`` held again (it leaves the evictor)."""


def _eviction_inputs(ranks: Ranks, events: Events) -> bool:
    return (
        len(ranks) <= MAX_BLOCKS
        and len(events) <= MAX_BLOCKS
        and all(NEVER_ACCESSED <= time < math.inf and hashed >= 0 for time, hashed in ranks)
        and all(-math.inf < time < math.inf for _, time in events)
    )


def reference_eviction_order(ranks: Ranks, events: Events) -> list[int] | None:
    """What ``take_block`` evicts, one allocation after another: the reference's own pick
    among ``first_to_evict``."""
    if not _eviction_inputs(ranks, events):
        return None
    views = {
        block: BlockView(last_accessed=time, prefix=Prefix(num_tokens=hashed))
        for block, (time, hashed) in enumerate(ranks)
    }
    for block, time in events:
        if block in views and time >= 0:
            views[block] = BlockView(last_accessed=time, prefix=views[block].prefix)
        elif block in views:
            del views[block]
    order = []
    while views:
        chosen = own_eviction_pick(first_to_evict(views))
        order.append(chosen)
        del views[chosen]
    return order


def optimized_eviction_order(ranks: Ranks, events: Events) -> list[int] | None:
    """The evictor's pops, after the same accesses (a re-add, as ``mark_accessed`` does) and
    holds (a remove)."""
    if not _eviction_inputs(ranks, events):
        return None
    evictor = Evictor()
    for block, (time, hashed) in enumerate(ranks):
        evictor.add(block, time, hashed)
    for block, time in events:
        if block in evictor and time >= 0:
            evictor.add(block, time, ranks[block][1])
        elif block in evictor:
            evictor.remove(block)
    order = []
    while len(evictor):
        order.append(evictor.pop())
    return order


# --- which free block an allocation takes ------------------------------------------------------


def _allocation_inputs(num_blocks: int, events: list[int]) -> bool:
    return 1 <= num_blocks <= MAX_BLOCKS and len(events) <= 2 * MAX_BLOCKS


def reference_allocation_order(num_blocks: int, events: list[int]) -> list[int] | None:
    """``events``: a negative number allocates a block (``-1`` when none is left), a block id
    frees that block if it is held. Returns the ids allocated, in order."""
    if not _allocation_inputs(num_blocks, events):
        return None
    state = new_state(PoolConfig(num_blocks, 1, enable_caching=False))
    taken: list[int] = []
    for event in events:
        if event < 0:
            try:
                state, block = block_pool.allocate_mutable(state)
            except OutOfBlocksError:
                block = -1
            taken.append(block)
        elif 0 <= event < num_blocks and state.blocks[event].ref_count:
            state = block_pool.free(state, event)
    return taken


def optimized_allocation_order(num_blocks: int, events: list[int]) -> list[int] | None:
    if not _allocation_inputs(num_blocks, events):
        return None
    pool = OptimizedBlockPool(PoolConfig(num_blocks, 1, enable_caching=False))
    taken: list[int] = []
    for event in events:
        if event < 0:
            try:
                block = pool.allocate_mutable()
            except OutOfBlocksError:
                block = -1
            taken.append(block)
        elif 0 <= event < num_blocks and pool.block(event).ref_count:
            pool.free(event)
    return taken


# --- the prefix (chained hash) of each block of a table ----------------------------------------


def _prefix_inputs(tokens: list[int], split: int, block_size: int) -> bool:
    return (
        1 <= block_size <= 3
        and 1 <= split <= len(tokens) <= 2 * MAX_BLOCKS
        and all(0 <= token <= MAX_TOKEN for token in tokens)
    )


def reference_block_prefixes(tokens: list[int], split: int, block_size: int) -> list[Prefix] | None:
    """The prefix of every block that follows only full blocks, each from the root."""
    if not _prefix_inputs(tokens, split, block_size):
        return None
    key = ExtraKey()
    return [prefix_at(tokens, i, block_size, key) for i in range(len(tokens) // block_size + 1)]


def optimized_block_prefixes(tokens: list[int], split: int, block_size: int) -> list[Prefix] | None:
    """The prefixes a table's hashes stand for as it goes: a prompt of ``tokens[:split]``, then
    the rest appended, each block hashed once from the one before."""
    if not _prefix_inputs(tokens, split, block_size):
        return None
    key = ExtraKey()
    pool = OptimizedBlockPool(PoolConfig(2 * MAX_BLOCKS, block_size))
    table = BlockTable.for_prompt(SequenceGroup(0, (), Device.GPU, key), pool, tokens[:split])
    table.append(pool, packed(tokens[split:]), 0)
    # The table keeps its last full block's hash (the next block's parent); the pool, the hash
    # each earlier block was filled with.
    full = len(tokens) // block_size
    recorded = [pool.hash_of(block) for block in table.blocks[: full - 1]]
    hashes = [b"" if found is None else found for found in recorded]
    parents = [ROOT, *hashes, *([table.last_hash] if full else [])]
    return [Prefix(parents[i], i * block_size, key) for i in range(len(tokens) // block_size + 1)]
