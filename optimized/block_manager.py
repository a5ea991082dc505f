"""The mutable, fast block space manager: observably identical to
``reference.manager_adapter.ReferenceBlockSpaceManager`` in exact mode.

Two ``OptimizedBlockPool``s (GPU and CPU), one mutable ``BlockTable`` per sequence and one small
record per group. Every operation validates its arguments in the reference's order with the shared
``specs.validation`` checks and compares its worst case of blocks with the free ones before it
changes anything, so it either happens whole or raises having changed nothing. The pool calls are
the reference's, in the reference's order, so block ids, evictions and copies come out the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optimized.block_pool import OptimizedBlockPool
from optimized.block_table import BlockTable
from specs.accounting import alloc_status, blocks_for
from specs.content_hash import Prefix
from specs.errors import DuplicateSequenceError, OutOfBlocksError
from specs.manager_view import GroupView, ManagerView, SeqView
from specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)
from specs.validation import (
    check_count,
    check_device,
    check_encoder_support,
    check_extra_key,
    check_id,
    check_manager_config,
    check_on_device,
    check_seq_ids,
    check_time,
    check_tokens,
    lookup_group,
    lookup_sequence,
)


@dataclass(slots=True)
class SequenceGroup:
    """Sequences that share a prompt and move between devices together; an encoder-decoder
    group also owns its cross-attention table."""

    seq_ids: list[int]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...]
    cross_blocks: list[BlockId]


class OptimizedBlockSpaceManager:
    """What a scheduler asks of the KV cache, over plain sequence ids, group ids and tokens."""

    atomic = True
    """Every failed call changes nothing (``specs/safety.md`` S6)."""

    def __init__(self, config: ManagerConfig) -> None:
        check_manager_config(config)
        self._config = config
        self._block_size = config.block_size
        self._gpu = OptimizedBlockPool(config.pool_config(Device.GPU))
        self._cpu = OptimizedBlockPool(config.pool_config(Device.CPU))
        self._tables: dict[int, BlockTable] = {}
        self._groups: dict[int, SequenceGroup] = {}
        self._null_block: BlockId | None = None
        """With a sliding window: GPU block 0, pinned for good, where released entries point."""
        if config.sliding_window is not None:
            self._null_block = self._gpu.allocate_mutable()

    @property
    def config(self) -> ManagerConfig:
        return self._config

    def get_null_block(self) -> BlockId | None:
        """The block released window entries point at."""
        return self._null_block

    # --- lookups (the shared checks of specs.validation) -----------------------------------------

    def _pool(self, device: Device) -> OptimizedBlockPool:
        return self._gpu if device is Device.GPU else self._cpu

    def _table(self, seq_id: object) -> BlockTable:
        return lookup_sequence(self._tables, seq_id)

    def _group(self, group_id: object) -> SequenceGroup:
        return lookup_group(self._groups, group_id)

    def _group_on(self, group_id: object, device: Device, action: str) -> SequenceGroup:
        found = self._group(group_id)
        check_on_device(group_id, found.device, device, action)
        return found

    def _distinct_blocks(self, group: SequenceGroup) -> list[BlockId]:
        """Every block the group holds, once each, in table order; the null block is nobody's."""
        seen: dict[BlockId, None] = {}
        for seq_id in group.seq_ids:
            seen.update(dict.fromkeys(self._tables[seq_id].held_blocks()))
        seen.update(dict.fromkeys(group.cross_blocks))
        return list(seen)

    def _empty_gpu_capacity(self) -> int:
        """Free GPU blocks when nothing is allocated (the null block stays)."""
        return self._config.num_gpu_blocks - (1 if self._null_block is not None else 0)

    def _gpu_status(self, needed: int) -> AllocStatus:
        return alloc_status(
            needed,
            self._gpu.num_free_blocks(),
            self._empty_gpu_capacity(),
            self._config.watermark_blocks,
        )

    # --- admission ------------------------------------------------------------------------------

    def _prompt_blocks(
        self, prompt: object, encoder: object, lookahead: int = 0
    ) -> tuple[list[Token], list[Token] | None, int]:
        tokens = check_tokens(prompt)
        encoder_tokens = check_encoder_support(self._config, encoder)
        needed = blocks_for(len(tokens) + lookahead, self._block_size)
        if encoder_tokens is not None:
            needed += blocks_for(len(encoder_tokens), self._block_size)
        return tokens, encoder_tokens, needed

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        """Whether a new group with this prompt fits on the GPU, keeping the watermark free. Cache
        hits are not counted on: the answer must hold whatever gets evicted meanwhile."""
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        _, _, needed = self._prompt_blocks(prompt, encoder_prompt, lookahead)
        return self._gpu_status(needed)

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        """Give every sequence of a new group the prompt's blocks (shared, not copied), and the
        group its cross-attention table when it has an encoder prompt."""
        gid = check_id("group", group_id)
        if gid in self._groups:
            raise DuplicateSequenceError(f"group {gid} already exists")
        ids = self._new_seq_ids(seq_ids)
        check_extra_key(extra_key)
        tokens, encoder_tokens, needed = self._prompt_blocks(prompt, encoder_prompt)
        free = self._gpu.num_free_blocks()
        if needed > free:
            raise OutOfBlocksError(f"the group needs {needed} GPU blocks, only {free} free")
        first = BlockTable.for_prompt(gid, self._gpu, tokens, extra_key)
        tables = [first]
        for _ in ids[1:]:
            self._gpu.fork(first.blocks)
            tables.append(first.fork())
        cross: list[BlockId] = []
        if encoder_tokens is not None:
            cross = BlockTable.for_prompt(gid, self._gpu, encoder_tokens, extra_key).blocks
        self._tables.update(zip(ids, tables, strict=True))
        self._groups[gid] = SequenceGroup(
            ids, Device.GPU, extra_key, tuple(encoder_tokens or ()), cross
        )

    def _new_seq_ids(self, seq_ids: object) -> list[int]:
        ids = check_seq_ids(seq_ids, non_empty=True)
        seen: set[int] = set()
        for seq_id in ids:
            if seq_id in self._tables or seq_id in seen:
                raise DuplicateSequenceError(f"sequence {seq_id} already exists")
            seen.add(seq_id)
        return ids

    # --- decoding -------------------------------------------------------------------------------

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        """Whether every sequence of the group can take ``num_new_tokens`` tokens and
        ``num_lookahead_slots`` lookahead slots, assuming every touched block needs a new one."""
        found = self._group_on(group_id, Device.GPU, "append to")
        num_new = check_count("num_new_tokens", num_new_tokens)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        size = self._block_size
        needed = sum(
            self._tables[s].blocks_touched_by_append(size, num_new, lookahead)
            for s in found.seq_ids
        )
        return needed <= self._gpu.num_free_blocks()

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        """Append a sequence's new tokens (and lookahead slots); returns the copy-on-write pairs
        the copy kernel must run before the model writes the new tokens."""
        table = self._table(seq_id)
        self._group_on(table.group_id, Device.GPU, "append to")
        new_tokens = check_tokens(tokens, allow_empty=True)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        needed = table.blocks_touched_by_append(self._block_size, len(new_tokens), lookahead)
        free = self._gpu.num_free_blocks()
        if needed > free:
            raise OutOfBlocksError(
                f"sequence {seq_id} may need {needed} GPU blocks, only {free} are free"
            )
        window, null_block = self._config.sliding_window, self._null_block
        if window is not None and null_block is not None and new_tokens:
            table.release_out_of_window(self._gpu, window, null_block)
        table.append(self._gpu, new_tokens, lookahead)
        return self._gpu.clear_copy_on_writes()

    def fork(self, parent_id: int, child_id: int) -> None:
        """The child joins the parent's group sharing every block; nothing is allocated."""
        parent = self._table(parent_id)
        child = check_id("sequence", child_id)
        if child in self._tables:
            raise DuplicateSequenceError(f"sequence {child} already exists")
        found = self._groups[parent.group_id]
        self._pool(found.device).fork(parent.held_blocks())
        found.seq_ids.append(child)
        self._tables[child] = parent.fork()

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks; the last sequence of a group takes the group (and its
        cross-attention table) with it."""
        table = self._table(seq_id)
        found = self._groups[table.group_id]
        pool = self._pool(found.device)
        for block in table.held_blocks():
            pool.free(block)
        found.seq_ids.remove(seq_id)
        if not found.seq_ids:
            for block in found.cross_blocks:
                pool.free(block)
            del self._groups[table.group_id]
        del self._tables[seq_id]

    # --- swapping -------------------------------------------------------------------------------

    def can_swap_out(self, group_id: int) -> AllocStatus:
        found = self._group_on(group_id, Device.GPU, "swap out")
        needed = len(self._distinct_blocks(found))
        return alloc_status(needed, self._cpu.num_free_blocks(), self._config.num_cpu_blocks, 0)

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        """Whether the group's blocks, plus the blocks its lookahead slots will need, fit on the
        GPU with the watermark kept."""
        found = self._group_on(group_id, Device.CPU, "swap in")
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        size = self._block_size
        needed = len(self._distinct_blocks(found))
        needed += sum(
            self._tables[s].blocks_touched_by_append(size, 0, lookahead) for s in found.seq_ids
        )
        return self._gpu_status(needed)

    def swap_out(self, group_id: int) -> list[CopyPair]:
        """Move the group to the CPU; returns the (GPU id, CPU id) copies for the swap kernel."""
        return self._move_group(self._group_on(group_id, Device.GPU, "swap out"), Device.CPU)

    def swap_in(self, group_id: int) -> list[CopyPair]:
        """Move the group back to the GPU; returns the (CPU id, GPU id) copies for the swap
        kernel."""
        return self._move_group(self._group_on(group_id, Device.CPU, "swap in"), Device.GPU)

    def _move_group(self, group: SequenceGroup, to: Device) -> list[CopyPair]:
        """Each distinct block moves once (seqs in group order, blocks in table order, then the
        cross blocks); further references share the moved block; every source reference is
        released. A move takes at most one destination block per distinct block, which is
        checked up front so that the swap happens whole or not at all."""
        source, destination = self._pool(group.device), self._pool(to)
        needed = len(self._distinct_blocks(group))
        free = destination.num_free_blocks()
        if needed > free:
            raise OutOfBlocksError(
                f"moving the group needs {needed} {to.value} blocks, only {free} are free"
            )
        moved: dict[BlockId, BlockId] = {}
        pairs: list[CopyPair] = []

        def move(block: BlockId, prefix: Prefix) -> BlockId:
            if block == self._null_block:
                return block
            if block in moved:
                destination.fork([moved[block]])
            else:
                moved[block], copied = _copy_block(source, destination, block, prefix)
                if copied:
                    pairs.append((block, moved[block]))
            source.free(block)
            return moved[block]

        for seq_id in group.seq_ids:
            table = self._tables[seq_id]
            blocks = table.blocks
            for index, block in enumerate(blocks):
                blocks[index] = move(block, table.prefix_of(index))
        root = Prefix(extra_key=group.extra_key)
        group.cross_blocks = [move(block, root) for block in group.cross_blocks]
        group.device = to
        return pairs

    # --- queries and marks ----------------------------------------------------------------------

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return list(self._table(seq_id).blocks)

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        return list(self._group(group_id).cross_blocks)

    def get_num_free_gpu_blocks(self) -> int:
        return self._gpu.num_free_blocks()

    def get_num_free_cpu_blocks(self) -> int:
        return self._cpu.num_free_blocks()

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        table = self._table(seq_id)
        check_time(now)
        device = self._groups[table.group_id].device
        self._pool(device).mark_accessed(table.held_blocks(), now)

    def mark_blocks_as_computed(self, group_id: int) -> None:
        """After the model ran: every full block of the group's sequences holds its KV now."""
        found = self._group(group_id)
        self._pool(found.device).mark_computed(self._distinct_blocks(found))

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        """The computed prefix every listed sequence shares: prefill it may skip."""
        tables = [self._table(s) for s in check_seq_ids(seq_ids)]
        for table in tables:
            self._group_on(table.group_id, Device.GPU, "read the computed blocks of")
        return self._gpu.common_computed_prefix([t.blocks for t in tables])

    def get_num_cached_tokens(self, seq_id: int) -> int:
        table = self._table(seq_id)
        return table.num_cached_tokens(self._pool(self._groups[table.group_id].device))

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        return self._pool(check_device(device)).hit_rate()

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        """Reset each pool (or just ``device``'s) that has no block in use; True when all did."""
        devices = [Device.GPU, Device.CPU] if device is None else [check_device(device)]
        done = True
        for each in devices:
            reset = self._reset_pool(each)
            done = done and reset
        return done

    def _reset_pool(self, device: Device) -> bool:
        """The null block's pin is not a use: it is let go and taken again (it is the lowest id,
        so the fresh pool hands it out first). Whether anything else is in use is read from the
        free count first, so a refused reset touches nothing."""
        pool = self._pool(device)
        null_block = self._null_block
        if device is not Device.GPU or null_block is None:
            return pool.reset_prefix_cache()
        if pool.num_free_blocks() < self._config.num_gpu_blocks - 1:
            return False
        pool.free(null_block)
        reset = pool.reset_prefix_cache()
        assert reset, "only the null block was in use"
        pinned = pool.allocate_mutable()
        assert pinned == null_block, "the null block is the lowest id"
        return True

    # --- the observable state -------------------------------------------------------------------

    def view(self) -> ManagerView:
        seqs = {
            seq_id: SeqView(table.group_id, tuple(table.tokens), tuple(table.blocks))
            for seq_id, table in self._tables.items()
        }
        groups = {
            group_id: GroupView(
                tuple(group.seq_ids),
                group.device,
                group.extra_key,
                group.encoder_tokens,
                tuple(group.cross_blocks),
                group.device,
            )
            for group_id, group in self._groups.items()
        }
        return ManagerView(
            self._config, self._gpu.view(), self._cpu.view(), seqs, groups, self._null_block
        )


def _copy_block(
    source: OptimizedBlockPool, destination: OptimizedBlockPool, block: BlockId, prefix: Prefix
) -> tuple[BlockId, bool]:
    """A destination block with ``block``'s contents, and whether the kernel must copy them: not
    for a cache hit (its data is there), nor for an empty block, nor for a block that dedups into
    a cached one. Computed marks travel with the data."""
    view = source.block(block)
    if view.content_hash is not None and view.prefix is not None:
        hit = destination.lookup(view.content_hash) is not None
        copy = destination.allocate_immutable(view.prefix, view.tokens)
        needs_copy = not hit
    else:
        copy = destination.allocate_mutable()
        needs_copy = bool(view.tokens)
        if view.tokens:
            allocated = copy
            copy = destination.append_tokens(copy, prefix, view.tokens)
            needs_copy = copy == allocated
    if view.computed:
        destination.mark_computed([copy])
    return copy, needs_copy
