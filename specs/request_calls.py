"""The request level's operations as typed calls (``specs/call.py``): one constructor per
``RequestKVManager`` method of ``specs/interface.py``, with its parameters, so that mypy checks
every call a machine makes. The call records every argument, defaults included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from pagedkv.specs.call import Call
from pagedkv.specs.interface import RequestKVManager, RequestPreemption
from pagedkv.specs.request_types import GroupBlocks, KVEvent, Request, RequestId

T = TypeVar("T")
RequestCall = Call[RequestKVManager, T]


def get_computed_blocks(request: Request) -> RequestCall[tuple[GroupBlocks, int]]:
    return Call("get_computed_blocks", (request,), lambda side: side.get_computed_blocks)


def allocate_slots(
    request: Request,
    num_new_tokens: int,
    num_new_computed_tokens: int = 0,
    new_computed_blocks: GroupBlocks | None = None,
    num_lookahead_tokens: int = 0,
) -> RequestCall[GroupBlocks | None]:
    args = (
        request,
        num_new_tokens,
        num_new_computed_tokens,
        new_computed_blocks,
        num_lookahead_tokens,
    )
    return Call("allocate_slots", args, lambda side: side.allocate_slots)


def free(request_id: RequestId) -> RequestCall[None]:
    return Call("free", (request_id,), lambda side: side.free)


def preempt(request_id: RequestId) -> RequestCall[None]:
    """The optional operation: made only on a side that offers it (``RequestPreemption``)."""
    return Call("preempt", (request_id,), lambda side: cast(RequestPreemption, side).preempt)


def get_block_ids(request_id: RequestId) -> RequestCall[GroupBlocks]:
    return Call("get_block_ids", (request_id,), lambda side: side.get_block_ids)


def num_free_blocks() -> RequestCall[int]:
    return Call("num_free_blocks", (), lambda side: side.num_free_blocks)


def usage() -> RequestCall[float]:
    return Call("usage", (), lambda side: side.usage)


def reset_prefix_cache() -> RequestCall[bool]:
    return Call("reset_prefix_cache", (), lambda side: side.reset_prefix_cache)


def take_events() -> RequestCall[list[KVEvent]]:
    return Call("take_events", (), lambda side: side.take_events)


REQUEST_CALLS: dict[str, Callable[..., RequestCall[Any]]] = {
    constructor.__name__: constructor
    for constructor in (
        get_computed_blocks,
        allocate_slots,
        free,
        preempt,
        get_block_ids,
        num_free_blocks,
        usage,
        reset_prefix_cache,
        take_events,
    )
}
"""Each constructor under its operation's name, in the protocol's order: where a call comes as
data (a trace read from JSON), ``REQUEST_CALLS[name](*args)`` builds it."""
