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
from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True, slots=True)
class Moving:
    """A swap under way: both pools, where each moved block went, and the copies so far."""

    source: PoolState
    destination: PoolState
    moved: Map[BlockId, BlockId] = field(default_factory=Map)
    pairs: tuple[CopyPair, ...] = ()


PrefixOf = Callable[[int], Prefix]
"""The prefix of a table's entry ``index``, asked for only when an unhashed block with tokens is
re-appended on the destination."""

TableMover = Callable[
    [Moving, tuple[BlockId, ...], PrefixOf, Picker, BlockId | None],
    tuple[Moving, tuple[BlockId, ...]],
]
"""Moves one table's entries (the null block stays), returning the moved table."""


def move_group(
    state: ManagerState, group_id: int, to: Device, pick: Picker = lowest_id
) -> tuple[ManagerState, list[CopyPair]]:
    """Move every table of the group, then its cross table where the policy moves it, each with
    the policy's mover (``move_distinct_blocks``, or ``move_table_by_table``)."""
    found = state.groups[group_id]
    check_room(state, found, to)
    mover: TableMover = (
        move_table_by_table if state.policy.swap_pairs == "every_entry" else move_distinct_blocks
    )
    size, key = state.config.block_size, found.extra_key
    moving = Moving(source=pool(state, found.device), destination=pool(state, to))
    seqs = state.seqs
    for seq_id in found.seq_ids:
        table = seqs[seq_id]
        prefix_of = partial(_prefix_at, table.tokens, size, key)
        moving, blocks = mover(moving, table.blocks, prefix_of, pick, state.null_block)
        seqs = seqs.set(seq_id, replace(table, blocks=blocks))
    cross, cross_device = found.cross_blocks, found.cross_device
    if state.policy.swap_cross_tables == "moved":
        moving, cross = mover(moving, cross, partial(_root, key), pick, state.null_block)
        cross_device = to
    state = with_pool(with_pool(state, found.device, moving.source), to, moving.destination)
    moved_group = replace(found, device=to, cross_blocks=cross, cross_device=cross_device)
    groups: Map[int, GroupView] = state.groups.set(group_id, moved_group)
    return replace(state, seqs=seqs, groups=groups), list(moving.pairs)


def move_distinct_blocks(
    moving: Moving,
    blocks: tuple[BlockId, ...],
    prefix_of: PrefixOf,
    pick: Picker,
    null_block: BlockId | None,
) -> tuple[Moving, tuple[BlockId, ...]]:
    """pagedkv's swap (``swap_pairs=copies``): each entry in turn, with ``move_block``."""
    table: list[BlockId] = []
    for index, block in enumerate(blocks):
        if block == null_block:
            table.append(block)
            continue
        moving, copy = move_block(moving, block, partial(prefix_of, index), pick)
        table.append(copy)
    return moving, tuple(table)


def move_block(
    moving: Moving, block: BlockId, prefix: Callable[[], Prefix], pick: Picker
) -> tuple[Moving, BlockId]:
    """The first reference to a block takes its destination block (a copy, unless it is a cache
    hit or empty); every further reference shares that block. The source reference is released."""
    destination, pairs = moving.destination, moving.pairs
    if block in moving.moved:
        copy = moving.moved[block]
        destination, _ = pool_ops.fork(destination, [copy])
    else:
        view = moving.source.blocks[block]
        destination, copy, copied = _take_copy(destination, view, prefix, pick)
        if copied:
            pairs = (*pairs, (block, copy))
    moved = moving.moved.set(block, copy)
    source = pool_ops.free(moving.source, block)
    return Moving(source, destination, moved, pairs), copy


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
    moving: Moving,
    blocks: tuple[BlockId, ...],
    prefix_of: PrefixOf,
    pick: Picker,
    null_block: BlockId | None,
) -> tuple[Moving, tuple[BlockId, ...]]:
    """vLLM 0.6.3's swap (``swap_pairs=every_entry``): the table releases all its entries on the
    source, then takes a block for each on the destination; every entry is a pair."""
    entries = [(i, b, moving.source.blocks[b]) for i, b in enumerate(blocks) if b != null_block]
    source = moving.source
    for _, block, _ in entries:
        source = pool_ops.free(source, block)
    destination, pairs, table = moving.destination, moving.pairs, list(blocks)
    for index, block, view in entries:
        destination, table[index], _ = _take_copy(
            destination, view, partial(prefix_of, index), pick
        )
        pairs = (*pairs, (block, table[index]))
    return replace(moving, source=source, destination=destination, pairs=pairs), tuple(table)


def _prefix_at(tokens: tuple[Token, ...], size: int, key: ExtraKey, index: int) -> Prefix:
    return prefix_at(tokens, index, size, key)


def _root(key: ExtraKey, _: int) -> Prefix:
    return Prefix(extra_key=key)
