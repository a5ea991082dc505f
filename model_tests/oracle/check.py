"""Run the isomorphic lockstep machine against a target and explain the outcome.

Shared by ``pagedkv check`` and the pytest plugin: ``run_check`` drives Hypothesis, keeps the
shrunk failing run, deletes the steps it can fail without (``minimize``), writes its trace and
replays that trace to confirm it reproduces the failure; ``Report`` is the verdict as data
(rendered plain or with rich by the caller).

Every call into the target has a timeout (``timeout.py``). A call that does not return in time
fails the run at once: Hypothesis does not shrink it (that would wait again for every candidate);
the run is minimized by deleting steps, replaying an ``exec:`` program with a short wait, and
reported as it stands for an in-process target, which cannot be called again.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from model_tests.lockstep.calls import Divergence, TargetStopped
from model_tests.lockstep.capture import RunRecord
from model_tests.machines.manager_machine import ManagerLockstep, manager_lockstep_case
from model_tests.machines.pool_machine import PoolLockstep, lockstep_case
from model_tests.oracle import codec, trace
from model_tests.oracle.codec import Level
from model_tests.oracle.exec_target import close_target
from model_tests.oracle.guard import guard
from model_tests.oracle.minimize import minimize
from model_tests.oracle.trace import Trace, Verdict

DEFAULT_STEPS = 2000
DEFAULT_TRACE = "pagedkv-divergence.jsonl"
MAX_STEPS_PER_RUN = 30

Progress = Callable[[int, int, bool], None]
"""Called after each run with (runs so far, calls so far, whether a failure was seen)."""


def machine_case(
    factory: Callable[[Any], Any], level: Level
) -> type[ManagerLockstep] | type[PoolLockstep]:
    """The isomorphic machine of ``level`` for ``factory``'s targets; each run's target goes back
    to its factory when the run ends (an ``exec:`` program then serves the next run)."""
    case: type[ManagerLockstep] | type[PoolLockstep]
    if level == "manager":
        case = manager_lockstep_case(factory, isomorphic=True)
    else:
        case = lockstep_case(factory, isomorphic=True)
    case.release_target = staticmethod(close_target)
    return case


def budget(steps: int, per_run: int = MAX_STEPS_PER_RUN) -> tuple[int, int]:
    """(max_examples, stateful_step_count) so that about ``steps`` calls run."""
    per_run = max(5, min(per_run, steps))
    return max(1, math.ceil(steps / per_run)), per_run


@dataclass
class CheckResult:
    level: Level
    seed: int
    runs: int = 0
    calls: int = 0
    failure: BaseException | None = None
    record: RunRecord | None = None
    message: str = ""
    trace: Trace | None = None
    trace_path: Path | None = None
    replayed: Verdict | None = None
    shrunk_from: int | None = None
    """Steps in Hypothesis's shrunk run, when deleting steps made it shorter."""
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.failure is None

    @property
    def hung(self) -> bool:
        return isinstance(self.failure, TargetStopped)


def run_check(
    factory: Callable[[Any], Any],
    level: Level = "manager",
    *,
    steps: int = DEFAULT_STEPS,
    seed: int | None = None,
    trace_out: str | Path | None = DEFAULT_TRACE,
    progress: Progress | None = None,
    steps_per_run: int = MAX_STEPS_PER_RUN,
    timeout: float | None = None,
) -> CheckResult:
    """Check ``factory``'s targets against the reference in isomorphic mode, each call within
    ``timeout`` seconds (None: the environment's). On a failure, the shrunk run is minimized,
    written as a trace to ``trace_out`` (unless None; checked before the search) and replayed."""
    if trace_out is not None:
        trace.check_writable(trace_out)
    seed = random.randrange(2**32) if seed is None else seed
    result = CheckResult(level, seed)
    factory = guard(factory, timeout)
    case = machine_case(factory, level)
    failing = False

    def on_run_end(record: RunRecord) -> None:
        nonlocal failing
        result.runs += 1
        result.calls += len(record.calls)
        failing = failing or record.failed_call or record.checking_config is not None
        if progress is not None:
            progress(result.runs, result.calls, failing)

    case.on_run_end = staticmethod(on_run_end)
    case._hypothesis_internal_use_seed = seed
    examples, per_run = budget(steps, steps_per_run)
    chosen = settings(
        max_examples=examples,
        stateful_step_count=per_run,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )
    with with_reporter(lambda _: None):
        try:
            run_state_machine_as_test(case, settings=chosen)
        except (Exception, TargetStopped) as failure:  # a hang stops the search at once
            result.failure = failure
    if result.failure is None:
        return result
    result.record = getattr(case, "last_run", None)
    result.message = failure_message(result.failure)
    if result.record is not None and result.record.config is not None:
        try:
            result.trace = trace.trace_of_run(result.record)
        except (trace.TraceError, codec.CodecError) as error:
            result.message += f" (no trace: {error})"
    if result.trace is not None:
        _finish(result, factory, trace_out)
    return result


def _finish(result: CheckResult, factory: Any, trace_out: str | Path | None) -> None:
    """Minimize the failing trace, write it, replay it (what a hung target allows of these)."""
    assert result.trace is not None
    callable_again = not result.hung or getattr(factory, "retries_after_hang", False)
    if callable_again:
        minimized = minimize(result.trace, factory)
        if minimized is not None and len(minimized.trace.ops) < minimized.before:
            result.shrunk_from = minimized.before
            result.trace = minimized.trace
            result.record = record_of(minimized.trace)
            result.message = minimized.verdict.message
        if minimized is not None and not minimized.complete:
            result.notes.append(
                f"note: deleting steps stopped after {minimized.replays} replays; the trace may"
                " not be 1-minimal"
            )
    else:
        result.notes.append(
            "note: not shrunk or replayed: the target hung, and a Python thread cannot be"
            " stopped, so it is not called again"
        )
    if trace_out is not None:
        try:
            result.trace_path = trace.write(result.trace, trace_out)
        except trace.TraceError as error:
            result.notes.append(f"note: the trace was not written: {error}")
    if not result.hung:
        result.replayed = trace.replay(result.trace, factory)


def record_of(minimal: Trace) -> RunRecord:
    """The run a minimized trace stands for: its calls, the last one failing."""
    outcomes: list[Any] = []
    for op in minimal.ops[:-1]:
        if "error" in op.expect:
            outcomes.append(codec.error_class(op.expect["error"])(""))
        else:
            outcomes.append(codec.decode_result(minimal.level, op.op, op.expect["result"]))
    return RunRecord(
        level=minimal.level,
        config=minimal.config,
        calls=tuple((op.op, op.args) for op in minimal.ops),
        failed_call=True,
        outcomes=tuple(outcomes),
    )


def failure_message(failure: BaseException) -> str:
    if isinstance(failure, Divergence | TargetStopped):
        return str(failure)
    if type(failure) is AssertionError and str(failure):  # a machine's own check, e.g. configs
        return " ".join(str(failure).split())
    text = " ".join(str(failure).split())
    return f"{type(failure).__name__}: {text}" if text else type(failure).__name__


# --- the verdict, as data ---------------------------------------------------------------------


@dataclass(frozen=True)
class StepLine:
    number: int
    call: str
    outcome: str
    failed: bool = False


@dataclass
class Report:
    ok: bool
    title: str
    verdict: str
    config: str = ""
    steps: list[StepLine] = field(default_factory=list)
    detail: str = ""
    """What the model expected and what the target did."""
    notes: list[str] = field(default_factory=list)

    def plain(self) -> str:
        lines = [self.title, self.verdict]
        if self.config:
            lines += ["", f"config: {self.config}"]
        for step in self.steps:
            mark = "  <-- diverges" if step.failed else ""
            lines.append(f"  {step.number:>3}. {step.call} -> {step.outcome}{mark}")
        if self.detail:
            lines += ["", self.detail]
        if self.notes:
            lines.append("")
            lines += self.notes
        return "\n".join(lines)


def show_config(config: Any) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in codec.encode_config(config).items())
    return f"{type(config).__name__}({fields})"


def show_outcome(outcome: Any) -> str:
    return codec.show_value(outcome)


def check_report(result: CheckResult, target: str, replay_hint: str | None = None) -> Report:
    where = f"{result.level} level, isomorphic mode, seed {result.seed}"
    title = f"pagedkv check {target} ({where})"
    if result.passed:
        return Report(
            True,
            title,
            f"PASS: {result.runs} runs, {result.calls} calls; the target agrees with the reference",
        )
    record = result.record
    report = Report(False, title, "")
    if record is None or record.config is None:
        report.verdict = "FAIL before the first run was set up"
        report.detail = result.message
        return report
    if record.checking_config is not None:
        report.verdict = "FAIL: the target and the reference disagree about a configuration"
        report.config = show_config(record.checking_config)
    else:
        count = len(record.calls)
        steps = f"{count} step{'' if count == 1 else 's'}"
        if not count:
            how = "fails while it is created for this configuration"
        elif result.hung:
            how = f"does not answer in time (hangs) at the last of {steps}"
        else:
            how = f"diverges from the reference; shrunk to {steps}"
        deleted = f"; {result.shrunk_from} steps before deleting" if result.shrunk_from else ""
        report.verdict = (
            f"FAIL: the target {how} (found in {result.runs} runs, {result.calls} calls{deleted})"
        )
        report.config = show_config(record.config)
        for number, (op, args) in enumerate(record.calls, 1):
            done = number <= len(record.outcomes)
            if done:
                outcome = show_outcome(record.outcomes[number - 1])
            elif result.trace is not None and len(result.trace.ops) >= number:
                expect = result.trace.ops[number - 1].expect
                outcome = trace.show_expect(result.level, op, expect)
            else:
                outcome = "?"
            report.steps.append(StepLine(number, codec.show_call(op, args), outcome, not done))
    failed_at = len(record.calls) if record.failed_call else None
    where = f"at step {failed_at}, " if failed_at else ""
    report.detail = f"expected vs did: {where}{result.message}"
    report.notes += result.notes
    if result.trace_path is not None:
        report.notes.append(f"trace: {result.trace_path}")
        if replay_hint:
            report.notes.append(f"replay: {replay_hint}")
    if result.replayed is not None and result.replayed.ok:
        report.notes.append(
            "note: replaying the trace does not reproduce the failure (is the target"
            " deterministic?)"
        )
    return report


def replay_report(
    path: str, loaded: Trace, verdict: Verdict, target: str, context: int = 12
) -> Report:
    title = f"pagedkv replay {path} --target {target} ({loaded.level} level)"
    if verdict.ok:
        return Report(True, title, f"PASS: {verdict.steps} steps; the target agrees")
    head = "STALE TRACE" if verdict.status == "stale" else "FAIL"
    report = Report(False, title, f"{head}: {verdict.describe()}")
    report.config = show_config(loaded.config)
    last = verdict.step or 0
    first = max(1, last - context + 1)
    if first > 1:
        report.notes.append(f"(steps 1..{first - 1} not shown)")
    for number in range(first, last + 1):
        op = loaded.ops[number - 1]
        report.steps.append(
            StepLine(
                number,
                codec.show_call(op.op, op.args),
                trace.show_expect(loaded.level, op.op, op.expect),
                failed=number == last,
            )
        )
    return report
