"""An independent block space manager, written from specs/block_manager.md and block_pool.md.

Mutable and direct: each device is a ``_Device`` holding a ``_Block`` record per id, a LIFO free
list (a list used as a stack; it starts as ``range(...)`` so the highest id is handed out first),
a dict evictor scanned with ``min()`` and a hash index. Sequences and groups are small records.
Every operation runs all of its checks, including the worst-case block count, before it touches
anything, so a raising call changes nothing. No ``view()``: this stands in for a foreign engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import (
    DuplicateSequenceError,
    InvalidArgumentError,
    OutOfBlocksError,
    SequenceStateError,
    UnknownSequenceError,
)
from pagedkv.specs.types import (
    NEVER_ACCESSED,
    NO_EXTRA_KEY,
    AllocStatus,
    BlockHash,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)
from pagedkv.specs.validation import (
    check_count,
    check_encoder_support,
    check_extra_key,
    check_id,
    check_manager_config,
    check_time,
    check_tokens,
)


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _status(needed: int, free: int, capacity: int, watermark: int) -> AllocStatus:
    if capacity - needed < watermark:
        return AllocStatus.NEVER
    return AllocStatus.OK if free - needed >= watermark else AllocStatus.LATER


class _Block:
    __slots__ = ("computed", "hash", "id", "last_access", "prefix", "refs", "tokens")

    def __init__(self, block_id: BlockId) -> None:
        self.id = block_id
        self.wipe()

    def wipe(self) -> None:
        self.refs = 0
        self.tokens: list[Token] = []
        self.hash: BlockHash | None = None
        self.prefix: Prefix | None = None
        self.computed = False
        self.last_access = NEVER_ACCESSED

    def depth(self) -> int:
        """Hashed tokens from the start of the sequence through this block (0 if unhashed)."""
        return 0 if self.prefix is None else self.prefix.num_tokens + len(self.tokens)


class _Device:
    """One device's blocks: ref counts, free stack, evictor, hash index, hit counters."""

    def __init__(self, first: BlockId, count: int, block_size: int, caching: bool) -> None:
        self.ids = range(first, first + count)
        self.block_size = block_size
        self.caching = caching
        self.blocks = {i: _Block(i) for i in self.ids}
        self.clear()

    def clear(self) -> None:
        for block in self.blocks.values():
            block.wipe()
        self.free_stack: list[BlockId] = list(self.ids)  # pop() takes the highest id first
        self.evictor: dict[BlockId, _Block] = {}
        self.index: dict[BlockHash, _Block] = {}
        self.hits = 0
        self.queries = 0

    def available(self) -> int:
        return len(self.free_stack) + len(self.evictor)

    def victim(self) -> _Block:
        return min(self.evictor.values(), key=self.eviction_key)

    @staticmethod
    def eviction_key(block: _Block) -> tuple[float, int, int]:
        """The smallest goes first: oldest access, then most hashed tokens, then (the spec leaves
        it open) the highest id."""
        return (block.last_access, -block.depth(), -block.id)

    def take(self) -> _Block:
        if self.free_stack:
            block = self.blocks[self.free_stack.pop()]
        elif self.evictor:
            block = self.victim()
            del self.evictor[block.id]
            assert block.hash is not None
            del self.index[block.hash]
            block.wipe()
        else:
            raise OutOfBlocksError(f"all {len(self.ids)} blocks from {self.ids.start} are in use")
        block.refs = 1
        return block

    def hold(self, block: _Block) -> None:
        if block.refs == 0:
            del self.evictor[block.id]
        block.refs += 1

    def drop(self, block: _Block) -> None:
        block.refs -= 1
        if block.refs:
            return
        if block.hash is None:
            block.wipe()
            self.free_stack.append(block.id)
        else:
            self.evictor[block.id] = block

    def full_block(self, prefix: Prefix, tokens: Sequence[Token]) -> tuple[_Block, bool]:
        """A block holding a full chunk: a cache hit (returned with True) or a new block."""
        if self.caching:
            content = prefix.child_hash(tokens)
            self.queries += 1
            cached = self.index.get(content)
            if cached is not None:
                self.hits += 1
                self.hold(cached)
                return cached, True
        block = self.take()
        block.tokens = list(tokens)
        if self.caching:
            self.promote(block, prefix)
        return block, False

    def promote(self, block: _Block, prefix: Prefix) -> None:
        block.prefix = prefix
        block.hash = prefix.child_hash(block.tokens)
        self.index[block.hash] = block

    def write(
        self,
        block: _Block,
        chunk: Sequence[Token],
        prefix_of: Callable[[], Prefix],
        cows: list[CopyPair],
    ) -> _Block:
        """Append ``chunk`` to a held block: dedup onto a cached block, else copy-on-write if
        shared, then fill and promote. Returns the block now held in its place."""
        filled = [*block.tokens, *chunk]
        fills = self.caching and len(filled) == self.block_size
        prefix = prefix_of() if fills else None
        if prefix is not None:
            cached = self.index.get(prefix.child_hash(filled))
            if cached is not None:
                self.drop(block)
                self.hold(cached)
                return cached
        if block.refs > 1:
            block = self.copy_on_write(block, cows)
        block.tokens = filled
        if prefix is not None:
            self.promote(block, prefix)
        return block

    def copy_on_write(self, block: _Block, cows: list[CopyPair]) -> _Block:
        copy = self.take()
        copy.tokens = list(block.tokens)
        self.release_copied(block)
        cows.append((block.id, copy.id))
        return copy

    def release_copied(self, block: _Block) -> None:
        """The writer's reference moves from the shared block to its copy."""
        self.drop(block)

    def mark_computed(self, block: _Block) -> None:
        if self.caching and len(block.tokens) == self.block_size:
            block.computed = True

    def in_use(self, pinned: BlockId | None) -> bool:
        return any(b.refs > (1 if b.id == pinned else 0) for b in self.blocks.values())


class _Seq:
    __slots__ = ("group_id", "table", "tokens")

    def __init__(self, group_id: int, tokens: list[Token], table: list[BlockId]) -> None:
        self.group_id = group_id
        self.tokens = tokens
        self.table = table


class _Group:
    __slots__ = ("cross", "device", "encoder", "key", "seq_ids")

    def __init__(self, seq_ids: list[int], key: ExtraKey, encoder: list[Token]) -> None:
        self.seq_ids = seq_ids
        self.device = Device.GPU
        self.key = key
        self.encoder = encoder
        self.cross: list[BlockId] = []


def _prefixes(tokens: Sequence[Token], block_size: int, key: ExtraKey) -> Callable[[int], Prefix]:
    """``at(i)``: the prefix of logical block ``i``, chained from the tokens (memoised)."""
    chain = [Prefix(extra_key=key)]

    def at(index: int) -> Prefix:
        while len(chain) <= index:
            start = (len(chain) - 1) * block_size
            chain.append(chain[-1].extend(tokens[start : start + block_size]))
        return chain[index]

    return at


class IndependentManager:
    """A ``BlockSpaceManager`` (without ``view``) over plain sequence and group ids."""

    device_class: type[_Device] = _Device
    atomic = True
    """It checks everything before it changes anything (the safety tier may hold it to that)."""

    def __init__(self, config: ManagerConfig) -> None:
        check_manager_config(config)
        self._config = config
        self.bs = config.block_size
        g, c = config.num_gpu_blocks, config.num_cpu_blocks
        self.gpu = self.device_class(0, g, self.bs, config.enable_caching)
        self.cpu = self.device_class(g, c, self.bs, config.enable_caching)
        self.seqs: dict[int, _Seq] = {}
        self.groups: dict[int, _Group] = {}
        self.null: BlockId | None = None
        if config.sliding_window is not None:
            self.null = self.gpu.take().id  # whichever block the free stack gives first
        self.gpu_capacity = g - (1 if self.null is not None else 0)

    @property
    def config(self) -> ManagerConfig:
        return self._config

    def get_null_block(self) -> BlockId | None:
        return self.null

    # --- lookups and checks -------------------------------------------------------------------

    def _dev(self, device: Device) -> _Device:
        return self.gpu if device is Device.GPU else self.cpu

    def _seq(self, seq_id: object) -> _Seq:
        sid = check_id("sequence", seq_id)
        if sid not in self.seqs:
            raise UnknownSequenceError(f"unknown sequence {sid}")
        return self.seqs[sid]

    def _group(self, group_id: object, on: Device | None = None) -> _Group:
        gid = check_id("group", group_id)
        if gid not in self.groups:
            raise UnknownSequenceError(f"unknown group {gid}")
        group = self.groups[gid]
        if on is not None and group.device is not on:
            raise SequenceStateError(f"group {gid} is on the {group.device.value}, not {on.value}")
        return group

    @staticmethod
    def _room(needed: int, dev: _Device, what: str) -> None:
        if needed > dev.available():
            raise OutOfBlocksError(f"{what} may take {needed} blocks, {dev.available()} are free")

    def _held(self, table: Sequence[BlockId]) -> list[BlockId]:
        return [b for b in table if b != self.null]

    def _distinct(self, group: _Group) -> list[BlockId]:
        seen: dict[BlockId, None] = {}
        for sid in group.seq_ids:
            seen.update(dict.fromkeys(self._held(self.seqs[sid].table)))
        seen.update(dict.fromkeys(group.cross))
        return list(seen)

    def _touched(self, seq: _Seq, n: int, lookahead: int) -> int:
        t, k = len(seq.tokens), len(seq.table)
        existing = max(0, min(_ceil_div(t + n, self.bs), k) - t // self.bs) if n else 0
        return existing + max(0, _ceil_div(t + n + lookahead, self.bs) - k)

    def _prompt_need(
        self, prompt: object, encoder: object, lookahead: int = 0
    ) -> tuple[list[Token], list[Token] | None, int]:
        tokens = check_tokens(prompt)
        enc = check_encoder_support(self._config, encoder)
        need = _ceil_div(len(tokens) + lookahead, self.bs)
        return tokens, enc, need + (_ceil_div(len(enc), self.bs) if enc is not None else 0)

    # --- admission ----------------------------------------------------------------------------

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        tokens, _, need = self._prompt_need(prompt, encoder_prompt, lookahead)
        return self._admission(self._blocks_to_allocate(tokens, need), self.gpu.available())

    def _blocks_to_allocate(self, tokens: list[Token], need: int) -> int:
        """What ``can_allocate`` counts for the prompt ``tokens``: every block ``need``."""
        del tokens
        return need

    def _admission(self, need: int, free: int) -> AllocStatus:
        """``can_allocate``'s answer: NEVER past the GPU's size, OK within the free blocks, both
        with the watermark kept."""
        return _status(need, free, self.gpu_capacity, self._config.watermark_blocks)

    def _fill_prompt(self, tokens: list[Token], key: ExtraKey) -> list[BlockId]:
        table: list[BlockId] = []
        prefix = Prefix(extra_key=key)
        for start in range(0, len(tokens), self.bs):
            chunk = tokens[start : start + self.bs]
            if len(chunk) == self.bs:
                block, _ = self.gpu.full_block(prefix, chunk)
                prefix = prefix.extend(chunk)
            else:
                block = self.gpu.take()
                block.tokens = list(chunk)
            table.append(block.id)
        return table

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        gid = check_id("group", group_id)
        if gid in self.groups:
            raise DuplicateSequenceError(f"group {gid} exists already")
        if isinstance(seq_ids, str | bytes) or not isinstance(seq_ids, Sequence) or not seq_ids:
            raise InvalidArgumentError(f"seq_ids must be a non-empty sequence, got {seq_ids!r}")
        ids = [check_id("sequence", s) for s in seq_ids]
        for position, sid in enumerate(ids):
            if sid in self.seqs or sid in ids[:position]:
                raise DuplicateSequenceError(f"sequence {sid} is not new")
        check_extra_key(extra_key)
        tokens, enc, need = self._prompt_need(prompt, encoder_prompt)
        self._room(need, self.gpu, f"group {gid}")
        table = self._fill_prompt(tokens, extra_key)
        for _ in ids[1:]:
            for bid in table:
                self.gpu.hold(self.gpu.blocks[bid])
        group = _Group(ids, extra_key, enc or [])
        if enc is not None:
            group.cross = self._fill_prompt(enc, extra_key)
        self.groups[gid] = group
        for sid in ids:
            self.seqs[sid] = _Seq(gid, list(tokens), list(table))

    # --- decoding -----------------------------------------------------------------------------

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        group = self._group(group_id, Device.GPU)
        n = check_count("num_new_tokens", num_new_tokens)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        need = sum(self._append_need(self.seqs[s], n, lookahead) for s in group.seq_ids)
        return need <= self.gpu.available()

    def _append_need(self, seq: _Seq, n: int, lookahead: int) -> int:
        """The blocks ``can_append_slots`` counts for one sequence: every block the append
        touches (a shared one needs a copy)."""
        return self._touched(seq, n, lookahead)

    def _release_window(self, seq: _Seq, window: int) -> None:
        first_needed = len(seq.tokens) - window + 1
        for i, bid in enumerate(seq.table):
            if (i + 1) * self.bs > first_needed:
                break
            if bid != self.null:
                self._release_entry(seq, i)

    def _release_entry(self, seq: _Seq, index: int) -> None:
        """A block that left the window goes back, and its entry points at the null block."""
        self.gpu.drop(self.gpu.blocks[seq.table[index]])
        assert self.null is not None
        seq.table[index] = self.null

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        seq = self._seq(seq_id)
        group = self._group(seq.group_id, Device.GPU)
        new = check_tokens(tokens, allow_empty=True)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        self._room(self._touched(seq, len(new), lookahead), self.gpu, f"sequence {seq_id}")
        window = self._config.sliding_window
        if new and window is not None:
            self._release_window(seq, window)
        everything = [*seq.tokens, *new]
        prefix_at = _prefixes(everything, self.bs, group.key)
        cows: list[CopyPair] = []
        position = len(seq.tokens)
        while position < len(everything):
            i = position // self.bs
            if i == len(seq.table):
                seq.table.append(self.gpu.take().id)
            end = min(len(everything), (i + 1) * self.bs)
            block = self.gpu.blocks[seq.table[i]]
            written = self.gpu.write(block, everything[position:end], partial(prefix_at, i), cows)
            seq.table[i] = written.id
            position = end
        while len(seq.table) * self.bs < len(everything) + lookahead:
            seq.table.append(self.gpu.take().id)
        seq.tokens = everything
        return cows

    def fork(self, parent_id: int, child_id: int) -> None:
        parent = self._seq(parent_id)
        child = check_id("sequence", child_id)
        if child in self.seqs:
            raise DuplicateSequenceError(f"sequence {child} is not new")
        group = self.groups[parent.group_id]
        dev = self._dev(group.device)
        for bid in self._held(parent.table):
            dev.hold(dev.blocks[bid])
        group.seq_ids.append(child)
        self.seqs[child] = _Seq(parent.group_id, list(parent.tokens), list(parent.table))

    def free(self, seq_id: int) -> None:
        seq = self._seq(seq_id)
        group = self.groups[seq.group_id]
        dev = self._dev(group.device)
        for bid in self._held(seq.table):
            dev.drop(dev.blocks[bid])
        del self.seqs[int(seq_id)]
        group.seq_ids.remove(int(seq_id))
        if not group.seq_ids:
            for bid in group.cross:
                dev.drop(dev.blocks[bid])
            del self.groups[seq.group_id]

    # --- swapping -----------------------------------------------------------------------------

    def can_swap_out(self, group_id: int) -> AllocStatus:
        group = self._group(group_id, Device.GPU)
        need = len(self._distinct(group))
        return _status(need, self._cpu_room(), self._config.num_cpu_blocks, 0)

    def _cpu_room(self) -> int:
        """The CPU blocks a swap out may take now: the free ones."""
        return self.cpu.available()

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        group = self._group(group_id, Device.CPU)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        need = len(self._distinct(group))
        need += sum(self._touched(self.seqs[s], 0, lookahead) for s in group.seq_ids)
        free = self.gpu.available()
        return _status(need, free, self.gpu_capacity, self._config.watermark_blocks)

    def swap_out(self, group_id: int) -> list[CopyPair]:
        return self._move(self._group(group_id, Device.GPU), Device.CPU)

    def swap_in(self, group_id: int) -> list[CopyPair]:
        return self._move(self._group(group_id, Device.CPU), Device.GPU)

    def _move(self, group: _Group, to: Device) -> list[CopyPair]:
        src, dst = self._dev(group.device), self._dev(to)
        self._room(len(self._distinct(group)), dst, f"moving to the {to.value}")
        moved: dict[BlockId, _Block] = {}
        pairs: list[CopyPair] = []

        def relocate(bid: BlockId, prefix_of: Callable[[], Prefix]) -> BlockId:
            if bid == self.null:
                return bid
            if bid in moved:
                dst.hold(moved[bid])
            else:
                old = src.blocks[bid]
                if old.hash is not None:
                    assert old.prefix is not None
                    new, hit = dst.full_block(old.prefix, old.tokens)
                    copied = not hit
                else:
                    new = dst.take()
                    copied = bool(old.tokens)
                    if old.tokens:
                        fresh = new
                        new = dst.write(new, old.tokens, prefix_of, [])
                        copied = new is fresh
                if old.computed:
                    dst.mark_computed(new)
                moved[bid] = new
                if copied:
                    pairs.append((bid, new.id))
            src.drop(src.blocks[bid])
            return moved[bid].id

        for sid in group.seq_ids:
            seq = self.seqs[sid]
            prefix_at = _prefixes(seq.tokens, self.bs, group.key)
            seq.table = [relocate(bid, partial(prefix_at, i)) for i, bid in enumerate(seq.table)]
        root = Prefix(extra_key=group.key)
        group.cross = [relocate(bid, lambda: root) for bid in group.cross]
        group.device = to
        return pairs

    # --- queries and marks --------------------------------------------------------------------

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return list(self._seq(seq_id).table)

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        return list(self._group(group_id).cross)

    def get_num_free_gpu_blocks(self) -> int:
        return self.gpu.available()

    def get_num_free_cpu_blocks(self) -> int:
        return self.cpu.available()

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        seq = self._seq(seq_id)
        when = check_time(now)
        dev = self._dev(self.groups[seq.group_id].device)
        for bid in self._accessed(seq):
            dev.blocks[bid].last_access = when

    def _accessed(self, seq: _Seq) -> list[BlockId]:
        """The blocks an access stamps: every one the sequence holds."""
        return self._held(seq.table)

    def mark_blocks_as_computed(self, group_id: int) -> None:
        group = self._group(group_id)
        dev = self._dev(group.device)
        for bid in self._distinct(group):
            dev.mark_computed(dev.blocks[bid])

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        if isinstance(seq_ids, str | bytes) or not isinstance(seq_ids, Sequence):
            raise InvalidArgumentError(f"seq_ids must be a sequence, got {seq_ids!r}")
        seqs = [self._seq(s) for s in seq_ids]
        for seq in seqs:
            self._group(seq.group_id, Device.GPU)
        if not self._config.enable_caching or not seqs:
            return []
        runs = []
        for seq in seqs:
            run: list[BlockId] = []
            for bid in seq.table[:-1]:
                if not self.gpu.blocks[bid].computed:
                    break
                run.append(bid)
            runs.append(run)
        common: list[BlockId] = []
        for i in range(min(len(run) for run in runs)):
            if any(run[i] != runs[0][i] for run in runs):
                break
            common.append(runs[0][i])
        return common

    def get_num_cached_tokens(self, seq_id: int) -> int:
        seq = self._seq(seq_id)
        dev = self._dev(self.groups[seq.group_id].device)
        total = 0
        for bid in seq.table:
            block = dev.blocks.get(bid)
            if block is None or not self._counts_as_cached(block):
                break
            total += len(block.tokens)
        return total

    @staticmethod
    def _counts_as_cached(block: _Block) -> bool:
        """A block's tokens count as cached once its KV is written: computed."""
        return block.computed

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        if not isinstance(device, Device):
            raise InvalidArgumentError(f"expected a Device, got {device!r}")
        if not self._config.enable_caching:
            return -1.0
        dev = self._dev(device)
        return dev.hits / dev.queries if dev.queries else 0.0

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        if device is not None and not isinstance(device, Device):
            raise InvalidArgumentError(f"expected a Device or None, got {device!r}")
        done = True
        for each in [Device.GPU, Device.CPU] if device is None else [device]:
            dev = self._dev(each)
            pinned = self.null if each is Device.GPU else None
            if dev.in_use(pinned):
                done = False
                continue
            dev.clear()
            if pinned is not None:
                dev.free_stack.remove(pinned)
                dev.blocks[pinned].refs = 1
        return done
