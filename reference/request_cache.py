"""The cache map of the request level (``specs/request_level.md`` §1): ``(group, hash) ->
blocks`` in insertion order. Two requests that computed one prefix at once both cache their own
block under its key; nothing is deduplicated, and a lookup finds the block cached first."""

from __future__ import annotations

from dataclasses import replace

from pagedkv.reference.request_state import RequestState, with_block, with_event
from pagedkv.specs.request_types import BlockRemoved
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockHash, BlockId


def lookup(state: RequestState, key: CachedKey) -> BlockId | None:
    """The earliest-inserted block still cached under ``key``."""
    found = state.cache.get(key, ())
    return found[0] if found else None


def cached_as(state: RequestState, block: BlockId, key: CachedKey) -> bool:
    """Whether ``block`` is cached under ``key`` (what an offered hit is checked against)."""
    return state.blocks[block].cached == key


def cache_block(
    state: RequestState, block: BlockId, key: CachedKey, parent: BlockHash | None
) -> RequestState:
    """Key ``block`` under ``key``, behind any block cached there already; ``parent`` is the
    hash ``key``'s is chained on (``None`` at a request's first block)."""
    state = with_block(state, block, replace(state.blocks[block], cached=key))
    return replace(
        state,
        cache=state.cache.set(key, (*state.cache.get(key, ()), block)),
        parents=state.parents.set(key, parent),
    )


def evict(state: RequestState, block: BlockId) -> RequestState:
    """Forget ``block``'s key, if it has one, with event ``BlockRemoved`` (an allocation takes
    a cached block from the free queue: §1)."""
    key = state.blocks[block].cached
    if key is None:
        return state
    rest = tuple(b for b in state.cache[key] if b != block)
    if rest:
        state = replace(state, cache=state.cache.set(key, rest))
    else:
        state = replace(state, cache=state.cache.delete(key), parents=state.parents.delete(key))
    state = with_block(state, block, replace(state.blocks[block], cached=None))
    return with_event(state, BlockRemoved((key.block_hash,), key.group))
