"""One call of a run, as the session saw it: what a trace records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    method: str
    args: tuple[Any, ...]
    outcome: Any
    """The model's result or error (the target's, under the safety tier)."""
