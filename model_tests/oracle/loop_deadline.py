"""The per-call timeout for a loop that times its calls (``pagedkv bench``), at no cost per call.

The guard (``guard.py``) puts a deadline around each call it forwards: a microsecond or so, as
much as many operations cost, so a benchmark that called through it would measure the guard. A
loop of calls needs less: the call under way is the one the loop's iterator last handed out. The
loop iterates over ``LoopDeadline.follow(items)`` (the items' own iterator, nothing in between),
and the watchdog (``watchdog.py``) reads how many items are left each time it looks: while that
number stays the same, one call is under way, and once it has stayed so for the timeout, the main
thread is interrupted there, as the guard's calls are, and the loop ends in ``TargetTimeout``.

The watchdog looks every quarter of a second or so, so a call is stopped between the timeout and
a quarter of a second after it; never before. Where the watchdog cannot interrupt (another thread,
another system) or the timeout is ``FOREVER``, the loop runs without a deadline.
"""

from __future__ import annotations

import contextlib
import operator
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from pagedkv.model_tests.oracle.timeout import FOREVER, TargetTimeout, show
from pagedkv.model_tests.oracle.watchdog import WATCHDOG, Call, Interrupted, here, watching

T = TypeVar("T")


class LoopDeadline(Call):
    """The calls of one or more nested loops: the deadline moves on whenever a loop does."""

    __slots__ = ("loops", "seen", "steps")

    def __init__(self, timeout: float, what: Callable[[], str], outer: Call | None) -> None:
        super().__init__(timeout, lambda _: what(), (), outer, time.monotonic())
        self.loops: list[Iterator[object]] = []
        self.steps = 0
        self.seen: tuple[int, ...] = ()

    def next_call(self) -> None:
        """A call outside the loops begins (building the target, a setup call)."""
        self.steps += 1

    def follow(self, items: Iterable[T]) -> Iterator[T]:
        """``items``' iterator, watched: iterate over it, not over ``items``."""
        iterator = iter(items)
        alive = [loop for loop in self.loops if operator.length_hint(loop)]  # inner loops done
        self.loops = [*alive, iterator]  # a new list: the watchdog may be reading the old one
        return iterator

    def due(self) -> float:
        """Read by the watchdog's thread: the deadline, moved on if a loop has moved."""
        now = (self.steps, *(operator.length_hint(loop) for loop in self.loops))
        if now != self.seen:
            self.seen = now
            self.deadline = time.monotonic() + self.timeout
        return self.deadline + self.interrupts * self.grace


class Unwatched:
    """No deadline: ``follow`` hands the items' iterator back as it is."""

    def follow(self, items: Iterable[T]) -> Iterator[T]:
        return iter(items)

    def next_call(self) -> None:
        pass


@contextlib.contextmanager
def calls_within(timeout: float, describe: Callable[[], str]) -> Iterator[LoopDeadline | Unwatched]:
    """A deadline of ``timeout`` for each call of the loops inside; ``describe`` names the call
    under way (for the ``TargetTimeout``'s message)."""
    if timeout == FOREVER or not here():
        yield Unwatched()
        return
    with watching() as usable:
        if not usable:
            yield Unwatched()
            return
        dog = WATCHDOG
        deadline = LoopDeadline(timeout, describe, dog.current)
        dog.current = deadline
        try:
            yield deadline
        except Interrupted as raised:
            if raised.call is not deadline:
                raise  # an outer call's
            raise _timeout(deadline) from None
        finally:
            dog.current = deadline.outer
        if deadline.interrupts:  # the target caught the interrupt and went on: too late still
            raise _timeout(deadline)


def _timeout(deadline: LoopDeadline) -> TargetTimeout:
    return TargetTimeout(
        f"the target did not return from {deadline.what()} within {show(deadline.timeout)}"
        " (--timeout or PAGEDKV_TIMEOUT)"
    )


__all__ = ["LoopDeadline", "Unwatched", "calls_within"]
