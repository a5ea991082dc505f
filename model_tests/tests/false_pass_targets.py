"""Managers that answer with something that only compares like the right value, or that hand out
a list they later reuse: each passed ``pagedkv check``, ``replay`` and ``soak`` before the
sessions compared values (``specs/oracle.md`` §1, "Values, not objects"). Each is the optimized
manager with one answer changed, so that nothing else diverges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from unittest import mock

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import BlockId, CopyPair, ManagerConfig, Token


class AgreeableInt(int):
    """An int whose comparisons say yes to anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = int.__hash__


class FreeCountIsAny(OptimizedBlockSpaceManager):
    def get_num_free_gpu_blocks(self) -> Any:
        return mock.ANY


class FreeCountAgreesWrongly(OptimizedBlockSpaceManager):
    """One block more than it has, in an int that agrees with every other."""

    def get_num_free_gpu_blocks(self) -> int:
        return AgreeableInt(super().get_num_free_gpu_blocks() + 1)


class FreeCountIsFloat(OptimizedBlockSpaceManager):
    def get_num_free_gpu_blocks(self) -> Any:
        return float(super().get_num_free_gpu_blocks())


class FreeCountIsNumpy(OptimizedBlockSpaceManager):
    def get_num_free_gpu_blocks(self) -> Any:
        import numpy  # only this fixture needs it, and only where it is installed

        return numpy.int64(super().get_num_free_gpu_blocks())


class CanAppendIsInt(OptimizedBlockSpaceManager):
    """``1`` / ``0`` where a ``bool`` is due."""

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> Any:
        return int(super().can_append_slots(group_id, num_new_tokens, num_lookahead_slots))


class OneTableList(OptimizedBlockSpaceManager):
    """``get_block_table`` refills one list for every sequence (a reused buffer)."""

    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._one_list: list[BlockId] = []

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        self._one_list[:] = super().get_block_table(seq_id)
        return self._one_list


class OnePairsList(OptimizedBlockSpaceManager):
    """``append_slots`` refills one list of copy pairs at every call."""

    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._one_pairs_list: list[CopyPair] = []

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        self._one_pairs_list[:] = super().append_slots(seq_id, tokens, num_lookahead_slots)
        return self._one_pairs_list


# --- a call that changes what it was handed (a scheduler's own lists) ---------------------------


class OverwritesPrompt(OptimizedBlockSpaceManager):
    """Allocates, then writes over the caller's prompt (a sequence's own token list in vLLM)."""

    def allocate(self, group_id: int, seq_ids: Sequence[int], prompt: Any, *rest: Any) -> None:
        super().allocate(group_id, seq_ids, prompt, *rest)
        if type(prompt) is list:
            prompt[0] = prompt[0] + 1


class EmptiesSeqIds(OptimizedBlockSpaceManager):
    def get_common_computed_block_ids(self, seq_ids: Any) -> list[BlockId]:
        found = super().get_common_computed_block_ids(seq_ids)
        if type(seq_ids) is list:
            seq_ids.clear()
        return found


class RemembersPromptsByIdentity(OptimizedBlockSpaceManager):
    """``can_allocate`` remembered by the prompt's identity, never looked at again: wrong once
    the scheduler changes its list in place (``specs/block_manager.md`` §5.1). The machines hand
    every call its own copy of a list, so no check passes the same list twice: a known false
    PASS (``test_false_pass.py``)."""

    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._answers: dict[int, tuple[object, Any]] = {}

    def can_allocate(self, prompt: Any, *rest: Any) -> Any:
        known = self._answers.get(id(prompt))
        if known is not None and known[0] is prompt:
            return known[1]
        answer = super().can_allocate(prompt, *rest)
        self._answers[id(prompt)] = (prompt, answer)
        return answer
