"""How long a check lets Hypothesis shrink a failing run.

Hypothesis shrinks for up to five minutes (``MAX_SHRINKING_SECONDS``, not a public setting). A
lockstep run costs milliseconds, and some failures took a thousand shrinking runs and more than a
minute to reach three steps, most of it spent on a trace already short. A check stops Hypothesis
after ``SHRINK_SECONDS`` and then deletes steps itself (``minimize``), so the reported trace is
1-minimal whatever the cut; only how simple its values are may depend on the machine's speed.
The limit is set for the duration of a check and restored after (``test_shrink_time`` fails
loudly if a Hypothesis release renames the knob).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import engine

SHRINK_SECONDS = 10.0

AFTER_FAILURE_SECONDS = 1.5 * SHRINK_SECONDS
"""How long a check lets Hypothesis go on once a run has failed: its shrinking, and half as long
again for what it finishes first. A steering pass (``Phase.target``) that finds a failure goes
on climbing its score to the end of the pass: once 4,000 runs and 400 s after the failure. Then
the check stops Hypothesis itself and reports the shortest failing run it saw."""


@contextmanager
def shrinking_for(seconds: float = SHRINK_SECONDS) -> Iterator[None]:
    """Hypothesis stops shrinking after ``seconds`` inside this block."""
    before = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = before
