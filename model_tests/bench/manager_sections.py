"""The manager level against an engine driven natively, in ``pagedkv bench``: a profile's
manager-level stream (``streams.py``) replayed through pagedkv's optimized manager and through
another engine's own block manager, driven as its scheduler drives it (vLLM 0.6.3's
``SelfAttnBlockSpaceManager``: ``model_tests/peers/vllm_v0_replay.py``), interleaved, end to end
and per operation.

The end-to-end table's ``--target`` row of an adapter (``vllm_v0_manager.py``) times the engine
as the oracle sees it, argument checks, id lookups and copies included; this section times what
the engine itself does for the same calls. Each side builds its manager and its steps before the
clock starts (a fresh one every repetition), then runs every step once on this process's CPU
clock, keeping each answer (both sides alike). The optimized manager answers the stream with
pagedkv's policy: where the policies differ, its answers differ (counted, as the engine's are),
while both sides still replay the same calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pagedkv.model_tests.bench import replay, streams
from pagedkv.model_tests.bench.replay import stream_frozen
from pagedkv.model_tests.bench.report import Section, Spread, Table, load_average
from pagedkv.model_tests.bench.scheduler import Call, digest
from pagedkv.model_tests.bench.sections import Context, workload_spec
from pagedkv.model_tests.bench.workload import Workload
from pagedkv.model_tests.oracle import targets
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import ManagerConfig

Step = tuple[Callable[..., Any], tuple[Any, ...]]


class Steps(Protocol):
    """A replay made ready: what runs on the clock, each step's name (the stream's operation it
    answers, or an engine step of its own), and which step answers each call of the stream."""

    steps: list[Step]
    names: list[str]
    answered: list[int]


class ManagerSide(Protocol):
    """A manager the stream is replayed through."""

    name: str
    profile: str
    """The policy whose stream it replays."""

    def prepare(self, config: ManagerConfig, calls: Sequence[Call]) -> Steps:
        """A fresh manager and all a replay needs, built before the clock starts."""
        ...

    def answer(self, name: str, answer: Any) -> Any:
        """The answer to call ``name`` as pagedkv's protocol shapes it."""
        ...

    @property
    def charged(self) -> dict[str, str]:
        """Each engine step's name, and the operation whose work it is (the prompt the engine
        takes in when a request arrives is what pagedkv's ``can_allocate`` checks)."""
        ...


class _Bound:
    def __init__(self, config: ManagerConfig, calls: Sequence[Call]) -> None:
        manager = OptimizedBlockSpaceManager(config)
        bound = {method: getattr(manager, method) for method in {m for m, _ in calls}}
        self.steps: list[Step] = [(bound[method], args) for method, args in calls]
        self.names = [method for method, _ in calls]
        self.answered = list(range(len(calls)))


class PagedkvSide:
    """pagedkv's optimized manager, each call of the stream through its public method."""

    name = "pagedkv optimized"
    profile = streams.PAGEDKV

    def prepare(self, config: ManagerConfig, calls: Sequence[Call]) -> Steps:
        return _Bound(config, calls)

    def answer(self, name: str, answer: Any) -> Any:
        return answer

    @property
    def charged(self) -> dict[str, str]:
        return {}


def run(steps: Sequence[Step]) -> list[Any]:
    """Every step once, each answer kept (an exception is an answer too)."""
    results: list[Any] = []
    keep = results.append
    for function, args in steps:
        try:
            keep(function(*args))
        except Exception as error:  # an answer too (free when nothing is raised)
            keep(error)
    return results


def _seconds(side: ManagerSide, config: ManagerConfig, calls: Sequence[Call]) -> float:
    steps = side.prepare(config, calls).steps
    with stream_frozen():
        start = time.process_time()
        run(steps)
        return time.process_time() - start


def answers(side: ManagerSide, config: ManagerConfig, calls: Sequence[Call]) -> list[Any]:
    """Each call's answer as pagedkv's protocol shapes it, taken when it is given (an engine
    may hand out a block table it changes later)."""
    prepared = side.prepare(config, calls)
    names = prepared.names
    found: list[Any] = []
    for index, (function, args) in enumerate(prepared.steps):
        try:
            found.append(side.answer(names[index], function(*args)))
        except Exception as error:  # an answer too
            found.append(replay.Raised(type(error).__name__, str(error)))
    return [found[index] for index in prepared.answered]


CLOCK = time.thread_time_ns
"""Each step's CPU time: on a shared machine a wall clock would charge a step with the time
another process held the CPU, and a step lasts microseconds (reading this clock costs some
hundreds of nanoseconds, measured and subtracted)."""


def per_step(
    side: ManagerSide, config: ManagerConfig, calls: Sequence[Call], overhead: float
) -> dict[str, replay.OpTime]:
    """Each name's steps over one replay: mean µs (the clock's cost and the collector's pauses
    subtracted) and seconds in all."""
    prepared = side.prepare(config, calls)
    named = zip(prepared.names, *zip(*prepared.steps, strict=True), strict=True)
    found = replay.timed_steps(named, overhead, len(prepared.steps), CLOCK)
    del found[replay.COLLECTOR]  # not an operation
    return found


def _differing(side: ManagerSide, stream: Workload) -> list[int]:
    """The numbers (from 1) of the calls answered otherwise than the stream's recording."""
    got = answers(side, stream.config, stream.calls)
    return [
        number
        for number, (mine, expected) in enumerate(zip(got, stream.outcomes, strict=True), 1)
        if digest(mine) != expected
    ]


def native_section(context: Context) -> Section:
    options = context.options
    section = Section("native")
    for spec in options.native_sides:
        try:
            make: Any = targets.load(spec, "manager")
            side: ManagerSide = make()
            side.prepare(workload_spec(options).config, [])  # its engine's files, before a stream
            stream = context.streams.get(side.profile)
            recorded = stream is None
            if stream is None:
                stream = streams.record(workload_spec(options), side.profile)[0]
                context.streams[side.profile] = stream
            found = _compare(context, side, stream)
        except Exception as error:  # its engine's files missing, or it cannot replay
            section.tables.append(
                Table("manager level, natively", ["not timed"], [[f"{spec}: {error}"]])
            )
            continue
        tables, data = found
        if recorded:
            tables[0].notes.append(f"the {side.profile} stream was recorded for this section")
        section.tables.extend(tables)
        section.data[side.name] = data
    context.facts["native"] = section.data
    return section


def _compare(
    context: Context, side: ManagerSide, stream: Workload
) -> tuple[list[Table], dict[str, Any]]:
    options = context.options
    pagedkv = PagedkvSide()
    config, calls = stream.config, stream.calls
    sides: list[ManagerSide] = [pagedkv, side]
    differ = {s.name: _differing(s, stream) for s in sides}
    seconds: dict[str, list[float]] = {s.name: [] for s in sides}
    for round_ in range(options.repetitions):
        for one in sides if round_ % 2 == 0 else reversed(sides):
            seconds[one.name].append(_seconds(one, config, calls))
    load = load_average()
    whole = Table(
        f"manager level, {side.name} driven as its engine drives it, against pagedkv's optimized"
        f" manager: the {side.profile} stream ({len(calls)} calls); median [min, max] of"
        f" {options.repetitions} interleaved repetition(s)",
        ["manager", "calls", "CPU s", "µs/call", f"× {pagedkv.name}", "answers", "load"],
    )
    data: dict[str, Any] = {"calls": len(calls), "profile": side.profile, "managers": {}}
    base = seconds[pagedkv.name]
    for one in sides:
        mine = seconds[one.name]
        ratio = Spread.of([t / b for t, b in zip(mine, base, strict=True)])
        spread = Spread.of(mine)
        numbers = differ[one.name]
        shown = "as recorded"
        if numbers:
            shown = f"{len(numbers)} differ; first: call {numbers[0]}, {calls[numbers[0] - 1][0]}"
        whole.rows.append(
            [one.name, len(calls), spread, spread.scaled(1e6 / len(calls)), ratio, shown, load]
        )
        data["managers"][one.name] = {
            "seconds": spread.as_json(),
            "ratio_to_pagedkv": ratio.as_json(),
            "answers_differ": len(numbers),
        }
    whole.notes.append(
        f"{side.name}'s steps: each request's SequenceGroup made when it arrives, its sampled"
        " tokens appended to its Sequence, then the block manager's calls with vLLM's own"
        " objects (no argument checks, no id lookups, no copies); the end-to-end table's"
        " adapter target times the same engine as the oracle sees it"
    )
    whole.notes.append(
        "answers: against the stream's recording (over the reference under the profile);"
        " pagedkv's optimized manager answers with pagedkv's policy, so its differences are"
        " the policies' differences; both sides replay every call"
    )
    operations, per_op = _operations(context, pagedkv, side, stream)
    data["operations"] = per_op
    return [whole, operations], data


def _operations(
    context: Context, pagedkv: ManagerSide, side: ManagerSide, stream: Workload
) -> tuple[Table, dict[str, Any]]:
    passes = min(3, context.options.repetitions)
    overhead = replay.clock_overhead_ns(50_000, CLOCK)
    found: dict[str, list[dict[str, replay.OpTime]]] = {pagedkv.name: [], side.name: []}
    order = [pagedkv, side]
    for number in range(passes):
        for one in order if number % 2 == 0 else reversed(order):
            found[one.name].append(per_step(one, stream.config, stream.calls, overhead))
    mine, theirs = found[pagedkv.name], found[side.name]
    table = Table(
        f"manager level per operation, CPU µs: median [min, max] of {passes} interleaved"
        f" pass(es) (mean over the stream; load average {load_average()})",
        [
            "operation",
            "steps",
            f"{pagedkv.name} µs",
            f"{side.name} µs",
            f"× {pagedkv.name}",
            "with its engine steps µs",
            f"× {pagedkv.name}, with them",
        ],
    )
    data: dict[str, Any] = {}
    charged = side.charged
    for op in sorted(theirs[0], key=lambda op: -theirs[0][op].total_s):
        them = Spread.of([one[op].mean_us for one in theirs])
        steps = theirs[0][op].calls
        if op not in mine[0]:
            shown = f"{op}, charged to {charged[op]}" if op in charged else op
            table.rows.append([shown, steps, float("nan"), them, float("nan"), "", ""])
            data[op] = {"steps": steps, "theirs_us": them.as_json()}
            continue
        us = Spread.of([one[op].mean_us for one in mine])
        ratio = Spread.of(
            [t[op].mean_us / max(m[op].mean_us, 1e-3) for t, m in zip(theirs, mine, strict=True)]
        )
        row: list[Any] = [op, steps, us, them, ratio, "", ""]
        data[op] = {
            "steps": steps,
            "pagedkv_us": us.as_json(),
            "theirs_us": them.as_json(),
            "ratio_to_pagedkv": ratio.as_json(),
        }
        engine = [name for name, to in charged.items() if to == op and name in theirs[0]]
        if engine:
            per_pass = [_with_engine(one, op, engine) for one in theirs]
            whole = Spread.of(per_pass)
            ratio = Spread.of(
                [w / max(m[op].mean_us, 1e-3) for w, m in zip(per_pass, mine, strict=True)]
            )
            row[5:] = [whole, ratio]
            data[op]["theirs_with_engine_steps_us"] = whole.as_json()
            data[op]["ratio_with_engine_steps"] = ratio.as_json()
        table.rows.append(row)
    table.notes.append(
        f"each step timed alone in CPU time (the clock's own {overhead:.0f} ns and any collector"
        " pause subtracted); an engine step of its own (no call of the stream) is charged to"
        " the operation whose work it is: its time per call of that operation is added in the"
        " last columns (the prompt a request brings is checked by pagedkv's can_allocate at its"
        " first sight, copied into vLLM's Sequence when it arrives)"
    )
    return table, data


def _with_engine(one: dict[str, replay.OpTime], op: str, engine: list[str]) -> float:
    """µs per call of ``op``, with the engine steps charged to it."""
    total = one[op].mean_us * one[op].calls + sum(one[e].mean_us * one[e].calls for e in engine)
    return total / one[op].calls
