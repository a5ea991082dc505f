"""The free queue (``specs/request_level.md`` §1, §7): every block nobody holds, in the order
allocation takes them. It is also the evictor: a cached block taken at the front is evicted on
the way. Giving blocks back puts uncached ones at the front (reused first) and cached ones at
the back (kept longest), each in the order given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pagedkv.reference.request_cache import evict
from pagedkv.reference.request_eviction import next_to_take
from pagedkv.reference.request_state import RequestState, ref_count, with_block
from pagedkv.specs.request_types import NULL_BLOCK
from pagedkv.specs.types import BlockId


def _with_ref_count(state: RequestState, block: BlockId, count: int) -> RequestState:
    return with_block(state, block, replace(state.blocks[block], ref_count=count))


def take_from_front(state: RequestState, count: int) -> tuple[RequestState, list[BlockId]]:
    """``count`` blocks from the queue, one by one from the front (the first that may be
    evicted, under policy ``request_eviction=leaf_lru``), each evicted if cached, held once
    (§1).

    The caller has checked that ``count`` blocks are free."""
    taken: list[BlockId] = []
    for _ in range(count):
        block = next_to_take(state)
        queue = tuple(b for b in state.free_queue if b != block)
        state = _with_ref_count(evict(replace(state, free_queue=queue), block), block, 1)
        taken.append(block)
    return state, taken


def touch(state: RequestState, blocks: Sequence[BlockId]) -> RequestState:
    """One more holder for each block of a hit; a block nobody held leaves the free queue (its
    key stays: that is what makes it a hit). The null block is nobody's."""
    for block in blocks:
        if block == NULL_BLOCK:
            continue
        if ref_count(state, block) == 0:
            queue = tuple(b for b in state.free_queue if b != block)
            state = replace(state, free_queue=queue)
        state = _with_ref_count(state, block, ref_count(state, block) + 1)
    return state


def give_back(state: RequestState, blocks: Sequence[BlockId]) -> RequestState:
    """One holder fewer for each block, in the order given (§7). Those nobody holds any more go
    back to the queue: uncached ones (all of them without caching) to the front in the order
    given, so the first given is reused first; cached ones to the back in the order given, so
    the first given is evicted first."""
    to_front: list[BlockId] = []
    to_back: list[BlockId] = []
    for block in blocks:
        if block == NULL_BLOCK:
            continue
        count = ref_count(state, block) - 1
        state = _with_ref_count(state, block, count)
        if count == 0:
            cached = state.config.enable_caching and state.blocks[block].cached is not None
            (to_back if cached else to_front).append(block)
    return replace(state, free_queue=(*to_front, *state.free_queue, *to_back))
