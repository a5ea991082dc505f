"""The manager sections of ``pagedkv bench``: the workload, per-operation times, end to end
against the optimized manager, and the scheduler's questions on short and long sequences.

Every implementation is timed: one whose answers differ from its stream's recording is timed
on the same calls all the same, and how many it answered otherwise (and the first) is shown
beside its figures. A target checked under another profile (``--profile``) replays that
profile's stream (``streams.py``), as the optimized manager does for its ratio.

Every figure comes with the load average it was measured at; every comparison between two
implementations is interleaved (``replay.interleaved``); every time is the median of
repetitions (or passes) with the smallest and largest (``Spread``).
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagedkv.model_tests.bench import replay, streams
from pagedkv.model_tests.bench.report import Section, Spread, Table, load_average
from pagedkv.model_tests.bench.requests import RequestShape
from pagedkv.model_tests.bench.scheduler import SchedulerLimits
from pagedkv.model_tests.bench.workload import Workload, WorkloadSpec, to_trace
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.loop_deadline import calls_within
from pagedkv.model_tests.oracle.timeout import DEFAULT_TIMEOUT
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import Device, ManagerConfig

Factory = Callable[[ManagerConfig], Any]
OPTIMIZED = "optimized"


@dataclass
class Target:
    """An implementation the stream is replayed on; ``calls`` limits it to the stream's first
    calls (the reference is slow), None for all of them."""

    name: str
    factory: Factory
    calls: int | None = None
    profile: str = streams.PAGEDKV
    """The policy it is held to: it replays that policy's stream (``streams.py``)."""


@dataclass
class Options:
    seed: int = 0
    repetitions: int = 5
    targets: list[Target] = field(default_factory=list)
    """The implementations compared with the optimized manager (reference, baseline, others)."""
    quick: bool = False
    """A smoke run: a tiny workload and one repetition (figures mean nothing)."""
    scaling: tuple[int, ...] = (1024, 16_384, 131_072, 1_048_576)
    scaling_calls: int = 400_000
    kernels: bool = False
    defrag: bool = False
    """The defragmenter's serving run and its exchange kernel (a child process: torch)."""
    trace_out: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    """How long one call into an implementation may take (``pagedkv bench --timeout``)."""
    requests: bool = True
    """The request-level section (``request_sections.py``)."""
    request_sides: tuple[str, ...] = ("pagedkv.model_tests.peers.vllm_v1_replay:VllmV1Replay",)
    """The request level's other managers, as ``package.module:factory`` of a
    ``request_sections.RequestSide`` (loaded as ``--target`` is: the bench and the peers are
    siblings): vLLM 0.33.0's ``KVCacheManager``."""
    native_sides: tuple[str, ...] = ("pagedkv.model_tests.peers.vllm_v0_replay:VllmV0Replay",)
    """The manager level's engines driven natively (``manager_sections.py``), as
    ``package.module:factory`` of a ``manager_sections.ManagerSide``: vLLM 0.6.3's
    ``SelfAttnBlockSpaceManager``."""


@dataclass(frozen=True)
class Run:
    """An implementation on a stream: what every table has a row (or a column) for."""

    target: Target
    stream: Workload

    @property
    def calls(self) -> list[Any]:
        calls = self.stream.calls
        return calls if self.target.calls is None else calls[: self.target.calls]

    @property
    def outcomes(self) -> list[Any]:
        return self.stream.outcomes[: len(self.calls)]

    @property
    def label(self) -> str:
        """Its name, the stream's policy where it is not pagedkv's, and its share of calls."""
        label = self.target.name
        if self.stream.profile != streams.PAGEDKV:
            label += f" [{self.stream.profile} stream]"
        if self.target.calls is not None and self.target.calls < len(self.stream.calls):
            label += f" (first {self.target.calls})"
        return label


@dataclass
class Context:
    options: Options
    streams: dict[str, Workload] = field(default_factory=dict)
    """Per profile, its stream: pagedkv's first (``streams.py``)."""
    overhead_ns: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    """What later sections and the plot read of earlier ones."""

    @property
    def stream(self) -> Workload:
        """pagedkv's stream."""
        assert self.streams, "the workload section runs first"
        return self.streams[streams.PAGEDKV]

    def runs(self) -> list[Run]:
        """The optimized manager on every stream, then every target on its own."""
        optimized = Target(OPTIMIZED, OptimizedBlockSpaceManager)
        found = [Run(optimized, stream) for stream in self.streams.values()]
        return found + [Run(t, self.streams[t.profile]) for t in self.options.targets]

    def optimized_on(self, stream: Workload) -> Run:
        return Run(Target(OPTIMIZED, OptimizedBlockSpaceManager), stream)


def workload_spec(options: Options) -> WorkloadSpec:
    if not options.quick:
        return WorkloadSpec(seed=options.seed)
    shape = RequestShape(
        num_requests=12, prompt_median=120, output_median=80, arrival_steps=4, parallel_fraction=0.3
    )
    return WorkloadSpec(
        seed=options.seed,
        shape=shape,
        num_gpu_blocks=64,
        num_cpu_blocks=24,
        limits=SchedulerLimits(max_num_seqs=16),
    )


# --- sections ---------------------------------------------------------------------------------


def machine_section(context: Context) -> Section:
    table = Table("machine", ["what", "value"])
    table.rows = [
        ["python", f"{platform.python_implementation()} {sys.version.split()[0]}"],
        ["platform", platform.platform()],
        ["load average (1 min) at start", load_average()],
        ["repetitions", context.options.repetitions],
        [
            "timers",
            "replays: process CPU time, interleaved, median [min, max] of repetitions; per call:"
            " perf_counter_ns; the recorded stream frozen out of the garbage collector",
        ],
    ]
    context.overhead_ns = replay.clock_overhead_ns()
    table.rows.append(["clock read overhead subtracted per call", f"{context.overhead_ns:.0f} ns"])
    return Section("machine", [table], {row[0]: row[1] for row in table.rows})


def workload_section(context: Context) -> Section:
    """pagedkv's stream, recorded over the optimized manager, and the stream of every other
    profile a target is held to, recorded over the reference under it."""
    spec = workload_spec(context.options)
    profiles = [streams.PAGEDKV]
    profiles += sorted({t.profile for t in context.options.targets} - {streams.PAGEDKV})
    table = Table("workload", ["what", "value"])
    data: dict[str, Any] = {}
    for profile in profiles:
        built, seconds = streams.record(spec, profile)
        context.streams[profile] = built
        over = "the optimized manager" if profile == streams.PAGEDKV else "the reference"
        name = "stream" if profile == streams.PAGEDKV else f"stream of profile {profile}"
        table.rows.append([name, built.describe()])
        table.rows.append(["  generated in", f"{seconds:.1f} s (scheduler over {over})"])
        totals = built.totals
        data[profile] = {
            "calls": len(built.calls),
            "steps": totals.steps,
            "scheduled_tokens": totals.scheduled_tokens,
            "preempted_by_swap": totals.preempted_by_swap,
            "preempted_by_recompute": totals.preempted_by_recompute,
            "hit_rate": built.hit_rate,
            "config": str(built.config),
            "seconds_to_generate": seconds,
        }
    table.rows.append(["load average", load_average()])
    table.notes.append(
        "scheduled tokens: prompt tokens past the cached prefix, plus every decoded token"
        " (the whole prompt where the profile has no get_num_cached_tokens)"
    )
    for target in context.options.targets:
        if target.calls is not None and target.calls < len(context.stream.calls):
            table.notes.append(f"{target.name}: replays the first {target.calls} calls only")
    if context.options.trace_out is not None:
        path = trace.write(to_trace(context.stream), context.options.trace_out)
        table.rows.append(["trace", f"{path} (pagedkv replay {path} --target T)"])
    return Section("workload", [table], {**data[streams.PAGEDKV], "streams": data})


def check_section(context: Context) -> Section:
    """How every implementation answers its stream: a difference is counted and shown (the
    first one named), never a reason to leave an implementation out of the timings."""
    table = Table(
        "replay check",
        ["implementation", "policy", "calls", "answers", "GPU hit rate"],
    )
    data: dict[str, Any] = {}
    for run in context.runs():
        agreement = replay.compare(
            run.target.factory,
            run.stream.config,
            run.calls,
            run.outcomes,
            context.options.timeout,
        )
        rate = float("nan")
        with contextlib.suppress(Exception):  # a profile without it: no figure
            rate = agreement.manager.get_prefix_cache_hit_rate(Device.GPU)
        table.rows.append(
            [run.label, run.stream.profile, len(run.calls), agreement.describe(), rate]
        )
        data[run.label] = {**agreement.as_json(), "hit_rate": rate, "policy": run.stream.profile}
        if agreement.per_operation:
            by_operation = sorted(agreement.per_operation.items(), key=lambda item: -item[1])
            shown = ", ".join(f"{op} {count}" for op, count in by_operation)
            table.notes.append(f"{run.label} answers otherwise at: {shown}")
    table.notes.append(
        "answers: compared with the stream's recording (block ids by their number); an"
        " implementation that answers otherwise is still timed on every call"
    )
    if len(context.streams) > 1:
        table.notes.append(
            "a profile's stream is recorded over the reference under that profile: the optimized"
            " manager answers it with pagedkv's policy, so its differences there are the"
            " policies' differences"
        )
    context.facts["check"] = data
    return Section("check", [table], data)


def operations_section(context: Context) -> Section:
    """Mean µs of each operation over its stream, per implementation: the median of a few
    passes, with the smallest and largest."""
    runs = context.runs()
    passes = min(3, context.options.repetitions)
    timings = {
        run.label: replay.per_operation(
            run.target.factory,
            run.stream.config,
            run.calls,
            context.overhead_ns,
            passes,
            context.options.timeout,
        )
        for run in runs
    }
    table = Table(
        f"per operation, µs, median [min, max] of {passes} pass(es) (mean over the stream;"
        f" load average {load_average()})",
        ["operation", "calls", *[f"{run.label} µs" for run in runs]],
    )
    ops = list(timings[runs[0].label])
    ops += sorted({op for timing in timings.values() for op in timing} - set(ops))
    for op in ops:
        calls = next(timing[op].calls for timing in timings.values() if op in timing)
        row: list[Any] = [op, calls]
        for run in runs:
            other = timings[run.label].get(op)
            row.append(other.spread if other is not None else float("nan"))
        table.rows.append(row)
    table.notes.append(
        f"each call timed alone (perf_counter_ns around it, the clock's own cost and any"
        f" collector pause subtracted); {replay.COLLECTOR}: collections (calls) and their µs"
        " per call of the stream; calls: on the first column's stream"
    )
    implementations: dict[str, Any] = {
        label: {
            op: {"calls": t.calls, "mean_us": t.mean_us, **_range(t.spread)}
            for op, t in ops_.items()
        }
        for label, ops_ in timings.items()
    }
    data: dict[str, Any] = {"implementations": implementations, "passes": passes}
    per_block = {
        run.label: us
        for run in runs
        if (us := _allocate_per_block(run.calls, run.stream.config, timings[run.label]))
    }
    if per_block:
        table.notes.append(
            "allocate per prompt block (hashing included): "
            + ", ".join(f"{name} {us:.2f} µs" for name, us in per_block.items())
        )
        data["allocate_us_per_prompt_block"] = per_block
    context.facts["operations"] = data
    return Section("operations", [table], data)


def _range(spread: Spread) -> dict[str, float]:
    return {"min_us": spread.low, "max_us": spread.high}


def _allocate_per_block(
    calls: list[Any], config: ManagerConfig, timing: dict[str, replay.OpTime]
) -> float | None:
    """The mean ``allocate`` time over the mean prompt blocks of those calls' allocations: what
    admitting a prompt costs per block (None without an allocation)."""
    prompts = [args[2] for method, args in calls if method == "allocate"]
    if not prompts or "allocate" not in timing:
        return None
    size = config.block_size
    blocks_per_call = sum(-(-len(prompt) // size) for prompt in prompts) / len(prompts)
    return timing["allocate"].mean_us / blocks_per_call


def end_to_end_section(context: Context) -> Section:
    """Each implementation against the optimized manager on the same calls, interleaved."""
    repetitions = context.options.repetitions
    table = Table(
        "end to end against the optimized manager (same calls, interleaved; median [min, max]"
        f" of {repetitions} repetition(s))",
        [
            "implementation",
            "calls",
            "CPU s",
            "µs/call",
            "µs/scheduled token",
            "× optimized",
            "answers differ",
            "load",
        ],
    )
    data: dict[str, Any] = {}
    differ = context.facts.get("check", {})
    others = [run for run in context.runs() if run.target.name != OPTIMIZED]
    for run in others:
        optimized = context.optimized_on(run.stream)
        calls = run.calls
        mine, theirs, ratio = replay.interleaved(
            (optimized.target.factory, calls),
            (run.target.factory, calls),
            run.stream.config,
            repetitions,
            context.options.timeout,
        )
        load = load_average()
        whole = len(calls) == len(run.stream.calls)
        tokens = run.stream.totals.scheduled_tokens
        for label, seconds, spread in ((optimized.label, mine, None), (run.label, theirs, ratio)):
            table.rows.append(
                [
                    label if spread is not None else f"  {label}, same calls",
                    len(calls),
                    seconds,
                    seconds.scaled(1e6 / len(calls)),
                    seconds.scaled(1e6 / tokens) if whole else float("nan"),
                    spread if spread is not None else 1.0,
                    differ.get(label, {}).get("differ", "-") if spread is not None else "",
                    load,
                ]
            )
        data[run.label] = {
            "calls": len(calls),
            "policy": run.stream.profile,
            "seconds": theirs.as_json(),
            "optimized_seconds": mine.as_json(),
            "ratio_to_optimized": ratio.as_json(),
            "answers_differ": differ.get(run.label, {}).get("differ"),
            "load_average": load,
        }
    if not others:
        optimized = context.optimized_on(context.stream)
        count = len(context.stream.calls)
        seconds = Spread.of(
            [
                replay.seconds(optimized.target.factory, context.stream.config, optimized.calls)
                for _ in range(repetitions)
            ]
        )
        table.rows.append(
            [
                OPTIMIZED,
                count,
                seconds,
                seconds.scaled(1e6 / count),
                seconds.scaled(1e6 / context.stream.totals.scheduled_tokens),
                1.0,
                "",
                load_average(),
            ]
        )
        data[OPTIMIZED] = {"seconds": seconds.as_json()}
    table.notes.append(
        "µs/scheduled token only where the whole stream is replayed; × optimized is per"
        " repetition (theirs / optimized on the same calls); answers differ: from the"
        " stream's recording (replay check)"
    )
    if any(run.target.profile != streams.PAGEDKV for run in others):
        table.notes.append(
            "a --target that adapts a real engine is timed as the oracle sees it, the adapter's"
            " argument checks and translations included; the manager level's native section"
            " times the engine alone, driven as its scheduler drives it"
        )
    context.facts["end_to_end"] = data
    return Section("end_to_end", [table], data)


def memory_section(context: Context) -> Section:
    table = Table("peak memory during a replay (tracemalloc)", ["implementation", "calls", "MiB"])
    data: dict[str, Any] = {}
    for run in context.runs():
        peak = replay.peak_memory(
            run.target.factory, run.stream.config, run.calls, context.options.timeout
        )
        table.rows.append([run.label, len(run.calls), peak / 2**20])
        data[run.label] = {"calls": len(run.calls), "peak_bytes": peak}
    table.notes.append(
        "Python heap the implementation allocated, the stream itself excluded (one replay:"
        " the same calls allocate the same)"
    )
    return Section("memory", [table], data)


QUERY_LENGTHS = (1_000, 16_000)


def queries_section(context: Context) -> Section:
    """The scheduler's per-step questions on one long-running sequence of 1k and of 16k
    tokens, in a decode loop: a token is appended between two rounds (not timed). Each call is
    timed alone and each repetition keeps the median call, so a call the machine preempted
    (or a collection that landed on it) moves nothing."""
    lengths = (100, 400) if context.options.quick else QUERY_LENGTHS
    rounds = 50 if context.options.quick else 2000
    repetitions = context.options.repetitions
    implementations = [Target(OPTIMIZED, OptimizedBlockSpaceManager)]
    implementations += [t for t in context.options.targets if t.name != "reference"]
    table = Table(
        f"scheduler questions per decode step, µs: median [min, max] over {repetitions}"
        f" repetition(s) of the median call of {rounds} rounds (load average {load_average()})",
        ["implementation", "operation", *[f"{n} tokens" for n in lengths], "growth"],
    )
    data: dict[str, Any] = {}
    failed: list[str] = []
    for target in implementations:
        unsupported = streams.offered(target.profile).unsupported
        asked = tuple(op for op in QUESTIONS if op not in unsupported)
        found: dict[str, list[Spread]] = {}
        for length in lengths:
            medians: dict[str, list[float]] = {op: [] for op in asked}
            for _ in range(repetitions):
                try:
                    once = decode_questions(target.factory, length, rounds, asked, context)
                except Exception as error:  # a target that cannot serve the loop
                    failed.append(f"{target.name} at {length} tokens: {error!r}")
                    once = dict.fromkeys(asked, float("nan"))
                for op, median in once.items():
                    medians[op].append(median)
            for op, values in medians.items():
                found.setdefault(op, []).append(Spread.of(values))
        for op, spreads in found.items():
            growth = spreads[-1].median / max(spreads[0].median, 1e-9)
            table.rows.append([target.name, op, *spreads, growth])
        data[target.name] = {
            op: {str(n): spread.as_json() for n, spread in zip(lengths, spreads, strict=True)}
            for op, spreads in found.items()
        }
    table.notes.append(
        "growth = median µs at the longest / at the shortest; the optimized manager's"
        " get_common_computed_block_ids keeps the computed prefix as a tuple, rebuilt when it"
        " grows (once per block of decoded tokens), and hands out a new list of it"
    )
    table.notes.extend(f"not timed: {reason}" for reason in failed)
    context.facts["queries"] = data
    return Section("queries", [table], data)


QUESTIONS = (
    "access_all_blocks_in_seq",
    "get_common_computed_block_ids",
    "mark_blocks_as_computed",
    "can_append_slots",
    "append_slots",
)


def decode_questions(
    factory: Factory, length: int, rounds: int, asked: tuple[str, ...], context: Context
) -> dict[str, float]:
    """Each question's median µs over ``rounds`` decode steps (the clock's cost subtracted)."""
    block_size = 16
    config = ManagerConfig(
        block_size=block_size,
        num_gpu_blocks=(length + rounds) // block_size + 16,
        num_cpu_blocks=1,
        enable_caching=True,
    )
    under_way = [f"creating it for {config}"]
    with calls_within(context.options.timeout, lambda: under_way[0]) as deadline:
        manager = factory(config)
        prompt = tuple(range(1000, 1000 + length))
        deadline.next_call()
        under_way[0] = f"allocate(1, [1], <{length} tokens>)"
        manager.allocate(1, [1], prompt)
        deadline.next_call()
        under_way[0] = "mark_blocks_as_computed(1)"
        manager.mark_blocks_as_computed(1)
        clock = time.perf_counter_ns
        spent: dict[str, list[int]] = {op: [] for op in asked}
        calls: dict[str, tuple[Any, ...]] = {
            "access_all_blocks_in_seq": (1, 0.0),
            "get_common_computed_block_ids": ([1],),
            "mark_blocks_as_computed": (1,),
            "can_append_slots": (1, 1, 0),
        }
        questions = [op for op in asked if op != "append_slots"]
        under_way[0] = "one of the scheduler's questions or append_slots, in a decode loop"
        for step in deadline.follow(range(rounds)):
            calls["access_all_blocks_in_seq"] = (1, float(step))
            for op in deadline.follow(questions):
                method, args = getattr(manager, op), calls[op]
                start = clock()
                method(*args)
                spent[op].append(clock() - start)
            tokens = [step % 30_000]
            start = clock()
            manager.append_slots(1, tokens, 0)
            if "append_slots" in spent:
                spent["append_slots"].append(clock() - start)
    return {
        op: max(0.0, statistics.median(times) - context.overhead_ns) / 1000
        for op, times in spent.items()
    }
