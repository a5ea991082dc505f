"""The manager sections of ``pagedkv bench``: the workload, per-operation times, end to end
against the optimized manager, and the scheduler's questions on short and long sequences.

Every figure comes with the load average it was measured at; every comparison between two
implementations is interleaved (``replay.interleaved``).
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagedkv.model_tests.bench import replay
from pagedkv.model_tests.bench.report import Section, Table, load_average
from pagedkv.model_tests.bench.requests import RequestShape
from pagedkv.model_tests.bench.scheduler import SchedulerLimits
from pagedkv.model_tests.bench.workload import Workload, WorkloadSpec, build, to_trace
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


@dataclass
class Context:
    options: Options
    workload: Workload | None = None
    overhead_ns: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    """What later sections and the plot read of earlier ones."""

    @property
    def stream(self) -> Workload:
        assert self.workload is not None, "the workload section runs first"
        return self.workload


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
            "replays: process CPU time, interleaved, median of repetitions; per call:"
            " perf_counter_ns; the recorded stream frozen out of the garbage collector",
        ],
    ]
    context.overhead_ns = replay.clock_overhead_ns()
    table.rows.append(["clock read overhead subtracted per call", f"{context.overhead_ns:.0f} ns"])
    return Section("machine", [table], {row[0]: row[1] for row in table.rows})


def workload_section(context: Context) -> Section:
    spec = workload_spec(context.options)
    start = time.perf_counter()
    context.workload = built = build(spec)
    seconds = time.perf_counter() - start
    table = Table("workload", ["what", "value"])
    table.rows = [
        ["stream", built.describe()],
        ["generated in", f"{seconds:.1f} s (scheduler over the optimized manager)"],
        ["load average", load_average()],
    ]
    table.notes.append(
        "scheduled tokens: prompt tokens past the cached prefix, plus every decoded token"
    )
    for target in context.options.targets:
        if target.calls is not None and target.calls < len(built.calls):
            table.notes.append(f"{target.name}: replays the first {target.calls} calls only")
    if context.options.trace_out is not None:
        path = trace.write(to_trace(built), context.options.trace_out)
        table.rows.append(["trace", f"{path} (pagedkv replay {path} --target T)"])
    totals = built.totals
    data = {
        "calls": len(built.calls),
        "steps": totals.steps,
        "scheduled_tokens": totals.scheduled_tokens,
        "preempted_by_swap": totals.preempted_by_swap,
        "preempted_by_recompute": totals.preempted_by_recompute,
        "hit_rate": built.hit_rate,
        "config": str(built.config),
        "seconds_to_generate": seconds,
    }
    return Section("workload", [table], data)


def _calls(context: Context, target: Target) -> list[Any]:
    calls = context.stream.calls
    return calls if target.calls is None else calls[: target.calls]


def check_section(context: Context) -> Section:
    """Every implementation answers every call as the recording did (else it is not the same
    workload, and it is left out of the comparisons)."""
    stream = context.stream
    table = Table("replay check", ["implementation", "calls", "answers", "GPU hit rate"])
    checked: list[Target] = []
    data: dict[str, Any] = {}
    optimized = Target(OPTIMIZED, OptimizedBlockSpaceManager)
    for target in [optimized, *context.options.targets]:
        calls = _calls(context, target)
        try:
            outcomes = stream.outcomes[: len(calls)]
            manager = replay.check(
                target.factory, stream.config, calls, outcomes, context.options.timeout
            )
        except replay.ReplayError as error:
            table.rows.append([target.name, len(calls), f"DIFFER: {error}", "-"])
            data[target.name] = {"calls": len(calls), "error": str(error)}
            continue
        rate = manager.get_prefix_cache_hit_rate(Device.GPU)
        table.rows.append([target.name, len(calls), "as recorded", rate])
        data[target.name] = {"calls": len(calls), "hit_rate": rate}
        if target is not optimized:
            checked.append(target)
    context.facts["checked"] = checked
    return Section("check", [table], data)


def operations_section(context: Context) -> Section:
    """Mean µs of each operation over the stream, per implementation."""
    stream = context.stream
    optimized = Target(OPTIMIZED, OptimizedBlockSpaceManager)
    targets = [optimized, *context.facts.get("checked", [])]
    passes = min(3, context.options.repetitions)
    timings = {
        t.name: replay.per_operation(
            t.factory,
            stream.config,
            _calls(context, t),
            context.overhead_ns,
            passes,
            context.options.timeout,
        )
        for t in targets
    }
    names = [t.name + ("" if t.calls is None else f" (first {t.calls})") for t in targets]
    table = Table(
        f"per operation, µs (mean over the stream; load average {load_average()})",
        ["operation", "calls", *[f"{n} µs" for n in names]],
    )
    for op, timing in timings[OPTIMIZED].items():
        row: list[Any] = [op, timing.calls]
        for target in targets:
            other = timings[target.name].get(op)
            row.append(other.mean_us if other is not None else float("nan"))
        table.rows.append(row)
    table.notes.append(
        f"each call timed alone (perf_counter_ns around it, the clock's own cost and any"
        f" collector pause subtracted); the median of {passes} passes; {replay.COLLECTOR}:"
        " collections (calls) and their µs per call of the stream"
    )
    data: dict[str, Any] = {
        name: {op: {"calls": t.calls, "mean_us": t.mean_us} for op, t in ops.items()}
        for name, ops in timings.items()
    }
    per_block = {
        t.name: us
        for t in targets
        if (us := _allocate_per_block(_calls(context, t), stream.config, timings[t.name]))
    }
    if per_block:
        table.notes.append(
            "allocate per prompt block (hashing included): "
            + ", ".join(f"{name} {us:.2f} µs" for name, us in per_block.items())
        )
        data["allocate_us_per_prompt_block"] = per_block
    context.facts["operations"] = data
    return Section("operations", [table], data)


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
    stream = context.stream
    repetitions = context.options.repetitions
    table = Table(
        "end to end against the optimized manager (same calls, interleaved)",
        [
            "implementation",
            "calls",
            "CPU s (median)",
            "µs/call",
            "µs/scheduled token",
            "× optimized (median)",
            "min",
            "max",
            "load",
        ],
    )
    data: dict[str, Any] = {}
    optimized = Target(OPTIMIZED, OptimizedBlockSpaceManager)
    whole = len(stream.calls)
    tokens = stream.totals.scheduled_tokens
    for target in context.facts.get("checked", []):
        calls = _calls(context, target)
        mine, theirs, ratio = replay.interleaved(
            (optimized.factory, calls),
            (target.factory, calls),
            stream.config,
            repetitions,
            context.options.timeout,
        )
        load = load_average()
        for name, seconds, spread in ((OPTIMIZED, mine, None), (target.name, theirs, ratio)):
            per_token = seconds.median / tokens * 1e6 if len(calls) == whole else float("nan")
            table.rows.append(
                [
                    name if spread is not None else f"  {name}, same calls",
                    len(calls),
                    seconds.median,
                    seconds.median / len(calls) * 1e6,
                    per_token,
                    spread.median if spread else 1.0,
                    spread.low if spread else 1.0,
                    spread.high if spread else 1.0,
                    load,
                ]
            )
        data[target.name] = {
            "calls": len(calls),
            "seconds": theirs.as_json(),
            "optimized_seconds": mine.as_json(),
            "ratio_to_optimized": ratio.as_json(),
            "load_average": load,
        }
    if not data:
        seconds = replay.Spread.of(
            [
                replay.seconds(optimized.factory, stream.config, stream.calls)
                for _ in range(repetitions)
            ]
        )
        table.rows.append(
            [
                OPTIMIZED,
                whole,
                seconds.median,
                seconds.median / whole * 1e6,
                seconds.median / tokens * 1e6,
                1.0,
                1.0,
                1.0,
                load_average(),
            ]
        )
        data[OPTIMIZED] = {"seconds": seconds.as_json()}
    table.notes.append(
        "µs/scheduled token only where the whole stream is replayed; the ratio is per"
        " repetition (theirs / optimized), median with min and max"
    )
    context.facts["end_to_end"] = data
    return Section("end_to_end", [table], data)


def memory_section(context: Context) -> Section:
    stream = context.stream
    optimized = Target(OPTIMIZED, OptimizedBlockSpaceManager)
    table = Table("peak memory during a replay (tracemalloc)", ["implementation", "calls", "MiB"])
    data: dict[str, Any] = {}
    for target in [optimized, *context.facts.get("checked", [])]:
        calls = _calls(context, target)
        peak = replay.peak_memory(target.factory, stream.config, calls, context.options.timeout)
        table.rows.append([target.name, len(calls), peak / 2**20])
        data[target.name] = {"calls": len(calls), "peak_bytes": peak}
    table.notes.append("Python heap the implementation allocated, the stream itself excluded")
    return Section("memory", [table], data)


QUERY_LENGTHS = (1_000, 16_000)


def queries_section(context: Context) -> Section:
    """The scheduler's per-step questions on one long-running sequence of 1k and of 16k
    tokens, in a decode loop: a token is appended between two rounds (not timed)."""
    lengths = (100, 400) if context.options.quick else QUERY_LENGTHS
    rounds = 50 if context.options.quick else 2000
    implementations = [Target(OPTIMIZED, OptimizedBlockSpaceManager)]
    implementations += [t for t in context.facts.get("checked", []) if t.name != "reference"]
    table = Table(
        f"scheduler questions per decode step, µs (load average {load_average()})",
        ["implementation", "operation", *[f"{n} tokens" for n in lengths], "growth"],
    )
    data: dict[str, Any] = {}
    for target in implementations:
        found: dict[str, list[float]] = {}
        for length in lengths:
            for op, mean in decode_questions(target.factory, length, rounds, context).items():
                found.setdefault(op, []).append(mean)
        for op, means in found.items():
            table.rows.append([target.name, op, *means, means[-1] / max(means[0], 1e-9)])
        data[target.name] = {
            op: dict(zip(map(str, lengths), means, strict=True)) for op, means in found.items()
        }
    table.notes.append(
        "growth = µs at the longest / µs at the shortest; the optimized manager's"
        " get_common_computed_block_ids hands out one read-only list until the computed prefix"
        " grows (once per block of decoded tokens), and copies the prefix then"
    )
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
    factory: Factory, length: int, rounds: int, context: Context
) -> dict[str, float]:
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
        totals = dict.fromkeys(QUESTIONS, 0)
        calls: dict[str, tuple[Any, ...]] = {
            "access_all_blocks_in_seq": (1, 0.0),
            "get_common_computed_block_ids": ([1],),
            "mark_blocks_as_computed": (1,),
            "can_append_slots": (1, 1, 0),
        }
        under_way[0] = "one of the scheduler's questions or append_slots, in a decode loop"
        for step in deadline.follow(range(rounds)):
            calls["access_all_blocks_in_seq"] = (1, float(step))
            for op in deadline.follow(QUESTIONS[:-1]):
                method, args = getattr(manager, op), calls[op]
                start = clock()
                method(*args)
                totals[op] += clock() - start
            tokens = [step % 30_000]
            start = clock()
            manager.append_slots(1, tokens, 0)
            totals["append_slots"] += clock() - start
    return {
        op: max(0.0, total / rounds - context.overhead_ns) / 1000 for op, total in totals.items()
    }
