"""``pagedkv check --workers N``: the checks of N seeds at once, one process each, one verdict.

The rule: worker ``i`` checks seed ``S + i`` (``S`` the check's seed) with the whole budget, so
worker 0 makes exactly the runs of ``pagedkv check --seed S``, and N workers never find less
than one; where N cores are free, they take the time of one check. (Splitting one budget among
them instead would make runs that no single check makes, and lose the budget's guarantee over
the corpus: ``specs/corpus.md``.)

The verdict is a FAIL if any worker fails, and a worker that ends without a verdict (a target
that crashed its process) is a FAIL too, never a pass. Every worker runs to its own verdict (a
check stops at its first failure anyway), so the same seeds give the same verdict whatever the
machine's speed; the failure reported is the smallest (fewest steps, then the lowest seed),
with its trace at ``--trace-out``; the other workers' traces stay beside it
(``x.seed-S.jsonl``), named in the notes. A passing verdict counts every worker's runs and
calls; a failing one counts the reported worker's, and says what all of them made.

Each worker is a fresh interpreter (the ``spawn`` start method): never a fork of a process that
may hold threads (torch's, a target's). With ``--database``, each replays what is stored for the
check when it starts and stores what it finds (``shared_failures.py``).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from pathlib import Path
from types import FrameType
from typing import Any

from pagedkv.model_tests.machines.manager_machine import Contract
from pagedkv.model_tests.machines.profiles import pin_generation
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import reaper, targets
from pagedkv.model_tests.oracle.check import (
    CheckResult,
    WorkerLost,
    counted,
    failure_message,
    run_check,
)
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.known import KnownDifferences
from pagedkv.model_tests.oracle.search import Progress
from pagedkv.model_tests.oracle.shared_failures import open_database
from pagedkv.model_tests.oracle.stepping import Stepping
from pagedkv.specs.policy import Profile

SEEDS = 2**32
PROGRESS_EVERY = 0.25
"""Seconds between two progress messages of one worker."""
POLL = 0.2
"""Seconds between two looks at the workers while no message comes."""
STOP_WAIT = 5.0
"""Seconds a worker has to end once asked to (then it is killed)."""


class WorkerError(Exception):
    """A worker raised what a check in this process would have raised: one line, exit 2."""


@dataclass(frozen=True)
class Job:
    """What every worker checks: all of a check but its seed."""

    target: str
    level: Level
    profile: Profile
    steps: int
    trace_out: Path | None
    timeout: float | None
    known: KnownDifferences | None
    contract: Contract
    layouts: tuple[GroupKind, ...]
    database: str | None


def seeds_of(seed: int, workers: int) -> tuple[int, ...]:
    """The workers' seeds: ``seed``, ``seed + 1``, ... (modulo 2**32)."""
    return tuple((seed + index) % SEEDS for index in range(workers))


def worker_trace(trace_out: Path, seed: int) -> Path:
    """Where the worker of ``seed`` writes its trace: ``x.jsonl`` -> ``x.seed-7.jsonl``."""
    return trace_out.with_name(f"{trace_out.stem}.seed-{seed}{trace_out.suffix or '.jsonl'}")


@dataclass
class WorkerOutcome:
    """What one worker gave back: its check's result, or why there is none."""

    seed: int
    result: CheckResult | None = None
    lost: str = ""
    """Why the worker gave no result (it ended before its verdict)."""


def check_in_workers(job: Job, seeds: Sequence[int], progress: Progress | None) -> CheckResult:
    """Check ``job`` with each of ``seeds`` in a process of its own; one verdict over all."""
    return combine(job, run_workers(job, seeds, progress))


def run_workers(job: Job, seeds: Sequence[int], progress: Progress | None) -> list[WorkerOutcome]:
    """Each seed's check of ``job`` in a process of its own, all at once; ``progress`` hears
    the sum of their runs and calls."""
    context = multiprocessing.get_context("spawn")
    messages: Queue[tuple[Any, ...]] = context.Queue()
    processes = [
        context.Process(
            target=_work,
            args=(job, index, seed, messages, os.getpid()),
            name=f"pagedkv-check-seed-{seed}",
            daemon=True,
        )
        for index, seed in enumerate(seeds)
    ]
    try:
        for process in processes:
            process.start()
        return _collect(processes, seeds, messages, progress)
    finally:
        _stop(processes)


def _collect(
    processes: Sequence[BaseProcess],
    seeds: Sequence[int],
    messages: Queue[tuple[Any, ...]],
    progress: Progress | None,
) -> list[WorkerOutcome]:
    """Each worker's outcome, telling ``progress`` the sum of their runs and calls meanwhile."""
    outcomes = [WorkerOutcome(seed) for seed in seeds]
    finished: set[int] = set()
    tallies = [(0, 0, False)] * len(processes)
    quiet_since_end = [0] * len(processes)
    while len(finished) < len(processes):
        try:
            message = messages.get(timeout=POLL)
        except queue.Empty:
            for index, process in enumerate(processes):
                if index in finished or process.is_alive():
                    continue
                quiet_since_end[index] += 1  # its last message may still be on its way
                if quiet_since_end[index] >= 2:
                    outcomes[index].lost = _ended(process.exitcode)
                    finished.add(index)
            continue
        kind, index = message[0], message[1]
        if kind == "progress":
            tallies[index] = message[2:]
            if progress is not None:
                progress(
                    sum(t[0] for t in tallies),
                    sum(t[1] for t in tallies),
                    any(t[2] for t in tallies),
                )
        elif kind == "done":
            outcomes[index].result = pickle.loads(message[2])
            finished.add(index)
        else:  # "error": what this process would have said in one line
            raise WorkerError(f"the worker of seed {seeds[index]}: {message[2]}")
    return outcomes


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _stop(processes: Sequence[BaseProcess]) -> None:
    """Every worker ended: asked (SIGTERM: it kills its ``exec:`` programs), then killed, at
    once if a second Ctrl-C cuts the wait short."""
    try:
        for process in processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + STOP_WAIT
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()


def _work(job: Job, index: int, seed: int, messages: Queue[tuple[Any, ...]], parent: int) -> None:
    """One worker: the check of ``seed``, its result sent back pickled."""
    reaper.end_with_parent(parent)
    signal.signal(signal.SIGINT, _left_to_the_parent)  # Ctrl-C is the parent's: it stops us
    signal.signal(signal.SIGTERM, _leave)  # exit handlers run: they kill exec: programs
    pin_generation()  # as the command line does: the same seed draws the same runs
    last = 0.0

    def tell(runs: int, calls: int, failing: bool) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            last = now
            messages.put(("progress", index, runs, calls, failing))

    try:
        factory = targets.check(job.target, job.level, job.timeout, policy=job.profile.policy)
        shared = None if job.database is None else open_database(job.database, job.target)
        result = run_check(
            factory,
            job.level,
            steps=job.steps,
            seed=seed,
            trace_out=None if job.trace_out is None else worker_trace(job.trace_out, seed),
            progress=tell,
            profile=job.profile,
            timeout=job.timeout,
            known=job.known,
            contract=job.contract,
            layouts=job.layouts,
            shared=shared,
        )
        messages.put(("progress", index, result.runs, result.calls, not result.passed))
        messages.put(("done", index, _portable(result)))
    except SystemExit:
        raise  # the parent is stopping it (SIGTERM)
    except BaseException as error:
        messages.put(("error", index, failure_message(error)))


def _leave(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def _left_to_the_parent(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C reaches the whole process group; the parent answers it for every worker. (A
    handler, not ``SIG_IGN``, which ``exec:`` programs would inherit.)"""


def _portable(result: CheckResult) -> bytes:
    """``result`` pickled, so that it unpickles in the parent: a target's exception that does
    not (one whose constructor takes other arguments) is replaced by its message."""
    data = pickle.dumps(result)
    try:
        pickle.loads(data)
    except Exception:
        result.failure = Exception(result.message)
        if result.record is not None:
            result.record = dataclasses.replace(result.record, error=None)
        if result.stepped is not None:
            result.stepped = dataclasses.replace(result.stepped, examples={}, _failure=None)
        data = pickle.dumps(result)
    return data


# --- one verdict ------------------------------------------------------------------------------


def combine(job: Job, outcomes: Sequence[WorkerOutcome]) -> CheckResult:
    """The verdict over every worker: the smallest failure, else a lost worker, else a pass
    that counts them all."""
    seeds = tuple(outcome.seed for outcome in outcomes)
    results = [outcome.result for outcome in outcomes if outcome.result is not None]
    lost = [
        f"note: the worker of seed {outcome.seed} ended before its verdict ({outcome.lost})"
        for outcome in outcomes
        if outcome.result is None
    ]
    failing = [result for result in results if not result.passed]
    if failing:
        chosen = min(failing, key=_smallest)
        chosen.notes += [
            *lost,
            *(_also_fails(result) for result in failing if result is not chosen),
            f"note: {counted(len(outcomes), 'worker')} made"
            f" {counted(sum(r.runs for r in results), 'run')},"
            f" {counted(sum(r.calls for r in results), 'call')} in all",
        ]
        _move_trace(chosen, job.trace_out)
    elif lost:
        chosen = CheckResult(job.level, seeds[0], job.profile, contract=job.contract)
        chosen.layouts = job.layouts
        chosen.failure = WorkerLost(lost[0].removeprefix("note: "))
        chosen.message = str(chosen.failure)
        chosen.notes += lost[1:]
        chosen.runs = sum(result.runs for result in results)
        chosen.calls = sum(result.calls for result in results)
    else:
        chosen = results[0]
        chosen.runs = sum(result.runs for result in results)
        chosen.calls = sum(result.calls for result in results)
        chosen.stepped = _stepped_in_all([r.stepped for r in results if r.stepped is not None])
        for result in results[1:]:
            for config, why in result.declined.items():
                chosen.declined.setdefault(config, why)
            chosen.notes += [note for note in result.notes if note not in chosen.notes]
    chosen.seeds = seeds
    return chosen


def _smallest(result: CheckResult) -> tuple[bool, int, int]:
    """A failure with a run to show first, then the fewest steps, then the lowest seed."""
    steps = len(result.record.calls) if result.record is not None else 0
    return result.record is None or result.trace is None, steps, result.seed


def _also_fails(result: CheckResult) -> str:
    steps = "" if result.record is None else f" ({counted(len(result.record.calls), 'step')})"
    where = "" if result.trace_path is None else f": trace {result.trace_path}"
    return f"note: seed {result.seed} fails too{steps}{where}"


def _move_trace(result: CheckResult, trace_out: Path | None) -> None:
    """The reported failure's trace at ``--trace-out``, where a check of one seed writes it."""
    if result.trace_path is None or trace_out is None:
        return
    try:
        os.replace(result.trace_path, trace_out)
    except OSError as error:
        result.notes.append(f"note: the trace stays at {result.trace_path}: {error.strerror}")
        return
    result.trace_path = trace_out


def _stepped_in_all(parts: Sequence[Stepping]) -> Stepping | None:
    """The known differences every worker stepped past: runs summed per class, one example."""
    if not parts:
        return None
    merged = Stepping(parts[0].known)
    for part in parts:
        for name, runs in part.runs.items():
            merged.runs[name] = merged.runs.get(name, 0) + runs
            merged.messages.setdefault(name, part.messages.get(name, ""))
            if name in part.traces:
                merged.traces.setdefault(name, part.traces[name])
    return merged
