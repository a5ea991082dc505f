"""One call of a run, as the session saw it: what a trace records."""

from __future__ import annotations

from typing import Any, NamedTuple


class Step(NamedTuple):
    """A named tuple: a run records one per call (a frozen dataclass took twice as long to make)."""

    method: str
    args: tuple[Any, ...]
    outcome: Any
    """The model's result or error (the target's, under the safety tier)."""
