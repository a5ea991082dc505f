"""The KV events a pool publishes: what its hash index gained and lost (``block_pool.md`` §9).

A router mirrors a pool's cache from its events alone. The pool's promise is therefore stated
over the index itself: every call's events are, in order, one ``BlockRemoved`` for each holder
(a hash and the block holding it) the index lost, then one ``BlockStored`` for each it gained;
a reset that succeeds publishes ``AllBlocksCleared`` and nothing else. Deriving the events from
the states before and after a call keeps the reference pure and makes the promise hold by
construction.
"""

from __future__ import annotations

from pagedkv.reference.pool_state import PoolState
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import BlockHash, BlockId

POOL_GROUP = 0
"""A pool is one KV-cache group: its events name group 0."""

Holder = tuple[BlockHash, BlockId]


def holders(state: PoolState) -> set[Holder]:
    """Every (hash, block) the index holds: the cached block of each hash and its duplicates."""
    found = {(content_hash, block) for content_hash, block in state.cached.items()}
    for content_hash, blocks in state.duplicates.items():
        found.update((content_hash, block) for block in blocks)
    return found


def index_events(before: PoolState, after: PoolState) -> list[KVEvent]:
    """The events of one call that took the pool from ``before`` to ``after``: removals, then
    stores (each in block order, so that the order is the same in every run)."""
    if before.cached is after.cached and before.duplicates is after.duplicates:
        return []  # the index is a persistent map: a call that leaves it alone keeps it
    old, new = holders(before), holders(after)
    events: list[KVEvent] = [
        BlockRemoved((content_hash,), POOL_GROUP)
        for content_hash, _ in sorted(old - new, key=_by_block)
    ]
    events += [stored(after, block) for _, block in sorted(new - old, key=_by_block)]
    return events


def stored(state: PoolState, block: BlockId) -> BlockStored:
    """The ``BlockStored`` of a block that has just entered the index."""
    view = state.blocks[block]
    prefix = view.prefix
    assert view.content_hash is not None and prefix is not None
    return BlockStored(
        (view.content_hash,),
        None if prefix.num_tokens == 0 else prefix.hash,
        view.tokens,
        state.config.block_size,
        prefix.extra_key.lora_id,
        POOL_GROUP,
    )


def cleared() -> list[KVEvent]:
    return [AllBlocksCleared()]


def _by_block(holder: Holder) -> BlockId:
    return holder[1]
