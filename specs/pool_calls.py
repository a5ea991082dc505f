"""The block pool's operations as typed calls (``specs/call.py``): one constructor per operation
of ``specs/operations.py``, with the parameters of its ``BlockPool`` method in
``specs/interface.py``, so that mypy checks every call a machine makes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from pagedkv.specs.call import Call
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.interface import BlockPool, PoolBatchFree, PoolChainAllocation, PoolEvents
from pagedkv.specs.request_types import KVEvent
from pagedkv.specs.types import BlockId, CopyPair, Token

T = TypeVar("T")
PoolCall = Call[BlockPool, T]


def allocate_mutable() -> PoolCall[BlockId]:
    return Call("allocate_mutable", (), lambda side: side.allocate_mutable)


def allocate_immutable(prefix: Prefix, tokens: Sequence[Token]) -> PoolCall[BlockId]:
    return Call("allocate_immutable", (prefix, tokens), lambda side: side.allocate_immutable)


def append_tokens(block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> PoolCall[BlockId]:
    return Call("append_tokens", (block, prefix, tokens), lambda side: side.append_tokens)


def free(block: BlockId) -> PoolCall[None]:
    return Call("free", (block,), lambda side: side.free)


def fork(chain: Sequence[BlockId]) -> PoolCall[list[BlockId]]:
    return Call("fork", (chain,), lambda side: side.fork)


def cow_if_not_appendable(block: BlockId) -> PoolCall[BlockId]:
    return Call("cow_if_not_appendable", (block,), lambda side: side.cow_if_not_appendable)


def clear_copy_on_writes() -> PoolCall[list[CopyPair]]:
    return Call("clear_copy_on_writes", (), lambda side: side.clear_copy_on_writes)


def mark_accessed(blocks: Sequence[BlockId], now: float) -> PoolCall[None]:
    return Call("mark_accessed", (blocks, now), lambda side: side.mark_accessed)


def mark_computed(blocks: Sequence[BlockId]) -> PoolCall[None]:
    return Call("mark_computed", (blocks,), lambda side: side.mark_computed)


def common_computed_prefix(chains: Sequence[Sequence[BlockId]]) -> PoolCall[list[BlockId]]:
    return Call("common_computed_prefix", (chains,), lambda side: side.common_computed_prefix)


def num_free_blocks() -> PoolCall[int]:
    return Call("num_free_blocks", (), lambda side: side.num_free_blocks)


def hit_rate() -> PoolCall[float]:
    return Call("hit_rate", (), lambda side: side.hit_rate)


def reset_prefix_cache() -> PoolCall[bool]:
    return Call("reset_prefix_cache", (), lambda side: side.reset_prefix_cache)


def take_events() -> PoolCall[list[KVEvent]]:
    """The optional operation: made only on a pool that offers it (``PoolEvents``)."""
    return Call("take_events", (), lambda side: cast(PoolEvents, side).take_events)


def allocate_immutable_chain(
    prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
) -> PoolCall[list[BlockId]]:
    """An optional operation: made only on a pool that offers it (``PoolChainAllocation``)."""
    return Call(
        "allocate_immutable_chain",
        (prefix, token_blocks),
        lambda side: cast(PoolChainAllocation, side).allocate_immutable_chain,
    )


def free_blocks(blocks: Sequence[BlockId]) -> PoolCall[None]:
    """An optional operation: made only on a pool that offers it (``PoolBatchFree``)."""
    return Call("free_blocks", (blocks,), lambda side: cast(PoolBatchFree, side).free_blocks)


POOL_CALLS: dict[str, Callable[..., PoolCall[Any]]] = {
    constructor.__name__: constructor
    for constructor in (
        allocate_mutable,
        allocate_immutable,
        append_tokens,
        free,
        fork,
        cow_if_not_appendable,
        clear_copy_on_writes,
        mark_accessed,
        mark_computed,
        common_computed_prefix,
        num_free_blocks,
        hit_rate,
        reset_prefix_cache,
        take_events,
        allocate_immutable_chain,
        free_blocks,
    )
}
"""Each constructor under its operation's name, in the table's order: where a call comes as
data (a trace read from JSON), ``POOL_CALLS[name](*args)`` builds it."""
