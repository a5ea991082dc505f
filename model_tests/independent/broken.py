"""Deliberately broken variants of ``IndependentManager``: fixtures the oracle must reject.

Each class has exactly one bug, named by the class and stated in its docstring. None of the
bugs is an allowed choice of the spec, so a sound isomorphic comparison against the reference
must report a divergence for each (given a scenario that reaches the bug).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model_tests.independent.manager import (
    IndependentManager,
    _Block,
    _Device,
    _Seq,
    _status,
)
from specs.content_hash import Prefix
from specs.types import AllocStatus, CopyPair, Token
from specs.validation import check_count


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
