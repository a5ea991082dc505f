"""Deliberately broken variants of ``IndependentManager``: fixtures the oracle must reject.

Each class has exactly one bug, named by the class and stated in its docstring, except the last,
which has two (for stepping past a known difference to the next one). None of the bugs is an
allowed choice of the spec, so a sound isomorphic comparison against the reference must report a
divergence for each (given a scenario that reaches the bug).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model_tests.independent.manager import (
    IndependentManager,
    _Block,
    _ceil_div,
    _Device,
    _Seq,
    _status,
)
from specs.content_hash import Prefix
from specs.types import NO_EXTRA_KEY, AllocStatus, CopyPair, Device, ExtraKey, Token
from specs.validation import check_count, check_extra_key


class _KeepsCowSource(_Device):
    def copy_on_write(self, block: _Block, cows: list[CopyPair]) -> _Block:
        copy = self.take()
        copy.tokens = list(block.tokens)
        cows.append((block.id, copy.id))
        return copy


class BrokenForgetsCowSource(IndependentManager):
    """Copy-on-write does not release the source block (its ref count leaks)."""

    device_class = _KeepsCowSource


class _EvictsNewest(_Device):
    def victim(self) -> _Block:
        return max(self.evictor.values(), key=lambda b: (b.last_access, -b.depth(), b.id))


class BrokenEvictsNewest(IndependentManager):
    """Eviction takes the most recently accessed evictable block instead of the oldest."""

    device_class = _EvictsNewest


class BrokenSwapDropsPair(IndependentManager):
    """``swap_in`` returns one (cpu, gpu) pair fewer than the copies it needs (the last one)."""

    def swap_in(self, group_id: int) -> list[CopyPair]:
        return super().swap_in(group_id)[:-1]


class BrokenCanAllocateIgnoresWatermark(IndependentManager):
    """``can_allocate`` answers as if the watermark were 0 blocks."""

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        _, _, need = self._prompt_need(prompt, encoder_prompt, lookahead)
        return _status(need, self.gpu.available(), self.gpu_capacity, 0)


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

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        group = self._group(group_id, Device.GPU)
        n = check_count("num_new_tokens", num_new_tokens)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        need = 0
        for seq_id in group.seq_ids:
            seq = self.seqs[seq_id]
            need += max(0, _ceil_div(len(seq.tokens) + n + lookahead, self.bs) - len(seq.table))
        return need <= self.gpu.available()


class BrokenWindowKeepsGivenBackBlock(IndependentManager):
    """The sliding window gives its old blocks back but leaves their ids in the table: a table
    holding a block the target has given back (and may hand to someone else)."""

    def _release_window(self, seq: _Seq, window: int) -> None:
        first_needed = len(seq.tokens) - window + 1
        for i, bid in enumerate(seq.table):
            if (i + 1) * self.bs > first_needed:
                break
            block = self.gpu.blocks[bid]
            if bid != self.null and block.refs > 0:
                self.gpu.drop(block)


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
"""Every broken variant, for tests that expect the oracle to reject each."""


class BrokenLeaksAndIgnoresExtraKey(BrokenHashIgnoresExtraKey, BrokenFreeLeaksLastBlock):
    """Both bugs at once: one of them declared a known difference (``pagedkv check --known``,
    ``specs/oracle.md`` §9), a check must step past it and find the other."""
