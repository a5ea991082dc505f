"""Replaying an operation stream on an implementation: checked once, then timed.

The garbage collector is frozen before every timed replay (``gc.freeze``: what exists then,
the recorded stream included, is left out of its passes), so a collection during a replay
traverses what the implementation built, not the benchmark's own hundreds of thousands of
recorded calls.

A timed replay calls each method with nothing in between, so it measures the implementation and
the loop alone, in this process's CPU time (single-threaded Python: the work done, without the
time other processes of a shared machine held the CPU). Per-operation times come from a separate
pass that reads the (wall) clock around every call, the cost of reading the clock and any
collector pause during the call subtracted (the collector's time is a row of its own); the pass
runs a few times and each operation keeps its median. Comparisons between
implementations are interleaved: each repetition times one after the other, so both see the same
machine, and the ratio of each repetition is kept (``Spread``).
"""

from __future__ import annotations

import gc
import operator
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pagedkv.model_tests.bench.report import Spread
from pagedkv.model_tests.bench.scheduler import Call, digest
from pagedkv.model_tests.lockstep.show import show_call
from pagedkv.model_tests.oracle.loop_deadline import LoopDeadline, Unwatched, calls_within
from pagedkv.model_tests.oracle.timeout import FOREVER
from pagedkv.specs.types import ManagerConfig

Factory = Callable[[ManagerConfig], Any]


class ReplayError(Exception):
    """The implementation did not answer as the recording did: it is not the same workload."""


def _bound(manager: Any, calls: Sequence[Call]) -> dict[str, Callable[..., Any]]:
    return {method: getattr(manager, method) for method in {m for m, _ in calls}}


class _Replay:
    """One replay's calls under the per-call timeout (``oracle/loop_deadline.py``): building the
    manager, then each call of the stream, costing nothing per call."""

    def __init__(self, calls: Sequence[Call], config: ManagerConfig) -> None:
        self.calls = calls
        self.config = config
        self.iterator: Iterator[Call] | None = None
        self.deadline: LoopDeadline | Unwatched = Unwatched()

    def stream(self) -> Iterator[Call]:
        """The calls, to iterate over once."""
        self.iterator = self.deadline.follow(self.calls)
        return self.iterator

    def under_way(self) -> str:
        if self.iterator is None:
            return f"creating it for {self.config}"
        method, args = self.calls[len(self.calls) - operator.length_hint(self.iterator) - 1]
        return show_call(method, args)


@contextmanager
def replaying(calls: Sequence[Call], config: ManagerConfig, timeout: float) -> Iterator[_Replay]:
    """The block's replay of ``calls``, each call (and the factory) within ``timeout``."""
    replay = _Replay(calls, config)
    with calls_within(timeout, replay.under_way) as deadline:
        replay.deadline = deadline
        yield replay


@dataclass(frozen=True)
class Difference:
    """One call answered otherwise than the recording (or raising where it answered)."""

    number: int
    method: str
    got: Any
    expected: Any

    def describe(self) -> str:
        return (
            f"call {self.number}, {self.method}: {self.got!r}, the recording has {self.expected!r}"
        )


@dataclass
class Agreement:
    """How an implementation answered a recorded stream: the manager after the replay, how many
    calls it answered otherwise (how many of them by raising), the first such call, and the
    count per operation."""

    manager: Any
    calls: int
    differ: int = 0
    raised: int = 0
    first: Difference | None = None
    per_operation: dict[str, int] = field(default_factory=dict)

    @property
    def as_recorded(self) -> bool:
        return self.differ == 0

    def describe(self) -> str:
        if self.first is None:
            return "as recorded"
        raised = f", {self.raised} of them raising" if self.raised else ""
        return f"{self.differ} differ{raised}; first: {self.first.describe()}"

    def as_json(self) -> dict[str, Any]:
        first = self.first
        return {
            "calls": self.calls,
            "differ": self.differ,
            "raised": self.raised,
            "first": None if first is None else {**first.__dict__, "text": first.describe()},
            "per_operation": self.per_operation,
        }


def compare(
    factory: Factory,
    config: ManagerConfig,
    calls: Sequence[Call],
    outcomes: Sequence[Any],
    timeout: float = FOREVER,
) -> Agreement:
    """Replay once, comparing every result with the recording and going on past a difference
    (an exception is an answer too: its class); the replay's calls are the recording's whatever
    the implementation answers, so it can be timed on them all the same."""
    with replaying(calls, config, timeout) as replay:
        agreement = Agreement(factory(config), len(calls))
        bound = _bound(agreement.manager, calls)
        answers = zip(replay.stream(), outcomes, strict=True)
        for number, ((method, args), expected) in enumerate(answers, 1):
            try:
                got = digest(bound[method](*args))
            except Exception as error:
                got = Raised(type(error).__name__, str(error))
            if got == expected:
                continue
            agreement.differ += 1
            agreement.raised += isinstance(got, Raised)
            agreement.per_operation[method] = agreement.per_operation.get(method, 0) + 1
            if agreement.first is None:
                agreement.first = Difference(number, method, got, expected)
    return agreement


@dataclass(frozen=True)
class Raised:
    """A call's answer that was an exception."""

    error: str
    message: str

    def __repr__(self) -> str:
        message = self.message if len(self.message) <= 100 else self.message[:99] + "…"
        return f"raised {self.error}({message!r})"


def check(
    factory: Factory,
    config: ManagerConfig,
    calls: Sequence[Call],
    outcomes: Sequence[Any],
    timeout: float = FOREVER,
) -> Any:
    """Replay once, comparing every result with the recording; returns the manager after it,
    or raises ``ReplayError`` naming the first call answered otherwise."""
    agreement = compare(factory, config, calls, outcomes, timeout)
    if agreement.first is not None:
        raise ReplayError(agreement.first.describe())
    return agreement.manager


@contextmanager
def stream_frozen() -> Iterator[None]:
    """Leave everything that exists now (the stream) out of the collector's passes."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def seconds(
    factory: Factory, config: ManagerConfig, calls: Sequence[Call], timeout: float = FOREVER
) -> float:
    """CPU seconds of one replay (building the manager is not timed)."""
    with replaying(calls, config, timeout) as replay:
        manager = factory(config)
        bound = _bound(manager, calls)
        with stream_frozen():
            start = time.process_time()
            for method, args in replay.stream():
                try:  # noqa: SIM105 (a with-statement per call would be timed)
                    bound[method](*args)
                except Exception:  # an answer too (``compare`` counts it); free when none
                    pass
            return time.process_time() - start


def interleaved(
    baseline: tuple[Factory, Sequence[Call]],
    other: tuple[Factory, Sequence[Call]],
    config: ManagerConfig,
    repetitions: int,
    timeout: float = FOREVER,
) -> tuple[Spread, Spread, Spread]:
    """(baseline seconds, other seconds, other / baseline) over ``repetitions`` rounds, the two
    taking turns (who goes first alternates)."""
    mine: list[float] = []
    theirs: list[float] = []
    for round_ in range(repetitions):
        order = [(baseline, mine), (other, theirs)]
        for (factory, calls), out in order if round_ % 2 == 0 else reversed(order):
            out.append(seconds(factory, config, calls, timeout))
    ratios = [t / m for t, m in zip(theirs, mine, strict=True)]
    return Spread.of(mine), Spread.of(theirs), Spread.of(ratios)


@dataclass(frozen=True)
class OpTime:
    """An operation's mean µs per call over a stream (with several passes: the median of the
    passes' means, and the smallest and largest of them)."""

    calls: int
    mean_us: float
    total_s: float
    passes: Spread | None = None
    """The passes' means (None: one pass)."""

    @property
    def spread(self) -> Spread:
        return self.passes or Spread(self.mean_us, self.mean_us, self.mean_us, 1)


def clock_overhead_ns(
    samples: int = 200_000, clock: Callable[[], int] = time.perf_counter_ns
) -> float:
    """What reading the clock twice costs, as the per-call pass reads it."""
    best = float("inf")
    for _ in range(5):
        total = 0
        for _ in range(samples // 5):
            start = clock()
            total += clock() - start
        best = min(best, total / (samples // 5))
    return best


def per_operation(
    factory: Factory,
    config: ManagerConfig,
    calls: Sequence[Call],
    overhead_ns: float,
    passes: int = 1,
    timeout: float = FOREVER,
) -> dict[str, OpTime]:
    """Mean µs of each operation over the stream, the clock's own cost subtracted; with several
    passes, each operation's median of them (a pass another process interrupted counts once)."""
    found = [_one_pass(factory, config, calls, overhead_ns, timeout) for _ in range(max(1, passes))]
    spreads = {method: Spread.of([one[method].mean_us for one in found]) for method in found[0]}
    return {
        method: OpTime(
            found[0][method].calls,
            spread.median,
            statistics.median(one[method].total_s for one in found),
            spread,
        )
        for method, spread in spreads.items()
    }


COLLECTOR = "(garbage collector)"
"""The per-operation timings' row for the collector's pauses: ``calls`` counts the collections,
``mean_us`` is their time per call of the stream."""


@contextmanager
def collector_clock(clock: Callable[[], int]) -> Iterator[list[int]]:
    """``[nanoseconds, collections]`` of the garbage collector's pauses while the block runs."""
    paused = [0, 0]
    started = [0]

    def on_collection(phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            started[0] = clock()
        else:
            paused[0] += clock() - started[0]
            paused[1] += 1

    gc.callbacks.append(on_collection)
    try:
        yield paused
    finally:
        gc.callbacks.remove(on_collection)


def _one_pass(
    factory: Factory,
    config: ManagerConfig,
    calls: Sequence[Call],
    overhead_ns: float,
    timeout: float,
) -> dict[str, OpTime]:
    """Each operation's time, without the collector's pauses: a collection runs when the
    allocations since the last one reach a threshold, so it lands on whichever call makes the
    allocation that crosses it, and on a large pool a full collection takes longer than many
    thousand calls. Its time is a row of its own (``COLLECTOR``)."""
    with replaying(calls, config, timeout) as replay:
        manager = factory(config)
        bound = _bound(manager, calls)
        return _timed_pass(bound, replay, overhead_ns, len(calls))


def _timed_pass(
    bound: dict[str, Callable[..., Any]], replay: _Replay, overhead_ns: float, count: int
) -> dict[str, OpTime]:
    steps = ((method, bound[method], args) for method, args in replay.stream())
    return timed_steps(steps, overhead_ns, count)


Named = tuple[str, Callable[..., Any], tuple[Any, ...]]
"""A step timed under a name: the operation it serves, the function, its arguments."""


def timed_steps(
    steps: Iterable[Named],
    overhead_ns: float,
    count: int,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> dict[str, OpTime]:
    """Each name's time over ``steps``, each step timed alone (``overhead_ns``: what reading
    ``clock`` twice costs), costliest first, then the collector's row for ``count`` calls."""
    totals: dict[str, int] = {}
    counts: dict[str, int] = {}
    with stream_frozen(), collector_clock(clock) as paused:
        for name, function, args in steps:
            before = paused[0]
            start = clock()
            try:  # noqa: SIM105 (a with-statement per call would be timed)
                function(*args)
            except Exception:  # timed as an answer, as in ``seconds``
                pass
            spent = clock() - start - (paused[0] - before)
            totals[name] = totals.get(name, 0) + spent
            counts[name] = counts.get(name, 0) + 1
    found = {
        name: OpTime(
            counts[name],
            max(0.0, totals[name] / counts[name] - overhead_ns) / 1000,
            totals[name] / 1e9,
        )
        for name in sorted(totals, key=lambda name: -totals[name])
    }
    found[COLLECTOR] = OpTime(paused[1], paused[0] / max(1, count) / 1000, paused[0] / 1e9)
    return found


def peak_memory(
    factory: Factory, config: ManagerConfig, calls: Sequence[Call], timeout: float = FOREVER
) -> int:
    """Bytes of the largest Python heap the implementation built during one replay."""
    tracemalloc.start()
    try:
        with replaying(calls, config, timeout) as replay:
            manager = factory(config)
            bound = _bound(manager, calls)
            for method, args in replay.stream():
                try:  # noqa: SIM105 (a with-statement per call would be timed)
                    bound[method](*args)
                except Exception:  # as in ``seconds``
                    pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
