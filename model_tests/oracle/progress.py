"""How far a long command has come, for whoever waits on it: on a terminal the spinner's text, and
where standard output is not a terminal (a CI log) one line on stderr every few seconds, so that
a check of 90 s does not look hung.

    checking: 120 of 534 runs, 3,456 calls, 12 s, about 41 s left
    shrinking a divergence: 560 runs, 9,002 calls, 31 s

The estimate is the time so far scaled by what is left of the budget; it is left out while
shrinking (which the budget does not bound) and before the first unit is done.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from pagedkv.model_tests.oracle.timeout import SettingError

PROGRESS_VARIABLE = "PAGEDKV_PROGRESS"
DEFAULT_EVERY = 5.0
"""Seconds between two progress lines where standard output is not a terminal."""
TERMINAL_EVERY = 0.1
"""Seconds between two updates of a terminal's spinner text."""


def every_from_environment() -> float:
    """``PAGEDKV_PROGRESS``: seconds between two progress lines off a terminal (0: none)."""
    text = os.environ.get(PROGRESS_VARIABLE, "")
    if not text:
        return DEFAULT_EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise SettingError(
            f"{PROGRESS_VARIABLE}={text!r}: expected seconds between progress lines (0: none)"
        )
    return value


class Progress:
    """Told how far the work has come, shows it at most every ``every`` seconds (never when
    ``every`` is 0); ``total`` is the budget in ``unit`` (runs, steps, traces), ``doing`` what
    the work is called (``checking``)."""

    def __init__(
        self,
        total: int,
        unit: str,
        doing: str,
        show: Callable[[str], None],
        every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.unit, self.doing = total, unit, doing
        self.show, self.every, self.clock = show, every, clock
        self.started = self.last = clock()

    def __call__(self, done: int, calls: int | None = None, phase: str = "") -> None:
        """``done`` units so far (and ``calls``); ``phase``: work outside the budget, named."""
        now = self.clock()
        if not self.every or now - self.last < self.every:
            return
        self.last = now
        self.show(self.text(done, calls, phase, now - self.started))

    def text(self, done: int, calls: int | None, phase: str, elapsed: float) -> str:
        what = phase or self.doing
        counted = (
            f"{done:,} {self.unit}"
            if phase or done > self.total
            else f"{done:,} of {self.total:,} {self.unit}"
        )
        parts = [counted]
        if calls is not None:
            parts.append(f"{calls:,} calls")
        parts.append(seconds(elapsed))
        if not phase and 0 < done < self.total:
            parts.append(f"about {seconds(elapsed * (self.total - done) / done)} left")
        return f"{what}: {', '.join(parts)}"


def seconds(value: float) -> str:
    """``12 s``, ``3 min 20 s``, ``5 h 7 min``, ``16 days 3 h`` (two units at most: an estimate
    of a budget far too large for the machine reads as such, not as a million minutes)."""
    whole = round(value)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    days = whole // 86400
    return f"{days:,} day{'s' if days != 1 else ''} {whole % 86400 // 3600} h"
