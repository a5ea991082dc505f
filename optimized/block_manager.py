"""The mutable, fast block space manager: observably identical to
``pagedkv.reference.manager_adapter.ReferenceBlockSpaceManager`` in exact mode.

Two ``OptimizedBlockPool``s (GPU and CPU), one mutable ``BlockTable`` per sequence and one
``SequenceGroup`` per group, which lists its sequences' ids (``_members`` looks their tables
up). Every operation validates its arguments once, here at the public boundary, in the
reference's order with the shared ``pagedkv.specs.validation`` checks, and compares its worst
case of blocks with the free ones before it changes anything, so it either happens whole or raises
having changed nothing. Below the boundary it calls the pools' trusted core: every id it
passes is one the pool handed out. The pool calls are the reference's, in the reference's order,
so block ids, evictions and copies come out the same.

What a scheduler asks at every step costs O(1) amortized, whatever the sequence's length:
``access_all_blocks_in_seq`` keeps its time on the table until a block is released or the state
is observed, ``mark_blocks_as_computed`` looks only at blocks filled since the last mark, and
``get_common_computed_block_ids`` extends a cached computed prefix (``optimized/block_table.py``
says why each is exact). ``can_allocate`` and ``allocate`` remember the prompts they checked, tuples
and lists alike (``optimized/checked_prompts.py``), since a scheduler asks again and again about
the requests at the head of its queue.

Once a reader asks (``record_changes``), every changing call also records which sequences and
groups it touched (``optimized/changes.py``): one set insertion, so that ``pagedkv soak`` rebuilds
only their rows of the compact state it keeps between calls. Until then the record costs one
``is None`` test per changing call.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pagedkv.optimized.block_pool import OptimizedBlockPool, common_length
from pagedkv.optimized.block_table import BlockTable, SequenceGroup, pack_one, packed
from pagedkv.optimized.changes import Changes
from pagedkv.optimized.checked_prompts import CheckedPrompts
from pagedkv.optimized.tokens import TOKEN_BYTES
from pagedkv.specs.accounting import (
    alloc_status,
    blocks_for,
    blocks_touched_by_append,
)
from pagedkv.specs.compact_state import CompactManager, GroupFields, SeqFields, view_of_compact
from pagedkv.specs.errors import DuplicateSequenceError, OutOfBlocksError
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import (
    MAX_TOKEN,
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)
from pagedkv.specs.validation import (
    check_count,
    check_device,
    check_encoder_support,
    check_extra_key,
    check_id,
    check_manager_config,
    check_new_tokens,
    check_on_device,
    check_seq_ids,
    check_time,
    lookup_group,
    lookup_sequence,
)

LARGEST_FLOAT = sys.float_info.max
"""The largest finite ``now``: a plain float in ``[0, LARGEST_FLOAT]`` passes ``check_time``."""

GPU, CPU = Device.GPU, Device.CPU
"""The devices, as module names: reading an ``Enum`` member through its class costs about as much
as the rest of a scheduler query on CPython 3.11."""


Held = dict[BlockId, tuple[int, float]]
"""Accesses the tables keep aside, by block: (stamp, time)."""

Pending = tuple[int, float, tuple[BlockId, ...]]
"""A table's pending access: its stamp, its time, and the blocks still waiting for it."""


@dataclass(frozen=True)
class LiveState:
    """The live groups and sequences, read only (``OptimizedBlockSpaceManager.live``)."""

    groups: Mapping[int, SequenceGroup]
    seqs: Mapping[int, BlockTable]


class OptimizedBlockSpaceManager:
    """What a scheduler asks of the KV cache, over plain sequence ids, group ids and tokens."""

    atomic = True
    """Every failed call changes nothing (``specs/safety.md`` S6)."""

    def __init__(self, config: ManagerConfig) -> None:
        check_manager_config(config)
        self._config = config
        self._block_size = config.block_size
        self._block_bytes = TOKEN_BYTES * config.block_size
        """A full block's bytes in a table's packed tokens."""
        self._caching = config.enable_caching
        self._gpu = OptimizedBlockPool(config.pool_config(Device.GPU), publish_events=False)
        self._cpu = OptimizedBlockPool(config.pool_config(Device.CPU), publish_events=False)
        self._tables: dict[int, BlockTable] = {}
        self._groups: dict[int, SequenceGroup] = {}
        self._null_block: BlockId | None = None
        """With a sliding window: GPU block 0, pinned for good, where released entries point."""
        self._window = 0
        if config.sliding_window is not None:
            self._window = config.sliding_window
            self._null_block = self._gpu.allocate_mutable()
        self._empty_gpu_capacity = config.num_gpu_blocks - (
            1 if self._null_block is not None else 0
        )
        """Free GPU blocks when nothing is allocated (the null block stays)."""
        self._watermark = config.watermark_blocks
        self._access_stamps = itertools.count(1)
        """Orders accesses: each table keeps its last one aside with a stamp
        (``optimized/block_table.py``, "a pending access")."""
        self._prompts = CheckedPrompts()
        self._live = LiveState(self._groups, self._tables)
        self._changes: Changes | None = None
        """What the calls changed, once a reader asked for it (``record_changes``)."""

    @property
    def config(self) -> ManagerConfig:
        return self._config

    def get_null_block(self) -> BlockId | None:
        """The block released window entries point at."""
        return self._null_block

    # --- lookups (the shared checks of pagedkv.specs.validation, a dict hit first)
    # -----------------------

    def _pool(self, device: Device) -> OptimizedBlockPool:
        return self._gpu if device is Device.GPU else self._cpu

    def _table(self, seq_id: object) -> BlockTable:
        if type(seq_id) is int:
            found = self._tables.get(seq_id)
            if found is not None:
                return found
        return lookup_sequence(self._tables, seq_id)

    def _group(self, group_id: object) -> SequenceGroup:
        if type(group_id) is int:
            found = self._groups.get(group_id)
            if found is not None:
                return found
        return lookup_group(self._groups, group_id)

    def _group_on(self, group_id: object, device: Device, action: str) -> SequenceGroup:
        found = self._group(group_id)
        if found.device is not device:
            check_on_device(group_id, found.device, device, action)
        return found

    def _members(self, group: SequenceGroup) -> list[BlockTable]:
        """The group's tables, in its order."""
        tables = self._tables
        return [tables[seq_id] for seq_id in group.seq_ids]

    def _distinct_blocks(self, group: SequenceGroup) -> list[BlockId]:
        """Every block the group holds, once each, in table order; the null block is nobody's."""
        seen: dict[BlockId, None] = {}
        for table in self._members(group):
            seen.update(dict.fromkeys(table.held_blocks()))
        seen.update(dict.fromkeys(group.cross_blocks))
        return list(seen)

    def _gpu_status(self, needed: int) -> AllocStatus:
        return alloc_status(needed, self._gpu.num_free, self._empty_gpu_capacity, self._watermark)

    # --- admission ------------------------------------------------------------------------------

    def _prompt_blocks(
        self, prompt: object, encoder: object, lookahead: int = 0
    ) -> tuple[Sequence[Token], list[Token] | None, int]:
        tokens = self._prompts.tokens(prompt)
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
        lookahead = num_lookahead_slots
        if type(lookahead) is not int or lookahead < 0:
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
        if self._changes is not None:
            self._changes.seqs.update(ids)
            self._changes.groups.add(gid)
        group = SequenceGroup(gid, tuple(ids), Device.GPU, extra_key, tuple(encoder_tokens or ()))
        first = self._tables[ids[0]] = BlockTable.for_prompt(group, self._gpu, tokens)
        for seq_id in ids[1:]:
            self._gpu.hold_all(first.blocks)
            self._tables[seq_id] = first.fork()
        if encoder_tokens is not None:
            cross = BlockTable.for_prompt(group, self._gpu, encoder_tokens)
            group.cross_blocks = tuple(cross.blocks)
        self._groups[gid] = group

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
        ``num_lookahead_slots`` lookahead slots, assuming every touched block needs a new one.
        A sequence's worst case is at most one block per new slot and one more
        (``pagedkv.specs.accounting.most_blocks_touched``): while that many are free for every
        sequence, the answer is yes without adding the worst cases up."""
        found = self._groups.get(group_id) if type(group_id) is int else None
        if found is None or found.device is not GPU:
            found = self._group_on(group_id, GPU, "append to")
        num_new = num_new_tokens
        if type(num_new) is not int or num_new < 0:
            num_new = check_count("num_new_tokens", num_new_tokens)
        lookahead = num_lookahead_slots
        if type(lookahead) is not int or lookahead < 0:
            lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        free = self._gpu.num_free
        members = found.seq_ids
        if len(members) * (num_new + lookahead + 1) <= free:  # most_blocks_touched, inline
            return True
        size = self._block_size
        needed = 0
        for table in self._members(found):
            needed += blocks_touched_by_append(
                table.num_tokens(), len(table.blocks), size, num_new, lookahead
            )
        return needed <= free

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        """Append a sequence's new tokens (and lookahead slots); returns the copy-on-write pairs
        the copy kernel must run before the model writes the new tokens. The exact worst case
        is only worked out when the free blocks do not cover its bound, as in
        ``can_append_slots``."""
        table = self._tables.get(seq_id) if type(seq_id) is int else None
        if table is None:
            table = self._table(seq_id)
        if table.group.device is not GPU:
            group = table.group
            check_on_device(group.group_id, group.device, GPU, "append to")
        if (
            type(tokens) is list
            and len(tokens) == 1
            and type(token := tokens[0]) is int
            and (0 <= token <= MAX_TOKEN)
        ):  # a decode step's one token: check_new_tokens' answer without the call
            new, count = pack_one(token), 1
        else:
            checked = check_new_tokens(tokens)
            new, count = packed(checked), len(checked)
        lookahead = num_lookahead_slots
        if type(lookahead) is not int or lookahead < 0:
            lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        gpu = self._gpu
        if count + lookahead + 1 > gpu.num_free:  # most_blocks_touched, inline
            needed = table.blocks_touched_by_append(self._block_size, count, lookahead)
            if needed > gpu.num_free:
                raise OutOfBlocksError(
                    f"sequence {seq_id} may need {needed} GPU blocks, only {gpu.num_free} are free"
                )
        if self._changes is not None:
            self._changes.seqs.add(seq_id)
        if self._null_block is not None and count:  # a null block means a sliding window
            table.release_out_of_window(gpu, self._window, self._null_block)
        table.append(gpu, new, lookahead)
        return gpu.clear_copy_on_writes() if gpu.pending_cows else []

    def fork(self, parent_id: int, child_id: int) -> None:
        """The child joins the parent's group sharing every block; nothing is allocated."""
        parent = self._table(parent_id)
        child = check_id("sequence", child_id)
        if child in self._tables:
            raise DuplicateSequenceError(f"sequence {child} already exists")
        found = parent.group
        if self._changes is not None:
            self._changes.seqs.add(child)
            self._changes.groups.add(found.group_id)
        self._pool(found.device).hold_all(parent.held_blocks())
        self._tables[child] = parent.fork()
        found.seq_ids += (child,)

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks; the last sequence of a group takes the group (and its
        cross-attention table) with it."""
        table = self._table(seq_id)
        found = table.group
        if self._changes is not None:
            self._changes.seqs.add(seq_id)
            self._changes.groups.add(found.group_id)
        pool = self._pool(found.device)
        table.release_all(pool)
        members = found.seq_ids
        position = members.index(seq_id)
        found.seq_ids = members[:position] + members[position + 1 :]
        if not found.seq_ids:
            for block in found.cross_blocks:
                pool.release(block)
            del self._groups[found.group_id]
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
            table.blocks_touched_by_append(size, 0, lookahead) for table in self._members(found)
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
        if self._changes is not None:
            self._changes.seqs.update(group.seq_ids)
            self._changes.groups.add(group.group_id)
        moved: dict[BlockId, BlockId] = {}
        pairs: list[CopyPair] = []

        def move(block: BlockId) -> BlockId:
            if block in moved:
                destination.hold(moved[block])
            else:
                moved[block], copied = _copy_block(source, destination, block)
                if copied:
                    pairs.append((block, moved[block]))
            source.release(block)
            return moved[block]

        for table in self._members(group):
            table.settle(source)  # accesses land on the blocks that were accessed
            table.moved()
            kept = table.num_released  # null entries, which stay
            table.blocks = table.blocks[:kept] + tuple(move(b) for b in table.blocks[kept:])
        group.cross_blocks = tuple(move(block) for block in group.cross_blocks)
        group.device = to
        return pairs

    # --- queries and marks ----------------------------------------------------------------------

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        table = self._tables.get(seq_id) if type(seq_id) is int else None
        if table is None:
            table = self._table(seq_id)
        return list(table.blocks)

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        return list(self._group(group_id).cross_blocks)

    def get_num_free_gpu_blocks(self) -> int:
        return self._gpu.num_free_blocks()

    def get_num_free_cpu_blocks(self) -> int:
        return self._cpu.num_free_blocks()

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        """Every held block of the sequence was accessed at ``now``: O(1), kept on the table."""
        table = self._tables.get(seq_id) if type(seq_id) is int else None
        if table is None:
            table = self._table(seq_id)
        if type(now) is not float or not 0.0 <= now <= LARGEST_FLOAT:  # NaN fails it too
            now = check_time(now)
        if self._changes is not None:
            self._changes.seqs.add(seq_id)
        # the table's pending access (optimized/block_table.py): it replaces the older one
        table.access_time = now
        table.access_stamp = next(self._access_stamps)
        table.access_end = len(table.blocks)

    def mark_blocks_as_computed(self, group_id: int) -> None:
        """After the model ran: every full block of the group's sequences holds its KV now.
        Without caching nothing is ever marked; cross blocks exist only then."""
        found = self._groups.get(group_id) if type(group_id) is int else None
        if found is None:
            found = self._group(group_id)
        if not self._caching:
            return
        block_bytes, tables = self._block_bytes, self._tables
        for seq_id in found.seq_ids:
            table = tables[seq_id]
            num_full = len(table.tokens) // block_bytes
            if num_full > table.marked:  # else nothing filled since the last mark
                if self._changes is not None:
                    self._changes_to(found.device)
                table.mark_computed(self._pool(found.device), num_full)

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        """The computed prefix every listed sequence shares: prefill it may skip. A sequence's
        last entry never counts: the model must compute at least one of its tokens.

        Each table keeps its own computed prefix, and a group the common prefix of the prefixes
        it was last asked about, as tuples (which the garbage collector stops walking once it
        has seen that they hold only ints); the answer is a new list of them. Plain ids of GPU
        sequences take the short way; anything else is checked in the spec's order first."""
        if type(seq_ids) is list and self._caching:
            if len(seq_ids) == 1:  # most groups have one sequence
                table = self._tables.get(seq_ids[0]) if type(seq_ids[0]) is int else None
                if table is not None and table.group.device is GPU:
                    known = table.computed_ids
                    if len(known) == len(table.blocks) - 1:
                        return list(known)
                    return list(table.computed_prefix(self._gpu))
            prefixes: list[tuple[BlockId, ...]] = []
            for seq_id in seq_ids:
                table = self._tables.get(seq_id) if type(seq_id) is int else None
                if table is None or table.group.device is not GPU:
                    break
                known = table.computed_ids
                if len(known) != len(table.blocks) - 1:  # else all but the last: nothing to add
                    known = table.computed_prefix(self._gpu)
                prefixes.append(known)
            else:
                if len(prefixes) <= 1:
                    return list(prefixes[0]) if prefixes else []
                return list(self._common_prefix(prefixes, self._tables[seq_ids[0]].group))
        tables = [self._table(s) for s in check_seq_ids(seq_ids)]
        for table in tables:
            group = table.group
            if group.device is not Device.GPU:
                action = "read the computed blocks of"
                check_on_device(group.group_id, group.device, Device.GPU, action)
        if not self._caching or not tables:
            return []
        prefixes = [table.computed_prefix(self._gpu) for table in tables]
        if len(prefixes) == 1:
            return list(prefixes[0])
        return list(self._common_prefix(prefixes, tables[0].group))

    @staticmethod
    def _common_prefix(
        prefixes: list[tuple[BlockId, ...]], group: SequenceGroup
    ) -> tuple[BlockId, ...]:
        """The common prefix of several sequences' computed prefixes, kept on the first one's
        group: equal prefixes have the same answer (and the kept ones are mostly the very same
        objects, which compare at once)."""
        known, asked = group.common_ids, tuple(prefixes)
        if known is not None and known[0] == asked:
            return known[1]
        first = prefixes[0]
        length = common_length(prefixes, min(len(p) for p in prefixes))
        common = first if length == len(first) else first[:length]
        group.common_ids = (asked, common)
        return common

    def get_num_cached_tokens(self, seq_id: int) -> int:
        table = self._table(seq_id)
        return table.num_cached_tokens(self._pool(table.group.device))

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        return self._pool(check_device(device)).hit_rate()

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        """Reset each pool (or just ``device``'s) that has no block in use; True when all did."""
        devices = [Device.GPU, Device.CPU] if device is None else [check_device(device)]
        done = True
        for each in devices:
            reset = self._reset_pool(each)
            if reset and self._changes is not None:
                self._changes_to(each)
            done = done and reset
        return done

    def _changes_to(self, device: Device) -> None:
        """Record a change to ``device``'s pool that no sequence shows (``record_changes``)."""
        assert self._changes is not None
        if device is GPU:
            self._changes.gpu += 1
        else:
            self._changes.cpu += 1

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

    def live(self) -> LiveState:
        """The live groups (each with its ``device`` and ``seq_ids``) and sequences (each with its
        ``tokens``), kept up to date and never to be changed by the reader: what a driver that
        picks its next call from the manager's own state reads (``pagedkv soak`` with this
        manager as its model), in O(1) where ``view`` copies everything."""
        return self._live

    def record_changes(self) -> Changes:
        """From now on, every changing call adds what it changed to the record returned
        (``optimized/changes.py``), which its one reader empties as it reads: a reader that
        rebuilds only the changed rows of a compact state kept between calls (``pagedkv soak``).
        A later call starts a new record and detaches this one."""
        if self._changes is not None:
            self._changes.detached = True
        self._changes = Changes()
        return self._changes

    def compact_row(self, seq_id: int) -> tuple[SeqFields, Device, Pending | None] | None:
        """A live sequence's row of the compact state, its tokens copied (a row kept between
        calls must not change with the table), its group's device, and its pending access
        (``Pending``); None for a sequence that is not live."""
        table = self._tables.get(seq_id)
        if table is None:
            return None
        device = table.group.device
        row = (table.group.group_id, bytes(table.tokens), table.blocks)
        start, end = table.num_released, table.access_end
        if end <= start:
            return row, device, None
        return row, device, (table.access_stamp, table.access_time, table.blocks[start:end])

    def compact_group(self, group_id: int) -> GroupFields | None:
        """A live group's fields as the compact state holds them; None for one not live."""
        group = self._groups.get(group_id)
        return None if group is None else group.fields()

    def pools(self) -> tuple[OptimizedBlockPool, OptimizedBlockPool]:
        """The GPU and the CPU pool, never to be changed by the reader: for a reader that keeps
        the compact state between calls and rebuilds a pool's only when the record of changes
        says it may have changed, or its ``fingerprint`` did (``pagedkv soak``,
        ``model_tests/oracle/incremental_compact.py``)."""
        return self._gpu, self._cpu

    def view(self) -> ManagerView:
        """Accesses the tables keep aside show as if every one had been written at once.
        Rendered from ``compact``, so the two never say different things."""
        return view_of_compact(self.compact())

    def compact(self) -> CompactManager:
        """The whole observable state, compact (``specs/compact_state.py``): what ``pagedkv
        soak`` compares after every call. It holds the pools' lists and the tables' own packed
        tokens (their ``bytearray``), to be compared at once, never kept or changed (a tuple of
        each sequence's tokens, rebuilt at every call, cost a third of it)."""
        seqs, groups, on_gpu, on_cpu = self.compact_tables()
        return CompactManager(
            self._config,
            self._gpu.compact(on_gpu),
            self._cpu.compact(on_cpu),
            seqs,
            groups,
            self._null_block,
        )

    def compact_tables(self) -> tuple[dict[int, SeqFields], dict[int, GroupFields], Held, Held]:
        """``compact``'s sequences and groups, and the accesses the tables keep aside for each
        pool (GPU, then CPU: block -> (stamp, time)), which the pools' parts show: what a reader
        that keeps a pool's part between calls reads at every call (``pagedkv soak``, for a
        subclass with code of its own: ``model_tests/oracle/incremental_compact.py``)."""
        on_gpu: Held = {}
        on_cpu: Held = {}
        seqs: dict[int, SeqFields] = {}
        for seq_id, table in self._tables.items():
            group = table.group
            if table.access_end > table.num_released:
                table.untouched(on_gpu if group.device is GPU else on_cpu)
            seqs[seq_id] = (group.group_id, table.tokens, table.blocks)
        groups = {group_id: group.fields() for group_id, group in self._groups.items()}
        return seqs, groups, on_gpu, on_cpu


def _copy_block(
    source: OptimizedBlockPool, destination: OptimizedBlockPool, block: BlockId
) -> tuple[BlockId, bool]:
    """A destination block with ``block``'s contents, and whether the kernel must copy them: not
    for a cache hit (its data is there), nor for an empty block. The source's hash is reused, not
    recomputed. Computed marks travel with the data (only full blocks of a caching pool have
    them)."""
    content_hash = source.hash_of(block)
    tokens = source.tokens_of(block)
    if content_hash is not None:
        prefix = source.prefix_of(block)
        assert prefix is not None
        needs_copy = destination.lookup(content_hash) is None
        copy = destination.take_full(prefix, tokens, content_hash)
    else:
        copy = destination.take()
        needs_copy = bool(tokens)
        if tokens:  # a fresh block: no copy-on-write, and unhashed contents never dedup
            destination.fill(copy, None, tokens, None)
    if source.is_computed(block):
        destination.set_computed([copy])
    return copy, needs_copy
