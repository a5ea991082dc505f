"""The hash index: which block a content hash names (pool §2, ``cached``).

Under pagedkv's policy a hash names one block and a filled block whose hash is cached elsewhere
dedups onto it, so there is never a second. Under ``promotion=keep`` (append-only engines) the
filled block keeps its id and is cached as well: policy ``duplicates`` says whether the block
cached first stays the one a lookup finds (vLLM v1; the later ones wait in ``duplicates``) or the
latest replaces it (nano-vllm; the earlier one simply loses its hash).
"""

from __future__ import annotations

from dataclasses import replace

from immutables import Map

from pagedkv.reference.pool_state import PoolState, with_block
from pagedkv.specs.pool_view import BLANK
from pagedkv.specs.types import BlockHash, BlockId


def index_block(state: PoolState, block: BlockId, content_hash: BlockHash) -> PoolState:
    """``block`` (already holding the hash) becomes a holder of ``content_hash``."""
    found = state.cached.get(content_hash)
    if found is None or found == block:
        return replace(state, cached=state.cached.set(content_hash, block))
    if state.policy.duplicates == "first_stays":
        later = (*state.duplicates.get(content_hash, ()), block)
        return replace(state, duplicates=state.duplicates.set(content_hash, later))
    state = forget_hash(state, found)
    return replace(state, cached=state.cached.set(content_hash, block))


def unindex_block(state: PoolState, block: BlockId) -> PoolState:
    """``block`` stops holding its hash in the index; a second holder, if any, takes its place."""
    content_hash = state.blocks[block].content_hash
    if content_hash is None:
        return state
    later = state.duplicates.get(content_hash, ())
    if block in later:
        rest = tuple(b for b in later if b != block)
        return replace(state, duplicates=_set_or_delete(state, content_hash, rest))
    if state.cached.get(content_hash) != block:
        return state
    if later:
        state = replace(state, cached=state.cached.set(content_hash, later[0]))
        return replace(state, duplicates=_set_or_delete(state, content_hash, later[1:]))
    return replace(state, cached=state.cached.delete(content_hash))


def forget_hash(state: PoolState, block: BlockId) -> PoolState:
    """``block`` loses its hash: out of the index, and blank if nobody holds it."""
    state = unindex_block(state, block)
    view = state.blocks[block]
    if view.ref_count == 0:
        return with_block(state, block, BLANK)
    return with_block(state, block, replace(view, content_hash=None, prefix=None))


def _set_or_delete(
    state: PoolState, content_hash: BlockHash, blocks: tuple[BlockId, ...]
) -> Map[BlockHash, tuple[BlockId, ...]]:
    if blocks:
        return state.duplicates.set(content_hash, blocks)
    return state.duplicates.delete(content_hash)
