"""A step as a learner sees it: the call, its result, the state after it, and, when a target ran
beside the reference, what the target did and where it parted from the reference.

The demo and the trace viewer both produce a list of ``Frame``; the terminal and the page draw it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture
from pagedkv.model_tests.teaching.rules import Rule
from pagedkv.model_tests.teaching.snapshot import Picture
from pagedkv.specs.operations import OPERATIONS, Level
from pagedkv.specs.types import BlockId, CopyPair


@dataclass(frozen=True)
class TargetRow:
    """A table as the target gave it, beside the reference's blocks in the target's ids."""

    label: str
    blocks: tuple[BlockId, ...] | None
    """None when the target could not give the table (``error`` says why)."""
    expected: tuple[BlockId | None, ...] | None
    """The reference's blocks translated into target ids; None where no counterpart is known
    (the whole tuple None under the safety tier: there is no reference)."""
    error: str = ""

    def differs_at(self) -> frozenset[int]:
        """Positions where the target's block is not the counterpart of the reference's."""
        if self.expected is None:
            return frozenset()
        if self.blocks is None:
            return frozenset(range(len(self.expected)))
        longest = max(len(self.blocks), len(self.expected))
        out = set()
        for index in range(longest):
            mine = self.expected[index] if index < len(self.expected) else None
            theirs = self.blocks[index] if index < len(self.blocks) else None
            missing = index >= len(self.expected) or index >= len(self.blocks)
            if missing or (mine is not None and mine != theirs):
                out.add(index)
        return frozenset(out)


@dataclass(frozen=True)
class FreeCount:
    device: str
    target: int | None
    reference: int | None
    """None under the safety tier: there is no reference."""

    @property
    def differs(self) -> bool:
        return self.reference is not None and self.target != self.reference


@dataclass(frozen=True)
class TargetSide:
    """What the protocol showed of the target after the step (``specs/oracle.md`` §1)."""

    outcome: str
    free: tuple[FreeCount, ...]
    tables: tuple[TargetRow, ...] = ()


@dataclass(frozen=True)
class Finding:
    """Why a step is marked: the target diverged there, or the trace is stale there."""

    kind: str
    """``"divergence"`` or ``"stale"``."""
    rule: Rule
    message: str


@dataclass(frozen=True)
class Frame:
    number: int
    """0 is the state before the first call (creating the manager or pool)."""
    call: str
    outcome: str
    picture: Picture | RequestPicture | DefragPicture | None
    """The reference's state after the step; None when there is none (a refused configuration)."""
    narration: str = ""
    copies: tuple[CopyPair, ...] = ()
    """The (source, destination) pairs the step hands to the copy or swap kernel."""
    target: TargetSide | None = None
    finding: Finding | None = None

    @property
    def marked(self) -> bool:
        return self.finding is not None


@dataclass
class Walk:
    """Every frame of a scenario or a trace, and what it is about."""

    title: str
    level: str
    """The level's name: "pool", "manager", "request" or "defrag"."""
    config: str
    frames: list[Frame] = field(default_factory=list)
    target: str | None = None
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    safety: bool = False
    """A safety-tier trace: the target alone, held to what every correct allocator guarantees."""

    @property
    def finding(self) -> Frame | None:
        return next((frame for frame in self.frames if frame.marked), None)


def copies_of(level: Level, op: str, result: Any) -> tuple[CopyPair, ...]:
    operation = OPERATIONS[level].get(op)
    if operation is None or operation.result != "pairs" or not isinstance(result, list):
        return ()
    return tuple((int(s), int(d)) for s, d in result)
