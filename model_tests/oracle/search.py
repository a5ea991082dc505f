"""A check's search, run by run: what the runs cost, the first failure, and when to stop.

A check is a series of Hypothesis searches (``run_check``); every run, whichever search makes
it, ends in ``Search.go_on``, which counts it and says whether the check makes another: not once
the budget's runs are made with no failure, nor once Hypothesis has gone on for
``AFTER_FAILURE_SECONDS`` after one. Leaving Hypothesis between two runs of a search is not
public ground: ``machines/hypothesis_internals.py`` does it.

Hypothesis shrinks for up to five minutes. A lockstep run costs milliseconds, and some failures
took a thousand shrinking runs and more than a minute to reach three steps, most of it spent on
a trace already short. A check lets it shrink for ``SHRINK_SECONDS`` and then deletes steps
itself (``minimize``), so the reported trace is 1-minimal whatever the cut; only how simple its
values are may depend on the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import Phase

from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle.stepping import Stepping

SHRINK_SECONDS = 10.0

AFTER_FAILURE_SECONDS = 1.5 * SHRINK_SECONDS
"""How long a check lets Hypothesis go on once a run has failed: its shrinking, and half as long
again for what it finishes first. A steering pass (``Phase.target``) that finds a failure goes
on climbing its score to the end of the pass: once 4,000 runs and 400 s after the failure. Then
the check stops Hypothesis itself and reports the shortest failing run it saw."""

EPOCH_RUNS = 100
"""Runs per Hypothesis search: a check is a series of searches of this many valid runs
(``max_examples``), each from its own seed (``epoch_seed``), and it stops after the budget's
number of runs, in whatever search it is. Hypothesis shapes a search by its ``max_examples`` (how
small its first cases are, when it starts steering), so a budget that set ``max_examples`` would
make each budget search differently; with every search the same size, a larger budget makes the
smaller one's runs first, in the same order: budgets are nested. (Runs Hypothesis does not count
as valid count here: while steering, a search once made 6,000 of them.)"""

Progress = Callable[[int, int, bool], None]
"""Called after each run with (runs so far, calls so far, whether a failure was seen)."""


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of a check's ``epoch``-th search: the check's own seed for the first."""
    return seed if epoch == 0 else (seed * 1_000_003 + epoch) % 2**32


def epoch_phases(epoch: int) -> list[Phase]:
    """Every other search is steered (``Phase.target``, second, fourth, ...). Hypothesis steers
    once a search is half done, by hill-climbing each ``hypothesis.target`` score from its best
    run, and in a search of 100 runs that climb takes the whole second half: steering every
    search left half the budget to a few runs' neighbours and found the corpus's bugs in fewer
    checks (``specs/corpus.md``); the unsteered searches keep the broad generation."""
    steered = [Phase.target] if epoch % 2 else []
    return [Phase.generate, *steered, Phase.shrink]


@dataclass
class Search:
    """The runs of one check so far, across its searches."""

    runs_allowed: int
    """Runs the budget allows before a failure (after one, Hypothesis's shrinking runs on)."""
    cut_after: float = AFTER_FAILURE_SECONDS
    stepping: Stepping | None = None
    """With known differences: a run ending on one is counted there, and is no failure."""
    progress: Progress | None = None
    runs: int = 0
    calls: int = 0
    """Runs and calls made in all, shrinking included."""
    failing: bool = False
    found_after: tuple[int, int] | None = None
    """(runs, calls) up to and including the first failing run: what finding the bug took."""
    failed_at: float | None = None
    shortest: RunRecord | None = None
    """The failing run with the fewest calls (what a cut search reports)."""
    cut: bool = False
    """Hypothesis went on for ``cut_after`` seconds after a failure and was stopped."""
    choices: Callable[[], bytes] | None = None
    """Where a failure is shared (``--database``): the choices of the run just ended."""
    failing_choices: bytes | None = None
    """The choices of the smallest failing run (shortest first), to share."""
    replaying: bool = False
    """Replaying stored failures, outside the budget (``shared_failures.py``)."""

    def end_replay(self) -> None:
        """The runs replayed are made on top of the budget, not out of it."""
        self.replaying = False
        self.runs_allowed += self.runs

    def go_on(self, record: RunRecord) -> bool:
        """Count the run ``record`` stands for; whether the check makes another."""
        if record.config is None:
            return True  # declined before it began
        self.runs += 1
        self.calls += len(record.calls)
        # a run stepped past (a known difference) is no failure, but it spends the budget too;
        # after the first unknown failure, runs are Hypothesis's shrinking: not counted there
        stepped = self.stepping is not None and self.stepping.ended(record, count=not self.failing)
        if not stepped:
            self._note_failure(record)
        if self.progress is not None:
            self.progress(self.runs, self.calls, self.failing)
        if self.failed_at is not None and self.shortest is not None:
            self.cut = time.monotonic() - self.failed_at > self.cut_after
            return not self.cut
        # in whatever search it is; a replay of stored failures runs to its end
        return self.failing or self.replaying or self.runs < self.runs_allowed

    def _note_failure(self, record: RunRecord) -> None:
        failed = record.failed or record.failed_call or record.checking_config is not None
        self.failing = self.failing or failed
        if self.failing and self.found_after is None:
            self.found_after = (self.runs, self.calls)
            self.failed_at = time.monotonic()
        if record.error is not None and (
            self.shortest is None or len(record.calls) < len(self.shortest.calls)
        ):
            self.shortest = record
        if record.error is not None and self.choices is not None:
            choices = self.choices()
            if self.failing_choices is None or _shortlex(choices) < _shortlex(self.failing_choices):
                self.failing_choices = choices


def _shortlex(choices: bytes) -> tuple[int, bytes]:
    """Shorter first, then in byte order: the order Hypothesis replays stored failures in."""
    return len(choices), choices
