"""The block space manager's operations as typed calls (``specs/call.py``): one constructor per
operation of ``specs/operations.py``, with the parameters of its ``BlockSpaceManager`` method in
``specs/interface.py``, so that mypy checks every call a machine makes. The call records every
argument, defaults included."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pagedkv.specs.call import Call
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    Token,
)

T = TypeVar("T")
ManagerCall = Call[BlockSpaceManager, T]


def can_allocate(
    prompt: Sequence[Token],
    num_lookahead_slots: int = 0,
    encoder_prompt: Sequence[Token] | None = None,
) -> ManagerCall[AllocStatus]:
    args = (prompt, num_lookahead_slots, encoder_prompt)
    return Call("can_allocate", args, lambda side: side.can_allocate)


def allocate(
    group_id: int,
    seq_ids: Sequence[int],
    prompt: Sequence[Token],
    extra_key: ExtraKey = NO_EXTRA_KEY,
    encoder_prompt: Sequence[Token] | None = None,
) -> ManagerCall[None]:
    args = (group_id, seq_ids, prompt, extra_key, encoder_prompt)
    return Call("allocate", args, lambda side: side.allocate)


def can_append_slots(
    group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
) -> ManagerCall[bool]:
    args = (group_id, num_new_tokens, num_lookahead_slots)
    return Call("can_append_slots", args, lambda side: side.can_append_slots)


def append_slots(
    seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
) -> ManagerCall[list[CopyPair]]:
    args = (seq_id, tokens, num_lookahead_slots)
    return Call("append_slots", args, lambda side: side.append_slots)


def fork(parent_id: int, child_id: int) -> ManagerCall[None]:
    return Call("fork", (parent_id, child_id), lambda side: side.fork)


def free(seq_id: int) -> ManagerCall[None]:
    return Call("free", (seq_id,), lambda side: side.free)


def can_swap_out(group_id: int) -> ManagerCall[AllocStatus]:
    return Call("can_swap_out", (group_id,), lambda side: side.can_swap_out)


def can_swap_in(group_id: int, num_lookahead_slots: int = 0) -> ManagerCall[AllocStatus]:
    return Call("can_swap_in", (group_id, num_lookahead_slots), lambda side: side.can_swap_in)


def swap_out(group_id: int) -> ManagerCall[list[CopyPair]]:
    return Call("swap_out", (group_id,), lambda side: side.swap_out)


def swap_in(group_id: int) -> ManagerCall[list[CopyPair]]:
    return Call("swap_in", (group_id,), lambda side: side.swap_in)


def get_block_table(seq_id: int) -> ManagerCall[list[BlockId]]:
    return Call("get_block_table", (seq_id,), lambda side: side.get_block_table)


def get_cross_block_table(group_id: int) -> ManagerCall[list[BlockId]]:
    return Call("get_cross_block_table", (group_id,), lambda side: side.get_cross_block_table)


def get_num_free_gpu_blocks() -> ManagerCall[int]:
    return Call("get_num_free_gpu_blocks", (), lambda side: side.get_num_free_gpu_blocks)


def get_num_free_cpu_blocks() -> ManagerCall[int]:
    return Call("get_num_free_cpu_blocks", (), lambda side: side.get_num_free_cpu_blocks)


def access_all_blocks_in_seq(seq_id: int, now: float) -> ManagerCall[None]:
    args = (seq_id, now)
    return Call("access_all_blocks_in_seq", args, lambda side: side.access_all_blocks_in_seq)


def mark_blocks_as_computed(group_id: int) -> ManagerCall[None]:
    return Call("mark_blocks_as_computed", (group_id,), lambda side: side.mark_blocks_as_computed)


def get_common_computed_block_ids(seq_ids: Sequence[int]) -> ManagerCall[list[BlockId]]:
    args = (seq_ids,)
    return Call(
        "get_common_computed_block_ids", args, lambda side: side.get_common_computed_block_ids
    )


def get_num_cached_tokens(seq_id: int) -> ManagerCall[int]:
    return Call("get_num_cached_tokens", (seq_id,), lambda side: side.get_num_cached_tokens)


def get_prefix_cache_hit_rate(device: Device) -> ManagerCall[float]:
    args = (device,)
    return Call("get_prefix_cache_hit_rate", args, lambda side: side.get_prefix_cache_hit_rate)


def reset_prefix_cache(device: Device | None = None) -> ManagerCall[bool]:
    return Call("reset_prefix_cache", (device,), lambda side: side.reset_prefix_cache)


MANAGER_CALLS: dict[str, Callable[..., ManagerCall[Any]]] = {
    constructor.__name__: constructor
    for constructor in (
        can_allocate,
        allocate,
        can_append_slots,
        append_slots,
        fork,
        free,
        can_swap_out,
        can_swap_in,
        swap_out,
        swap_in,
        get_block_table,
        get_cross_block_table,
        get_num_free_gpu_blocks,
        get_num_free_cpu_blocks,
        access_all_blocks_in_seq,
        mark_blocks_as_computed,
        get_common_computed_block_ids,
        get_num_cached_tokens,
        get_prefix_cache_hit_rate,
        reset_prefix_cache,
    )
}
"""Each constructor under its operation's name, in the table's order: where a call comes as
data (a trace read from JSON, a soak's or a bench's drawn step), ``MANAGER_CALLS[name](*args)``
builds it."""
