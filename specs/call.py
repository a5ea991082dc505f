"""One protocol call as a value: what the machines hand a lockstep session.

A call carries the operation's name (as traces, reports and the known-differences files record
it), its arguments, and the way to the method that performs it on any side (``lambda side:
side.append_slots``): so a reader, and mypy, follow a machine's call to the Protocol in
``specs/interface.py`` and from there to every implementation. The typed constructors that
build calls are ``specs/manager_calls.py`` and ``specs/pool_calls.py``; each mirrors one
operation of ``specs/operations.py`` (a test holds the three to the same names and parameters).

The method is looked up, not called, by the function the call holds, so that a call passes no
frame of its own on the way to the target; the session calls it with its own copy of the
arguments for each side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Side = TypeVar("Side", contravariant=True)
Result = TypeVar("Result", covariant=True)


@dataclass(frozen=True, slots=True)
class Call(Generic[Side, Result]):
    name: str
    args: tuple[Any, ...]
    method: Callable[[Side], Callable[..., Result]] = field(compare=False)
    """The side's method for this operation, e.g. ``lambda side: side.free``. Not compared: two
    calls of one operation with equal arguments are equal (and hash alike, as Hypothesis's
    labels of drawn calls need: a new function per call would make every draw look new)."""

    def __repr__(self) -> str:
        """As a program would write it (what Hypothesis shows of a drawn call)."""
        return f"{self.name}({', '.join(repr(arg) for arg in self.args)})"
