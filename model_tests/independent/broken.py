"""Deliberately broken variants of ``IndependentManager``: fixtures the oracle must reject.

Each class has exactly one bug, named by the class and stated in its docstring, except the last,
which has two (for stepping past a known difference to the next one). None of the bugs is an
allowed choice of the spec, so a sound isomorphic comparison against the reference must report a
divergence for each (given a scenario that reaches the bug).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pagedkv.model_tests.independent.manager import (
    IndependentManager,
    _Block,
    _ceil_div,
    _Device,
    _Seq,
    _status,
)
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    Token,
)
from pagedkv.specs.validation import check_extra_key


class _KeepsCowSource(_Device):
    def release_copied(self, block: _Block) -> None:
        del block


class BrokenForgetsCowSource(IndependentManager):
    """Copy-on-write does not release the source block (its ref count leaks)."""

    device_class = _KeepsCowSource


class _EvictsNewest(_Device):
    @staticmethod
    def eviction_key(block: _Block) -> tuple[float, int, int]:
        return (-block.last_access, block.depth(), -block.id)  # the newest, shallowest, highest


class BrokenEvictsNewest(IndependentManager):
    """Eviction takes the most recently accessed evictable block instead of the oldest."""

    device_class = _EvictsNewest


class BrokenSwapDropsPair(IndependentManager):
    """``swap_in`` returns one (cpu, gpu) pair fewer than the copies it needs (the last one)."""

    def swap_in(self, group_id: int) -> list[CopyPair]:
        return super().swap_in(group_id)[:-1]


class BrokenCanAllocateIgnoresWatermark(IndependentManager):
    """``can_allocate`` answers as if the watermark were 0 blocks."""

    def _admission(self, need: int, free: int) -> AllocStatus:
        return _status(need, free, self.gpu_capacity, 0)


class _HitMarksComputed(_Device):
    def full_block(self, prefix: Prefix, tokens: Sequence[Token]) -> tuple[_Block, bool]:
        block, hit = super().full_block(prefix, tokens)
        block.computed = block.computed or hit
        return block, hit

    def write(
        self,
        block: _Block,
        chunk: Sequence[Token],
        prefix_of: Callable[[], Prefix],
        cows: list[CopyPair],
    ) -> _Block:
        copies = len(cows)
        result = super().write(block, chunk, prefix_of, cows)
        if result is not block and len(cows) == copies:  # dedup onto a cached block
            result.computed = True
        return result


class BrokenHitMarksComputed(IndependentManager):
    """A cache hit or a dedup onto a cached block marks it computed (only the marks may)."""

    device_class = _HitMarksComputed


class BrokenWindowKeepsExtraBlock(IndependentManager):
    """The sliding window counts one position too few, so a block leaves it one token late."""

    def _release_window(self, seq: _Seq, window: int) -> None:
        super()._release_window(seq, window + 1)


class BrokenNoUpFrontCheck(IndependentManager):
    """No worst-case room check: an operation that runs out of blocks fails midway, changed."""

    @staticmethod
    def _room(needed: int, dev: _Device, what: str) -> None:
        del needed, dev, what


class BrokenCanSwapInForgetsLookahead(IndependentManager):
    """``can_swap_in`` ignores the blocks the lookahead slots will need."""

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        super().can_swap_in(group_id, num_lookahead_slots)  # the checks, in order
        return super().can_swap_in(group_id, 0)


class BrokenForkForgetsLastBlock(IndependentManager):
    """``fork`` gives the child a reference on every block of the parent's table but the last:
    once either sequence is freed, a block the other still holds is counted free."""

    def fork(self, parent_id: int, child_id: int) -> None:
        super().fork(parent_id, child_id)
        held = self._held(self._seq(parent_id).table)
        if held:
            dev = self._dev(self.groups[self._seq(parent_id).group_id].device)
            dev.blocks[held[-1]].refs -= 1  # the reference the child should have added


class BrokenCanSwapOutIgnoresCpuRoom(IndependentManager):
    """``can_swap_out`` compares the group's blocks with the CPU's size, not with its free
    blocks: it says OK when the swap cannot fit now (its promise broken)."""

    def _cpu_room(self) -> int:
        return self._config.num_cpu_blocks


class BrokenSwapOutLeaksGpuBlock(IndependentManager):
    """``swap_out`` keeps a reference on the group's first GPU block: a block lost for good."""

    def swap_out(self, group_id: int) -> list[CopyPair]:
        group = self._group(group_id, Device.GPU)
        distinct = self._distinct(group)
        if distinct and self.cpu.available() >= len(distinct):
            self.gpu.hold(self.gpu.blocks[distinct[0]])  # never dropped
        return super().swap_out(group_id)


class BrokenBlockTableHidesNullEntries(IndependentManager):
    """``get_block_table`` leaves out the entries a sliding window released to the null block,
    so every later position reads one block early."""

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return [b for b in super().get_block_table(seq_id) if b != self.null]


class BrokenCrossTableForgotten(IndependentManager):
    """``get_cross_block_table`` answers ``[]`` even for a group with an encoder prompt."""

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        super().get_cross_block_table(group_id)  # the checks
        return []


class BrokenGpuFreeCountSkipsEvictable(IndependentManager):
    """``get_num_free_gpu_blocks`` counts the free list only, not the cached blocks nobody holds
    (which an allocation may evict, so they are free too)."""

    def get_num_free_gpu_blocks(self) -> int:
        return len(self.gpu.free_stack)


class BrokenCpuFreeCountSkipsEvictable(IndependentManager):
    """``get_num_free_cpu_blocks`` counts the CPU's free list only, not its evictable blocks."""

    def get_num_free_cpu_blocks(self) -> int:
        return len(self.cpu.free_stack)


class BrokenAccessTouchesLastBlockOnly(IndependentManager):
    """``access_all_blocks_in_seq`` stamps only the last block of the table, so the earlier
    blocks keep their old times and are evicted too early."""

    def _accessed(self, seq: _Seq) -> list[BlockId]:
        return self._held(seq.table)[-1:]


class BrokenMarkComputedMarksPartialBlocks(IndependentManager):
    """``mark_blocks_as_computed`` marks a partial last block computed too, though its next
    tokens are not written yet."""

    def mark_blocks_as_computed(self, group_id: int) -> None:
        super().mark_blocks_as_computed(group_id)
        group = self._group(group_id)
        dev = self._dev(group.device)
        if self._config.enable_caching:
            for bid in self._distinct(group):
                dev.blocks[bid].computed = True


class BrokenCommonComputedKeepsLastBlock(IndependentManager):
    """``get_common_computed_block_ids`` lets each table's last block count, so a scheduler
    would skip computing every token of a prompt (the spec keeps at least one)."""

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        common = super().get_common_computed_block_ids(seq_ids)
        tables = [self.seqs[s].table for s in seq_ids]
        whole = tables and all(len(t) == len(common) + 1 and t[-1] == tables[0][-1] for t in tables)
        if whole and self.gpu.blocks[tables[0][-1]].computed:
            return [*common, tables[0][-1]]  # the spec's run stops before each table's last
        return common


class BrokenCachedTokensIgnoreMarks(IndependentManager):
    """``get_num_cached_tokens`` counts the tokens of the leading full blocks that are cached,
    computed or not: a hit whose KV is not written yet is reported as cached."""

    @staticmethod
    def _counts_as_cached(block: _Block) -> bool:
        return block.hash is not None


class BrokenHitRateOfOneDevice(IndependentManager):
    """``get_prefix_cache_hit_rate`` answers the GPU's rate whichever device is asked."""

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        super().get_prefix_cache_hit_rate(device)  # the checks
        return super().get_prefix_cache_hit_rate(Device.GPU)


class BrokenResetSaysDoneIfAny(IndependentManager):
    """``reset_prefix_cache()`` answers True when any of the pools was reset, not only when every
    one of them was."""

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        if device is not None:
            return super().reset_prefix_cache(device)
        gpu = super().reset_prefix_cache(Device.GPU)
        cpu = super().reset_prefix_cache(Device.CPU)
        return gpu or cpu


class BrokenCanAllocateCountsHits(IndependentManager):
    """``can_allocate`` leaves out the prompt blocks already cached, but ``allocate`` reserves
    room for every block up front: an OK the allocation may then refuse (its promise broken)."""

    def _blocks_to_allocate(self, tokens: list[Token], need: int) -> int:
        if self.gpu.caching:
            prefix = Prefix()
            for start in range(0, len(tokens) - self.bs + 1, self.bs):
                chunk = tokens[start : start + self.bs]
                if prefix.child_hash(chunk) not in self.gpu.index:
                    break
                need -= 1
                prefix = prefix.extend(chunk)
        return need


class BrokenCanAllocateNeverWhenFull(IndependentManager):
    """``can_allocate`` judges NEVER against the blocks free now instead of the GPU's size: a
    request that would fit once others finish is told it never will."""

    def _admission(self, need: int, free: int) -> AllocStatus:
        return _status(need, free, free, self._config.watermark_blocks)


# --- the safety tier's fixtures: bugs no policy allows (specs/safety.md) --------------------------


class BrokenHashIgnoresExtraKey(IndependentManager):
    """Content hashes leave out the extra key (LoRA adapter, cache salt), so one tenant's prompt
    hits another's cached blocks: aliasing across extra keys (vLLM 0.6.3 hashes no extra key)."""

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        check_extra_key(extra_key)
        super().allocate(group_id, seq_ids, prompt, NO_EXTRA_KEY, encoder_prompt)


class BrokenFreeLeaksLastBlock(IndependentManager):
    """``free`` never gives back the last block of the sequence's table: a leaked block."""

    def free(self, seq_id: int) -> None:
        seq = self._seq(seq_id)
        held = self._held(seq.table)
        if held:
            dev = self._dev(self.groups[seq.group_id].device)
            dev.hold(dev.blocks[held[-1]])  # a reference nobody will ever drop
        super().free(seq_id)


class BrokenCanAppendIgnoresCopies(IndependentManager):
    """``can_append_slots`` counts only the blocks added past a table's end, not the copy a
    shared last block needs: its yes is a promise the append may break."""

    def _append_need(self, seq: _Seq, n: int, lookahead: int) -> int:
        return max(0, _ceil_div(len(seq.tokens) + n + lookahead, self.bs) - len(seq.table))


class BrokenWindowKeepsGivenBackBlock(IndependentManager):
    """The sliding window gives its old blocks back but leaves their ids in the table: a table
    holding a block the target has given back (and may hand to someone else)."""

    def _release_entry(self, seq: _Seq, index: int) -> None:
        block = self.gpu.blocks[seq.table[index]]
        if block.refs > 0:
            self.gpu.drop(block)  # the entry keeps its id


SAFETY_BROKEN: tuple[type[IndependentManager], ...] = (
    BrokenHashIgnoresExtraKey,
    BrokenFreeLeaksLastBlock,
    BrokenCanAppendIgnoresCopies,
    BrokenWindowKeepsGivenBackBlock,
)
"""Bugs of the kinds the safety tier exists for, each of which every policy forbids."""

BROKEN: tuple[type[IndependentManager], ...] = (
    BrokenForgetsCowSource,
    BrokenEvictsNewest,
    BrokenSwapDropsPair,
    BrokenCanAllocateIgnoresWatermark,
    BrokenHitMarksComputed,
    BrokenWindowKeepsExtraBlock,
    BrokenNoUpFrontCheck,
    BrokenCanSwapInForgetsLookahead,
)
"""The first broken variants, each pinned by ``model_tests/tests/test_oracle.py``."""

MORE_BROKEN: tuple[type[IndependentManager], ...] = (
    BrokenForkForgetsLastBlock,
    BrokenCanSwapOutIgnoresCpuRoom,
    BrokenSwapOutLeaksGpuBlock,
    BrokenBlockTableHidesNullEntries,
    BrokenCrossTableForgotten,
    BrokenGpuFreeCountSkipsEvictable,
    BrokenCpuFreeCountSkipsEvictable,
    BrokenAccessTouchesLastBlockOnly,
    BrokenMarkComputedMarksPartialBlocks,
    BrokenCommonComputedKeepsLastBlock,
    BrokenCachedTokensIgnoreMarks,
    BrokenHitRateOfOneDevice,
    BrokenResetSaysDoneIfAny,
    BrokenCanAllocateCountsHits,
    BrokenCanAllocateNeverWhenFull,
)
"""One per operation or promise the first ones leave out (``specs/corpus.md``)."""


class BrokenLeaksAndIgnoresExtraKey(BrokenHashIgnoresExtraKey, BrokenFreeLeaksLastBlock):
    """Both bugs at once: one of them declared a known difference (``pagedkv check --known``,
    ``specs/oracle.md`` §9), a check must step past it and find the other."""
