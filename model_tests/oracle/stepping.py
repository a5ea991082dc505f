"""Stepping past known differences during a check (``pagedkv check --known FILE``;
``specs/oracle.md`` §9; the classes themselves are ``known.py``).

A run that ends on a known difference cannot go on in lockstep (the two sides now differ, and
nothing defines what either should do next), so it ends there as it would anyway; it is counted
under its class and then rejected, so that Hypothesis treats it as neither a pass nor a failure:
it does not report it, and does not shrink towards it, so a failure it reports is an unknown
one. The first failure of a run ends it, so a known difference never hides an unknown one found
before it in the same run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import reject
from hypothesis.errors import HypothesisException

from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.known import Finding, KnownDifferences, finding_of
from pagedkv.model_tests.oracle.minimize import minimize
from pagedkv.model_tests.oracle.trace import Trace, Verdict


@dataclass
class Stepping:
    """What a check stepped past: the runs that ended on each known class, with the shortest
    example of each (a trace once written)."""

    known: KnownDifferences
    runs: dict[str, int] = field(default_factory=dict)
    examples: dict[str, RunRecord] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    traces: dict[str, Path] = field(default_factory=dict)
    """Each class's example, minimized while it stays that class, written beside the trace."""
    _failure: BaseException | None = None
    """The failure on its way out of the run now ending."""
    _ended_known: str | None = None

    @property
    def total(self) -> int:
        return sum(self.runs.values())

    def wrap(self, case: type[Any]) -> type[Any]:
        """``case`` whose runs that end on a known difference are rejected. Its teardown sees the
        failure on its way out (Hypothesis calls it in a ``finally``); the run's hook, called
        from the machine's own teardown, asks ``ended`` about it."""
        stepping = self

        def teardown(machine: Any) -> None:
            error = sys.exc_info()[1]
            own = isinstance(error, HypothesisException)  # its control flow
            stepping._failure = None if own or not isinstance(error, Exception) else error
            stepping._ended_known = None
            case.teardown(machine)
            if stepping._ended_known is not None:
                reject()

        return type(f"{case.__name__}_past_known", (case,), {"teardown": teardown})

    def ended(self, record: RunRecord, *, count: bool) -> bool:
        """Whether the run ``record`` stands for ended on a known difference; counted (and its
        example kept if shortest) when ``count`` (not while Hypothesis shrinks another)."""
        failure = self._failure
        if failure is None or not record.failed:
            return False
        finding = finding_of(failure, record)
        name = None if finding is None else self.known.classify(finding)
        self._ended_known = name
        if name is None:
            return False
        if count:
            self.runs[name] = self.runs.get(name, 0) + 1
            kept = self.examples.get(name)
            if kept is None or len(record.calls) < len(kept.calls):
                self.examples[name] = record
                self.messages[name] = " ".join(str(failure).split())
        return True

    def class_of(self, candidate: Trace, verdict: Verdict) -> str | None:
        """The known class of a replayed divergence at the trace's last step."""
        if not candidate.ops or verdict.status != "divergence":
            return None
        parts = verdict.parts or ((verdict.kind, verdict.message),)
        return self.known.classify(Finding(candidate.ops[-1].op, parts, candidate.config))

    def unknown(self, candidate: Trace, verdict: Verdict) -> bool:
        """For minimizing a failure: a candidate fails the same way only if not a known one."""
        return self.class_of(candidate, verdict) is None

    def _still(self, name: str) -> Callable[[Trace, Verdict], bool]:
        return lambda candidate, verdict: self.class_of(candidate, verdict) == name

    def write_examples(self, factory: Any, trace_out: str | Path) -> list[str]:
        """Each class's shortest example, minimized while it stays that class, written beside
        the main trace (``x.jsonl`` -> ``x.known-NAME.jsonl``); notes on what was not."""
        notes = []
        for name, record in sorted(self.examples.items()):
            try:
                example = trace.trace_of_run(record)
            except (trace.TraceError, codec.CodecError):
                continue
            minimized = minimize(example, factory, same=self._still(name))
            if minimized is not None:
                example = minimized.trace
                self.messages[name] = minimized.verdict.message  # the example's own
            path = Path(trace_out)
            beside = path.with_name(f"{path.stem}.known-{name}{path.suffix or '.jsonl'}")
            try:
                self.traces[name] = trace.write(example, beside)
            except trace.TraceError as error:
                notes.append(f"note: the example of {name} was not written: {error}")
        return notes

    # --- in the report ---------------------------------------------------------------------------

    def _by_runs(self) -> list[tuple[str, int]]:
        return sorted(self.runs.items(), key=lambda item: (-item[1], item[0]))

    def summary(self) -> str:
        """``12 runs ended on known differences: D4 (9), D1 (3)``."""
        total = self.total
        return (
            f"{total} run{'' if total == 1 else 's'} ended on known differences: {self.classes()}"
        )

    def classes(self) -> str:
        """``D4 (9), D1 (3)``: the runs that ended on each class."""
        return ", ".join(f"{name} ({runs})" for name, runs in self._by_runs())

    def short(self) -> str:
        """``D4x9 D1x3``, or ``-``."""
        return " ".join(f"{name}x{runs}" for name, runs in self._by_runs()) or "-"

    def lines(self) -> list[str]:
        """One line per class stepped past: its runs, what it is, its example."""
        head = f"known differences ({self.known.source}):"
        if not self.total:
            return [f"{head} no run ended on one"]
        lines = [f"{head} {self.summary()}"]
        for name, runs in self._by_runs():
            about = self.known.about(name)
            line = f"  {name}: {runs} run{'' if runs == 1 else 's'}" + (
                f"; {about}" if about else ""
            )
            example = self.traces.get(name)
            lines.append(line + (f"; example: {example}" if example is not None else ""))
            lines.append(f"    e.g. {self.messages[name]}")
        return lines
