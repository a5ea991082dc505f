"""Moving a group's blocks between devices (swap out to CPU, swap in to GPU).

Under pagedkv's policy (``swap_pairs=copies``) each distinct block moves once: the destination
gets a block with the same contents (a cache hit when the destination already holds that content),
every further reference shares it, and every reference to the source is released. The returned
pairs are exactly the copies the swap kernel must do: a destination that was a cache hit, or that
holds no token yet, needs none.

Under ``swap_pairs=every_entry`` (vLLM 0.6.3) each table moves on its own, entry by entry: a
block two tables share is released twice and taken twice on the destination (a cache hit the
second time when it is hashed, a second copy when it is not), and every entry is reported as a
pair, hit or empty alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from immutables import Map

from pagedkv.reference import block_pool as pool_ops
from pagedkv.reference.allocation import Picker, lowest_id
from pagedkv.reference.block_table import prefix_at
from pagedkv.reference.manager_state import ManagerState, distinct_blocks, pool, with_pool
from pagedkv.reference.pool_state import PoolState
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError
from pagedkv.specs.manager_view import GroupView
from pagedkv.specs.pool_view import BlockView
from pagedkv.specs.types import BlockId, CopyPair, Device, ExtraKey, Token


def check_room(state: ManagerState, found: GroupView, to: Device) -> None:
    """A move takes at most one destination block per block it moves: check that up front (an
    atomic policy), so that a swap either happens whole or not at all."""
    if not state.policy.atomic:
        return
    needed = len(blocks_to_move(state, found))
    free = pool_ops.num_free_blocks(pool(state, to))
    if needed > free:
        raise OutOfBlocksError(
            f"moving the group needs {needed} {to.value} blocks, only {free} are free"
        )


def move_group(
    state: ManagerState, group_id: int, to: Device, pick: Picker = lowest_id
) -> tuple[ManagerState, list[CopyPair]]:
    if state.policy.swap_pairs == "every_entry":
        return move_table_by_table(state, group_id, to, pick)
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
            destination, moved[block], copied = _take_copy(
                destination, source.blocks[block], prefix, pick
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
    cross, cross_device = found.cross_blocks, found.cross_device
    if state.policy.swap_cross_tables == "moved":
        root = partial(Prefix, extra_key=found.extra_key)
        cross, cross_device = tuple(move(block, root) for block in found.cross_blocks), to
    state = with_pool(with_pool(state, found.device, source), to, destination)
    moved_group = replace(found, device=to, cross_blocks=cross, cross_device=cross_device)
    groups: Map[int, GroupView] = state.groups.set(group_id, moved_group)
    return replace(state, seqs=seqs, groups=groups), pairs


def _take_copy(
    destination: PoolState, view: BlockView, prefix: Callable[[], Prefix], pick: Picker
) -> tuple[PoolState, BlockId, bool]:
    """A destination block with the contents of the block ``view`` shows, and whether the
    kernel must copy them. ``prefix`` is only asked for when an unhashed block with tokens is
    re-appended."""
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
    if view.computed and destination.policy.computed_marks == "data":
        destination = pool_ops.mark_computed(destination, [copy])
    return destination, copy, needs_copy


def blocks_to_move(state: ManagerState, found: GroupView) -> list[BlockId]:
    """What a swap takes a destination block for: each distinct block, or (``every_entry``)
    each entry of each table."""
    if state.policy.swap_pairs == "copies":
        return distinct_blocks(state, found)
    entries = [b for s in found.seq_ids for b in state.seqs[s].blocks if b != state.null_block]
    cross = list(found.cross_blocks) if state.policy.swap_cross_tables == "moved" else []
    return entries + cross


def move_table_by_table(
    state: ManagerState, group_id: int, to: Device, pick: Picker = lowest_id
) -> tuple[ManagerState, list[CopyPair]]:
    """vLLM 0.6.3's swap: each table (then the cross table) releases all its entries on the
    source and takes a block for each on the destination; every entry is a pair."""
    found = state.groups[group_id]
    check_room(state, found, to)
    size, key = state.config.block_size, found.extra_key
    source, destination = pool(state, found.device), pool(state, to)
    pairs: list[CopyPair] = []

    def move_table(
        blocks: tuple[BlockId, ...], prefix_of: Callable[[int], Prefix]
    ) -> tuple[BlockId, ...]:
        nonlocal source, destination
        moving = [(i, b, source.blocks[b]) for i, b in enumerate(blocks) if b != state.null_block]
        for _, block, _ in moving:
            source = pool_ops.free(source, block)
        moved = list(blocks)
        for index, block, view in moving:
            destination, moved[index], _ = _take_copy(
                destination, view, partial(prefix_of, index), pick
            )
            pairs.append((block, moved[index]))
        return tuple(moved)

    seqs = state.seqs
    for seq_id in found.seq_ids:
        table = seqs[seq_id]
        blocks = move_table(table.blocks, partial(_prefix_at, table.tokens, size, key))
        seqs = seqs.set(seq_id, replace(table, blocks=blocks))
    cross, cross_device = found.cross_blocks, found.cross_device
    if state.policy.swap_cross_tables == "moved":
        cross, cross_device = move_table(found.cross_blocks, partial(_root, key)), to
    state = with_pool(with_pool(state, found.device, source), to, destination)
    moved_group = replace(found, device=to, cross_blocks=cross, cross_device=cross_device)
    groups = state.groups.set(group_id, moved_group)
    return replace(state, seqs=seqs, groups=groups), pairs


def _prefix_at(tokens: tuple[Token, ...], size: int, key: ExtraKey, index: int) -> Prefix:
    return prefix_at(tokens, index, size, key)


def _root(key: ExtraKey, _: int) -> Prefix:
    return Prefix(extra_key=key)
