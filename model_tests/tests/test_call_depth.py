"""A reader can follow one call from the session to the target: an ``append_slots`` made by
``pagedkv check`` (``run_check``: the search, the guard with its timeout) passes at most 4 frames
of the project's own between the session's ``call`` and the target's method."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import ClassVar

import pagedkv
from pagedkv.model_tests.oracle.check import run_check
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import CopyPair, ManagerConfig, Token

ROOT = Path(pagedkv.__file__).resolve().parents[1]
MOST_FRAMES = 4
LOCKSTEP = ROOT / "model_tests" / "lockstep"


def _ours(frame: FrameType) -> bool:
    return Path(frame.f_code.co_filename).resolve().is_relative_to(ROOT)


def frames_below_session(frame: FrameType | None) -> list[str]:
    """The project's frames from ``frame`` (the caller of the target's method) up to the
    session's ``call``, that one excluded, innermost first."""
    found: list[str] = []
    while frame is not None:
        where = Path(frame.f_code.co_filename).resolve()
        if frame.f_code.co_name == "call" and where.is_relative_to(LOCKSTEP):
            return found
        if _ours(frame):
            found.append(f"{where.relative_to(ROOT)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    raise AssertionError("no session's call on the stack")


class Recording(OptimizedBlockSpaceManager):
    """The optimized manager, noting the stack of the first ``append_slots`` it serves."""

    seen: ClassVar[list[list[str]]] = []

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        if not Recording.seen:
            Recording.seen.append(frames_below_session(sys._getframe(1)))
        return super().append_slots(seq_id, tokens, num_lookahead_slots)


def make(config: ManagerConfig) -> Recording:
    return Recording(config)


def test_an_append_reaches_the_target_in_a_few_frames() -> None:
    Recording.seen.clear()
    result = run_check(make, "manager", steps=300, seed=0, trace_out=None)
    assert result.passed
    assert Recording.seen, "no append_slots was made"
    frames = Recording.seen[0]
    assert len(frames) <= MOST_FRAMES, "\n".join(frames)
