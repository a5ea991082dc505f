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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.bench.scheduler import Call, digest
from pagedkv.model_tests.lockstep.show import show_call
from pagedkv.model_tests.oracle.loop_deadline import LoopDeadline, Unwatched, calls_within
from pagedkv.model_tests.oracle.timeout import FOREVER
from pagedkv.specs.types import ManagerConfig

Factory = Callable[[ManagerConfig], Any]


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements, with the smallest and largest."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def as_json(self) -> dict[str, float]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.count}


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


def check(
    factory: Factory,
    config: ManagerConfig,
    calls: Sequence[Call],
    outcomes: Sequence[Any],
    timeout: float = FOREVER,
) -> Any:
    """Replay once, comparing every result with the recording; returns the manager after it."""
    with replaying(calls, config, timeout) as replay:
        manager = factory(config)
        bound = _bound(manager, calls)
        answers = zip(replay.stream(), outcomes, strict=True)
        for number, ((method, args), expected) in enumerate(answers, 1):
            try:
                got = digest(bound[method](*args))
            except Exception as error:
                raise ReplayError(f"call {number}, {method}: raised {error!r}") from None
            if got != expected:
                raise ReplayError(
                    f"call {number}, {method}: {got!r}, the recording has {expected!r}"
                )
    return manager


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
                bound[method](*args)
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
    calls: int
    mean_us: float
    total_s: float


def clock_overhead_ns(samples: int = 200_000) -> float:
    """What reading the clock twice costs, as the per-call pass reads it."""
    clock = time.perf_counter_ns
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
    return {
        method: OpTime(
            found[0][method].calls,
            statistics.median(one[method].mean_us for one in found),
            statistics.median(one[method].total_s for one in found),
        )
        for method in found[0]
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
    clock = time.perf_counter_ns
    totals: dict[str, int] = dict.fromkeys(bound, 0)
    counts: dict[str, int] = dict.fromkeys(bound, 0)
    with stream_frozen(), collector_clock(clock) as paused:
        for method, args in replay.stream():
            fn = bound[method]
            before = paused[0]
            start = clock()
            fn(*args)
            totals[method] += clock() - start - (paused[0] - before)
            counts[method] += 1
    found = {
        method: OpTime(
            counts[method],
            max(0.0, totals[method] / counts[method] - overhead_ns) / 1000,
            totals[method] / 1e9,
        )
        for method in sorted(bound, key=lambda m: -totals[m])
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
                bound[method](*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
