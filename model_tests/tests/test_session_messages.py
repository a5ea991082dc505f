"""The manager session writes a call out only for a message (``show.Shown``): every call used to
write out its arguments, a few percent of a check. The messages still name the call."""

from __future__ import annotations

from typing import Any

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.manager_session import IsomorphicManagerSession
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import InvalidArgumentError
from pagedkv.specs.types import ManagerConfig

CONFIG = ManagerConfig(block_size=4, num_gpu_blocks=8, num_cpu_blocks=4)


class OtherError(ReferenceBlockSpaceManager):
    """Refuses ``free`` with another typed error than the reference's."""

    def free(self, seq_id: int) -> None:
        raise InvalidArgumentError(f"no {seq_id}")


class KeepsItsTable(ReferenceBlockSpaceManager):
    """Answers ``get_common_computed_block_ids`` with a list it changes at the next swap-out."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.answer: list[int] = []

    def get_common_computed_block_ids(self, seq_ids: Any) -> list[int]:
        self.answer[:] = super().get_common_computed_block_ids(seq_ids)
        return self.answer

    def swap_out(self, group_id: int) -> list[tuple[int, int]]:
        pairs = super().swap_out(group_id)
        self.answer.append(99)  # the list handed out before changes under its reader
        return pairs


def test_a_refusal_that_differs_names_the_call() -> None:
    session = IsomorphicManagerSession(ReferenceBlockSpaceManager(CONFIG), OtherError(CONFIG))
    with pytest.raises(Divergence, match=r"^free\(7\): model raised UnknownSequenceError"):
        session.call(calls.free(7))


def test_an_answer_read_again_names_both_calls() -> None:
    session = IsomorphicManagerSession(ReferenceBlockSpaceManager(CONFIG), KeepsItsTable(CONFIG))
    session.call(calls.allocate(1, [1], [1, 2, 3, 4, 5]))
    session.call(calls.get_common_computed_block_ids([1]))
    with pytest.raises(Divergence) as raised:
        session.call(calls.swap_out(1))
    assert str(raised.value).startswith("after swap_out(1), the list that"), raised.value
    assert "get_common_computed_block_ids([1]) answered" in str(raised.value)


class MovesItsNullBlock(ReferenceBlockSpaceManager):
    """Shows another null block once ``moved``, its tables and counts unchanged."""

    moved = False

    def get_null_block(self) -> int | None:
        null = super().get_null_block()
        return null if not self.moved or null is None else null + 1


def test_a_null_block_moved_between_queries_diverges() -> None:
    """A query that changes neither side's tables nor counts skips placing them again
    (``IsomorphicManagerSession.call``), but not reading the target's null block."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=6, num_cpu_blocks=2, sliding_window=2)
    target = MovesItsNullBlock(config)
    session = IsomorphicManagerSession(ReferenceBlockSpaceManager(config), target)
    session.call(calls.allocate(1, [2], [1, 2, 3]))
    session.call(calls.get_num_free_gpu_blocks())  # nothing changed: the quick way
    target.moved = True
    with pytest.raises(Divergence, match="null"):
        session.call(calls.get_num_free_gpu_blocks())
