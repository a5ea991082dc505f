"""Which free block an allocation takes next (policy ``request_eviction``).

vLLM v1 takes the front of the free queue (``specs/request_level.md`` §1), evicting it if it is
cached. SGLang's radix cache evicts only leaves, least recently used first
(``specs/radix_cache.md`` §4): in hash-chain terms, a cached block goes only when no free cached
block extends it, or when another block keeps its key cached. The free queue's order stands for
recency in both: uncached blocks first, then cached ones in the order they were given back.
"""

from __future__ import annotations

from pagedkv.reference.request_state import RequestState
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockId


def extends(state: RequestState, block: BlockId, key: CachedKey) -> bool:
    """Whether ``block`` is cached under a key chained directly on ``key``, in its group."""
    own = state.blocks[block].cached
    return own is not None and own.group == key.group and state.parents.get(own) == key.block_hash


def may_evict(state: RequestState, block: BlockId) -> bool:
    """Whether taking free ``block`` leaves every cached chain whole: it is uncached, or another
    block keeps its key, or no free cached block extends it (it is a leaf)."""
    key = state.blocks[block].cached
    if key is None or len(state.cache[key]) > 1:
        return True
    return not any(extends(state, other, key) for other in state.free_queue)


def next_to_take(state: RequestState) -> BlockId:
    """The free block an allocation takes next: the queue's front (``free_queue``), or the first
    block of the queue that may be evicted (``leaf_lru``). A non-empty queue always has one: a
    chain of free cached blocks ends somewhere.

    The caller has checked that the queue is not empty."""
    if state.policy.request_eviction == "free_queue":
        return state.free_queue[0]
    return next(block for block in state.free_queue if may_evict(state, block))
