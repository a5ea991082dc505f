"""Moving a group's blocks between devices (swap out to CPU, swap in to GPU).

Each distinct block moves once: the destination gets a block with the same contents (a cache hit
when the destination already holds that content), every further reference shares it, and every
reference to the source is released. The returned pairs are exactly the copies the swap kernel
must do: a destination that was a cache hit, or that holds no token yet, needs none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from immutables import Map

from reference import block_pool as pool_ops
from reference.allocation import Picker, lowest_id
from reference.block_table import prefix_at
from reference.manager_state import ManagerState, distinct_blocks, pool, with_pool
from reference.pool_state import PoolState
from specs.content_hash import Prefix
from specs.errors import OutOfBlocksError
from specs.manager_view import GroupView
from specs.types import BlockId, CopyPair, Device


def check_room(state: ManagerState, found: GroupView, to: Device) -> None:
    """A move takes at most one destination block per distinct block: check that up front, so
    that a swap either happens whole or not at all."""
    needed = len(distinct_blocks(state, found))
    free = pool_ops.num_free_blocks(pool(state, to))
    if needed > free:
        raise OutOfBlocksError(
            f"moving the group needs {needed} {to.value} blocks, only {free} are free"
        )


def move_group(
    state: ManagerState, group_id: int, to: Device, pick: Picker = lowest_id
) -> tuple[ManagerState, list[CopyPair]]:
    found = state.groups[group_id]
    check_room(state, found, to)
    source, destination = pool(state, found.device), pool(state, to)
    moved: dict[BlockId, BlockId] = {}
    pairs: list[CopyPair] = []

    def move(block: BlockId, prefix: Callable[[], Prefix]) -> BlockId:
        nonlocal source, destination
        if block == state.null_block:
            return block
        if block in moved:
            destination, _ = pool_ops.fork(destination, [moved[block]])
        else:
            destination, moved[block], copied = _copy_block(
                source, destination, block, prefix, pick
            )
            if copied:
                pairs.append((block, moved[block]))
        source = pool_ops.free(source, block)
        return moved[block]

    seqs = state.seqs
    for seq_id in found.seq_ids:
        table = seqs[seq_id]
        size = state.config.block_size
        extra = found.extra_key
        blocks = tuple(
            move(block, partial(prefix_at, table.tokens, index, size, extra))
            for index, block in enumerate(table.blocks)
        )
        seqs = seqs.set(seq_id, replace(table, blocks=blocks))
    cross = tuple(
        move(block, partial(Prefix, extra_key=found.extra_key)) for block in found.cross_blocks
    )
    state = with_pool(with_pool(state, found.device, source), to, destination)
    groups: Map[int, GroupView] = state.groups.set(
        group_id, replace(found, device=to, cross_blocks=cross)
    )
    return replace(state, seqs=seqs, groups=groups), pairs


def _copy_block(
    source: PoolState,
    destination: PoolState,
    block: BlockId,
    prefix: Callable[[], Prefix],
    pick: Picker,
) -> tuple[PoolState, BlockId, bool]:
    """A destination block with ``block``'s contents, and whether the kernel must copy them.
    ``prefix`` is only asked for when an unhashed block with tokens is re-appended."""
    view = source.blocks[block]
    if view.content_hash is not None and view.prefix is not None:
        hit = view.content_hash in destination.cached
        destination, copy = pool_ops.allocate_immutable(
            destination, view.prefix, view.tokens, pick(destination)
        )
        needs_copy = not hit
    else:
        destination, copy = pool_ops.allocate_mutable(destination, pick(destination))
        needs_copy = bool(view.tokens)
        if view.tokens:
            allocated = copy
            destination, copy = pool_ops.append_tokens(destination, copy, prefix(), view.tokens)
            needs_copy = copy == allocated
    if view.computed:
        destination = pool_ops.mark_computed(destination, [copy])
    return destination, copy, needs_copy
