"""Run the isomorphic lockstep machine against a target and explain the outcome.

Shared by ``pagedkv check`` and the pytest plugin: ``run_check`` drives Hypothesis, keeps the
shrunk failing run, deletes the steps it can fail without (``minimize``), writes its trace and
replays that trace to confirm it reproduces the failure; ``Report`` is the verdict as data
(rendered plain or with rich by the caller).

Every call into the target has a timeout (``timeout.py``). A call that does not return in time
fails the run at once: Hypothesis does not shrink it (that would wait again for every candidate);
the run is minimized by deleting steps, replaying an ``exec:`` program with a short wait, and
reported as it stands for an in-process target, which is not called again.
"""

from __future__ import annotations

import itertools
import math
import random
import unittest
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Unsatisfiable

from pagedkv.model_tests.lockstep.calls import Divergence, TargetStopped
from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.machines.defrag_machine import DefragLockstep, defrag_case
from pagedkv.model_tests.machines.hypothesis_internals import (
    ScopedDatabase,
    leaving_when,
    run_choices,
    run_search,
    shrinking_for,
)
from pagedkv.model_tests.machines.manager_machine import (
    Contract,
    ManagerLockstep,
    Mode,
    manager_lockstep_case,
)
from pagedkv.model_tests.machines.pool_machine import PoolLockstep, lockstep_case
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.collector import fewer_collections
from pagedkv.model_tests.oracle.exec_target import close_target
from pagedkv.model_tests.oracle.guard import guard
from pagedkv.model_tests.oracle.known import (
    Finding,
    KnownDifferences,
    entry_for,
    finding_of,
    kinds_of,
)
from pagedkv.model_tests.oracle.minimize import minimize
from pagedkv.model_tests.oracle.request_case import OracleRequestLockstep, Tier, request_case
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.model_tests.oracle.search import (
    AFTER_FAILURE_SECONDS,
    EPOCH_RUNS,
    SHRINK_SECONDS,
    Progress,
    Search,
    epoch_phases,
    epoch_seed,
)
from pagedkv.model_tests.oracle.shared_failures import SharedFailures, scope
from pagedkv.model_tests.oracle.stepping import Stepping
from pagedkv.model_tests.oracle.trace import Trace, Verdict
from pagedkv.model_tests.oracle.watchdog import watched
from pagedkv.specs.policy import Profile
from pagedkv.specs.policy import profile as named_profile

PAGEDKV_PROFILE = named_profile("pagedkv")

DEFAULT_STEPS = 16_000
"""The default budget of the pool and manager levels, in rule steps (``default_steps``)."""
REQUEST_STEPS = 32_000
"""The request level's default budget: its machine plays a scheduler over three group layouts
and a swarm of features, so the rarer states take more runs to meet; at 16,000 steps, three of
the corpus's wrong variants were caught only past the budget on one seed each
(``specs/corpus.md``)."""
DEFAULT_TRACE = "pagedkv-divergence.jsonl"
MAX_STEPS_PER_RUN = 30


def default_steps(level: Level) -> int:
    """``check``'s budget when none is given: ``REQUEST_STEPS`` at the request level."""
    return REQUEST_STEPS if level == "request" else DEFAULT_STEPS


Case = (
    type[ManagerLockstep] | type[PoolLockstep] | type[OracleRequestLockstep] | type[DefragLockstep]
)


def machine_case(
    factory: Callable[[Any], Any],
    level: Level,
    profile: Profile = PAGEDKV_PROFILE,
    contract: Contract = "any",
    layouts: Sequence[GroupKind] = LAYOUTS,
) -> Case:
    """The machine of ``level`` for ``factory``'s targets: isomorphic against the reference
    under the profile's policy, or the safety tier alone, making the calls ``contract`` allows
    (at the request level, over the group ``layouts``); each run's target goes back to its
    factory when the run ends (an ``exec:`` program then serves the next run)."""
    case: Case
    mode: Mode = "safety" if profile.safety else "isomorphic"
    if level == "request":
        tier: Tier = "safety" if profile.safety else "isomorphic"
        case = request_case(
            factory, tier=tier, policy=profile.policy, layouts=layouts, contract=contract
        )
    elif level == "defrag":
        case = defrag_case(
            factory, tier="safety" if profile.safety else "isomorphic", contract=contract
        )
    elif level == "manager":
        case = manager_lockstep_case(factory, mode=mode, policy=profile.policy, contract=contract)
    else:
        case = lockstep_case(factory, mode=mode, policy=profile.policy, contract=contract)
    case.release_target = staticmethod(close_target)
    case.rule_events = False  # Hypothesis's statistics, which a check does not show
    return case


def budget(steps: int, per_run: int = MAX_STEPS_PER_RUN) -> tuple[int, int]:
    """(runs, steps per run) so that about ``steps`` rule steps run (a step makes one call or
    more: a decode step appends to every sequence)."""
    per_run = max(5, min(per_run, steps))
    return max(1, math.ceil(steps / per_run)), per_run


@dataclass
class CheckResult:
    level: Level
    seed: int
    profile: Profile = PAGEDKV_PROFILE
    runs: int = 0
    calls: int = 0
    """Runs and calls made in all, shrinking included."""
    contract: Contract = "any"
    """Which calls the machine made (``specs/oracle.md`` §1)."""
    found_after: tuple[int, int] | None = None
    """(runs, calls) up to and including the first failing run: what finding the bug took."""
    failure: BaseException | None = None
    record: RunRecord | None = None
    message: str = ""
    trace: Trace | None = None
    trace_path: Path | None = None
    replayed: Verdict | None = None
    declined: dict[str, str] = field(default_factory=dict)
    """Configurations the target declined (``UnsupportedError`` from its factory), with why."""
    unchecked: dict[str, str] = field(default_factory=dict)
    """Optional operations the target offers that the search did not send, with why: the
    verdict does not vouch for them."""
    shrunk_from: int | None = None
    """Steps in Hypothesis's shrunk run, when deleting steps made it shorter."""
    notes: list[str] = field(default_factory=list)
    stepped: Stepping | None = None
    """With known differences: the runs that ended on each, and an example of each."""
    finding: Finding | None = None
    """What the failure is, as a ``--known`` file names it (None for a hang, or for pagedkv's
    own error: never a known difference)."""
    layouts: tuple[str, ...] = LAYOUTS
    """At the request level, the group layouts the runs drew from."""
    seeds: tuple[int, ...] = ()
    """Every seed the verdict covers where workers checked several (``workers.py``); empty:
    ``seed`` alone."""

    @property
    def all_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.seed,)

    @property
    def passed(self) -> bool:
        return self.failure is None

    @property
    def hung(self) -> bool:
        return isinstance(self.failure, TargetStopped)


@watched
def run_check(
    factory: Callable[[Any], Any],
    level: Level = "manager",
    *,
    steps: int | None = None,
    seed: int | None = None,
    trace_out: str | Path | None = DEFAULT_TRACE,
    progress: Progress | None = None,
    steps_per_run: int = MAX_STEPS_PER_RUN,
    adapt_case: Callable[[Any], Any] | None = None,
    profile: Profile = PAGEDKV_PROFILE,
    timeout: float | None = None,
    known: KnownDifferences | None = None,
    contract: Contract = "any",
    layouts: Sequence[GroupKind] = LAYOUTS,
    shared: SharedFailures | None = None,
) -> CheckResult:
    """Check ``factory``'s targets against the reference under ``profile`` (isomorphic mode), or
    against the safety tier alone, each call within ``timeout`` seconds (None: the
    environment's); at the request level over the group ``layouts``. On a failure, the shrunk
    run is minimized, written as a trace to ``trace_out`` (unless None; checked before the
    search) and replayed. ``adapt_case`` may
    derive the machine used from the standard one (the real peers narrow what they draw). A
    run that ends on one of the ``known`` differences is counted, not failed (``known.py``).
    With a ``shared`` database, the failures stored there for this check are replayed first
    (on top of the budget) and a failure found is stored (``shared_failures.py``)."""
    profile.check_level(level)
    steps = default_steps(level) if steps is None else steps
    if trace_out is not None:
        trace_out = trace.check_writable(trace_out)  # absolute: a target may chdir
    seed = random.randrange(2**32) if seed is None else seed
    result = CheckResult(level, seed, profile, contract=contract, layouts=tuple(layouts))
    factory = guard(factory, timeout)
    case = machine_case(factory, level, profile, contract, layouts)
    if adapt_case is not None:
        case = adapt_case(case)
    stepping = result.stepped = None if known is None else Stepping(known)
    if stepping is not None:
        case = stepping.wrap(case)
    runs, per_run = budget(steps, steps_per_run)
    search = Search(runs, AFTER_FAILURE_SECONDS, stepping, progress)
    stored = None
    if shared is not None:
        key = scope(shared.target, level, profile, contract, layouts, known, per_run)
        stored = shared.scoped(key)
        search.choices = run_choices

    def declined(config: Any, why: str) -> None:
        result.declined.setdefault(show_config(config), why)

    def unchecked(operation: str, why: str) -> None:
        result.unchecked.setdefault(operation, why)

    case.on_run_end = staticmethod(leaving_when(search.go_on))
    case.on_declined = staticmethod(declined)
    case.on_unchecked = staticmethod(unchecked)
    with shrinking_for(SHRINK_SECONDS), fewer_collections():
        if stored is not None:
            _replay_stored(case, stored, seed, per_run, search, result)
        for epoch in itertools.count() if result.failure is None else ():
            phases = epoch_phases(epoch)
            if not _search(
                case, epoch_seed(seed, epoch), _settings(per_run, phases), search, result
            ):
                break  # the budget is spent, a failure was found, or the target declined all
    result.runs, result.calls, result.found_after = search.runs, search.calls, search.found_after
    if stored is not None and shared is not None:
        result.notes += _share(stored, shared.where, search, result)
    _conclude(result, factory, trace_out)
    return result


def _search(case: Case, seed: int, chosen: settings, search: Search, result: CheckResult) -> bool:
    """One Hypothesis search of the check; whether the check makes another."""
    made = search.runs
    try:
        left = run_search(case, seed=seed, settings=chosen)
    except Unsatisfiable:
        left = False  # every example of the search was rejected
    except unittest.SkipTest:
        left = False  # a replay with nothing stored: no run was made
    except (Exception, TargetStopped) as failure:  # a hang stops the search at once
        result.failure, result.record = failure, case.last_run
        return False
    if search.cut:
        assert search.shortest is not None and search.shortest.error is not None
        result.failure, result.record = search.shortest.error, search.shortest
    return not left and search.runs > made


def _replay_stored(
    case: Case,
    stored: ScopedDatabase,
    seed: int,
    per_run: int,
    search: Search,
    result: CheckResult,
) -> None:
    """Replay the failures stored for this check, smallest first (Hypothesis's reuse phase),
    on top of the budget; one that fails is shrunk and is the check's failure."""
    search.replaying = True
    _search(case, seed, _settings(per_run, [Phase.reuse, Phase.shrink], stored), search, result)
    search.end_replay()
    if result.failure is not None:
        result.notes.append("note: found by replaying a failure stored in the database")


def _share(stored: ScopedDatabase, where: str, search: Search, result: CheckResult) -> list[str]:
    """Store the smallest failing run where other checks replay it first; what to say of it."""
    if result.failure is None or search.failing_choices is None:
        return []
    try:
        kept = stored.store_failure(search.failing_choices)
    except Exception as error:  # the verdict stands whatever happens to the database
        return [f"note: the failure was not stored in {where}: {failure_message(error)}"]
    if not kept:
        return [f"note: the failure was not stored in {where} (Hypothesis read no key there)"]
    return [f"note: stored in {where}: every check of this target replays it first"]


def _settings(
    per_run: int, phases: Sequence[Phase], database: ExampleDatabase | None = None
) -> settings:
    """The settings of one of a check's searches: ``EPOCH_RUNS`` runs of ``per_run`` steps,
    quiet; no database (a check's runs come from its seed alone) but in the replay of stored
    failures."""
    return settings(
        max_examples=EPOCH_RUNS,
        stateful_step_count=per_run,
        phases=phases,
        deadline=None,
        database=database,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )


def _conclude(result: CheckResult, factory: Any, trace_out: str | Path | None) -> None:
    """The verdict on the searched runs: nothing covered, all known, passed, or a failure made
    into a minimized trace."""
    stepping = result.stepped
    if result.failure is None and result.runs == 0:
        result.failure = NothingCovered("the target declined every configuration the check drew")
    elif result.failure is None and stepping is not None and stepping.total == result.runs:
        result.failure = AllKnown(
            f"every one of the {result.runs} runs ended on a known difference"
        )
    elif result.failure is None and result.calls == 0:
        result.failure = NothingCovered(
            f"{counted(result.runs, 'run')} made no call into the target (a larger --steps"
            " makes more)"
        )
    if stepping is not None and trace_out is not None and not result.hung:
        result.notes += stepping.write_examples(factory, trace_out)
    if result.failure is None or isinstance(result.failure, NothingCovered):
        result.message = failure_message(result.failure) if result.failure else ""
        return
    result.message = failure_message(result.failure)
    if result.record is not None:
        result.finding = finding_of(result.failure, result.record)
    if result.record is not None and result.record.config is not None:
        try:
            result.trace = trace.trace_of_run(result.record)
        except (trace.TraceError, codec.CodecError) as error:
            result.message += f" (no trace: {error})"
    if result.trace is not None:
        _finish(result, factory, trace_out)


def _effort(result: CheckResult) -> str:
    """What finding the failure took, and what shrinking it took on top."""
    if result.found_after is None:
        return f"{counted(result.runs, 'run')}, {counted(result.calls, 'call')}"
    runs, calls = result.found_after
    more = result.runs - runs
    shrinking = f"; shrinking: {counted(more, 'run')} more" if more > 0 else ""
    return f"found after {counted(calls, 'call')} in {counted(runs, 'run')}{shrinking}"


def counted(number: int, noun: str) -> str:
    """``1 call``, ``2 calls``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _declined_lines(declined: dict[str, str]) -> list[str]:
    """One line per reason a target gave for declining configurations: how many, one example."""
    by_reason: dict[str, list[str]] = {}
    for config, why in sorted(declined.items()):
        by_reason.setdefault(why, []).append(config)
    return [
        f"not covered: {len(configs)} configuration{'' if len(configs) == 1 else 's'} the target"
        f" declines ({why}), e.g. {configs[0]}"
        for why, configs in by_reason.items()
    ]


class NothingCovered(Exception):
    """Nothing was checked: the target declined every configuration, or no run made a call."""


class AllKnown(NothingCovered):
    """Every run ended on a known difference: nothing past them was checked."""


class WorkerLost(Exception):
    """A worker's process ended before its verdict (``workers.py``): never a pass."""


def _finish(result: CheckResult, factory: Any, trace_out: str | Path | None) -> None:
    """Minimize the failing trace, write it, replay it (what a hung target allows of these)."""
    assert result.trace is not None
    callable_again = not result.hung or getattr(factory, "retries_after_hang", False)
    if callable_again:
        same = None if result.stepped is None else result.stepped.unknown
        minimized = minimize(result.trace, factory, same=same)
        if minimized is not None and len(minimized.trace.ops) < minimized.before:
            result.shrunk_from = minimized.before
            result.trace = minimized.trace
            result.record = record_of(minimized.trace, factory)
            result.message = minimized.verdict.message
        if minimized is not None and not minimized.complete:
            result.notes.append(
                f"note: deleting steps stopped after {minimized.replays} replays; the trace may"
                " not be 1-minimal"
            )
    else:
        result.notes.append(
            "note: not shrunk or replayed: the target hung, and an in-process target is not"
            " called again after a hang (it may have been left anywhere in that call)"
        )
    if result.finding is not None:
        result.trace.divergence = (result.finding.operation, kinds_of(result.finding))
    if trace_out is not None:
        try:
            result.trace_path = trace.write(result.trace, trace_out)
        except trace.TraceError as error:
            result.notes.append(f"note: the trace was not written: {error}")
    if not result.hung:
        result.replayed = trace.replay(result.trace, factory)


def record_of(minimal: Trace, factory: Any) -> RunRecord:
    """The run a minimized trace stands for: its calls, the last one failing. A safety trace
    holds no expectations: the outcomes shown are the target's, from one more replay."""
    outcomes: list[Any] = []
    if minimal.safety:
        outcomes = _target_outcomes(minimal, factory)
    for op in minimal.ops[:-1] if not minimal.safety else ():
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
        policy=minimal.policy,
        safety=minimal.safety,
    )


def _target_outcomes(minimal: Trace, factory: Any) -> list[Any]:
    steps: list[Any] = []

    def watch(_: int, session: Any, __: BaseException | None) -> None:
        steps[:] = getattr(session, "steps", [])

    trace.replay_target(minimal, factory, watch)
    return [step.outcome for step in steps]


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
    known: list[str] = field(default_factory=list)
    """The known differences stepped past, one line per class."""

    def plain(self) -> str:
        lines = [self.title, self.verdict, *self.known]
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


KNOWN_HOW = "pass --known FILE"
"""How the command line is given a file of known differences (``check_report``'s default)."""


def check_report(
    result: CheckResult, target: str, replay_hint: str | None = None, known_how: str = KNOWN_HOW
) -> Report:
    """The verdict on ``result``; a divergence's kind comes with the entry that steps past it
    and how to pass it (``known_how``: the command line's option by default, the pytest
    plugin's argument there)."""
    mode = "safety tier" if result.profile.safety else "isomorphic mode"
    contract = ", scheduler contract" if result.contract == "scheduler" else ""
    groups = f", groups {','.join(result.layouts)}" if result.level == "request" else ""
    where = (
        f"{result.level} level{groups}, {mode}, profile {result.profile.describe()}{contract},"
        f" {_seeds_text(result.all_seeds)}"
    )
    title = f"pagedkv check {target} ({where})"
    declined = _declined_lines(result.declined) + [
        f"not sent: {name}, which the target offers ({why}); the verdict says nothing of it"
        for name, why in sorted(result.unchecked.items())
    ]
    known = [] if result.stepped is None else result.stepped.lines()
    if result.passed:
        verdict = _pass_verdict(result)
        if result.declined:
            verdict += f" (and {len(result.declined)} configurations it declines)"
        return Report(True, title, verdict, notes=declined, known=known)
    record = result.record
    report = Report(False, title, "", notes=list(declined), known=known)
    if isinstance(result.failure, WorkerLost):
        report.verdict = f"FAIL: {result.failure}"
        report.notes += result.notes
        return report
    if isinstance(result.failure, AllKnown):
        report.verdict = f"FAIL: {result.failure}: nothing past them was checked"
        return report
    if isinstance(result.failure, NothingCovered):
        report.verdict = f"FAIL: {result.failure}: nothing was checked"
        return report
    if record is None or record.config is None:
        report.verdict = "FAIL before the first run was set up"
        report.detail = result.message
        return report
    if record.checking_config is not None and result.hung:  # slow to start is no disagreement
        report.verdict = (
            "FAIL: the target does not answer in time (hangs) while it is created for a"
            f" configuration check ({_effort(result)})"
        )
        report.config = show_config(record.checking_config)
    elif record.checking_config is not None:
        report.verdict = "FAIL: the target and the reference disagree about a configuration"
        report.config = show_config(record.checking_config)
    else:
        count = len(record.calls)
        steps = f"{count} step{'' if count == 1 else 's'}"
        if not count and result.hung:
            how = "does not answer in time (hangs) while it is created for this configuration"
        elif not count and isinstance(result.failure, Divergence):
            how = "diverges as soon as it is created for this configuration (read before any call)"
        elif not count:
            how = "fails while it is created for this configuration"
        elif result.hung:
            how = f"does not answer in time (hangs) at the last of {steps}"
        elif result.profile.safety:
            how = f"breaks the safety tier; shrunk to {steps}"
        else:
            how = f"diverges from the reference; shrunk to {steps}"
        deleted = f"; {result.shrunk_from} steps before deleting" if result.shrunk_from else ""
        report.verdict = f"FAIL: the target {how} ({_effort(result)}{deleted})"
        report.config = show_config(record.config)
        for number, (op, args) in enumerate(record.calls, 1):
            done = number <= len(record.outcomes)
            if done:
                outcome = show_outcome(record.outcomes[number - 1])
            elif result.profile.safety:
                outcome = "(the target's answer)"
            elif result.trace is not None and len(result.trace.ops) >= number:
                expect = result.trace.ops[number - 1].expect
                outcome = trace.show_expect(result.level, op, expect)
            else:
                outcome = "?"
            report.steps.append(StepLine(number, codec.show_call(op, args), outcome, not done))
    failed_at = len(record.calls) if record.failed_call else None
    where = f"at step {failed_at}, " if failed_at else ""
    label = "what breaks" if result.profile.safety else "expected vs did"
    report.detail = f"{label}: {where}{result.message}"
    report.notes += result.notes
    report.notes += _kind_lines(result, known_how)
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


def _seeds_text(seeds: tuple[int, ...]) -> str:
    """``seed 7``; ``seeds 7 to 10 (4 workers)``."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {seeds[0]} to {seeds[-1]} ({len(seeds)} workers)"


def _pass_verdict(result: CheckResult) -> str:
    """``PASS: ...; the target agrees with the reference``, only when no run ended on a known
    difference; else the verdict word itself says how many runs stepped past one, and nothing
    claims agreement: those runs ended where the target diverged (``specs/oracle.md`` §9)."""
    done = f"{counted(result.runs, 'run')}, {counted(result.calls, 'call')}"
    stepped = result.stepped
    if stepped is None or not stepped.total:
        agrees = (
            "holds to the safety tier" if result.profile.safety else "agrees with the reference"
        )
        return f"PASS: {done}; the target {agrees}"
    found = "break of the safety tier" if result.profile.safety else "divergence"
    past = f"{counted(stepped.total, 'run')} past known differences"
    return (
        f"PASS with {past}: {done}; every {found} found is of a class the file names"
        f" ({stepped.classes()})"
    )


def _kind_lines(result: CheckResult, known_how: str) -> list[str]:
    """What the divergence is, as a ``--known`` file names it, with the entry to copy there and
    how to pass the file."""
    if result.finding is None:
        why = "a hang" if result.hung else "no divergence of the target's"
        return [f"kind: none ({why} is never a known difference)"]
    kinds = ", ".join(kinds_of(result.finding))
    return [
        f"kind: {kinds} (at {result.finding.operation}); to step past it, put this in a file"
        f" and {known_how}:",
        *(f"  {line}" for line in entry_for(result.finding)),
    ]


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
