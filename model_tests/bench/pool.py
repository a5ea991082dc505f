"""The pool against vLLM v1's ``BlockPool`` on the serving stream (issue 25): the bench's
workload at the pool level (``pool_stream.py``) replayed through pagedkv's public pool API, its
trusted core and vLLM 0.33.0's real pool (``pool_drivers.py``), interleaved and repeated.

End to end: the CPU seconds of a whole replay (building the pool untimed, the stream frozen out
of the garbage collector), the callers taking turns in a rotating order; the ratio of each
repetition is vLLM's time over pagedkv's (above 1: pagedkv is faster). Per operation: a separate
pass reads the clock around every event (its own cost subtracted): a prompt per block it covers,
a decode token (``append``), a free per block it gives back.

``python -m pagedkv.model_tests.bench.pool`` prints the tables (``--repetitions``, ``--quick``).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

from pagedkv.model_tests.bench import replay
from pagedkv.model_tests.bench.pool_drivers import DRIVERS, Driver
from pagedkv.model_tests.bench.pool_stream import DECODE, FREE, PROMPT, PoolStream, derive
from pagedkv.model_tests.bench.report import Section, Spread, Table, cell, load_average, plain_text
from pagedkv.model_tests.bench.requests import RequestShape
from pagedkv.model_tests.bench.scheduler import SchedulerLimits
from pagedkv.model_tests.bench.sections import Context
from pagedkv.model_tests.bench.workload import WorkloadSpec, build
from pagedkv.model_tests.oracle import targets

PAGEDKV = "pagedkv public API"
"""The headline caller: the public API doing the work v1's caller does (``pool_drivers.py``)."""
PER_TOKEN = "pagedkv public API, a call per token"
VLLM = "vLLM v1 BlockPool"
OPERATIONS = ("prompt per block", "append", "free per block")

Factory = Callable[[int, int], Driver]

VLLM_V1_DRIVER = "pagedkv.model_tests.peers.vllm_v1_pool_driver:VllmV1"
"""vLLM v1's caller, loaded by name as ``pagedkv bench`` loads every ``--target`` (the peers sit
beside the bench, not under it)."""


def callers() -> dict[str, Factory]:
    """pagedkv's callers and vLLM v1's; vLLM's needs its files (``make peers-fetch``)."""
    loaded: Any = targets.load(VLLM_V1_DRIVER, "pool")
    factory: Factory = loaded
    return {**DRIVERS, VLLM: factory}


def quick_spec(seed: int = 0) -> WorkloadSpec:
    """A smoke run's workload (its figures mean nothing)."""
    shape = RequestShape(
        num_requests=12, prompt_median=120, output_median=80, arrival_steps=4, parallel_fraction=0.3
    )
    return WorkloadSpec(
        seed=seed,
        shape=shape,
        num_gpu_blocks=64,
        num_cpu_blocks=24,
        limits=SchedulerLimits(max_num_seqs=16),
    )


def pool_size(stream: PoolStream, num_gpu_blocks: int) -> int:
    """The workload's GPU blocks, or more if the live sequences could need more with nothing
    shared (no driver may run out: v1 shares less than pagedkv, which dedups)."""
    return max(num_gpu_blocks, stream.peak_blocks)


def seconds(factory: Factory, stream: PoolStream, num_blocks: int) -> float:
    """CPU seconds of one replay (building the pool is not timed)."""
    driver = factory(num_blocks, stream.block_size)
    handlers = driver.handlers
    events = stream.events
    with replay.stream_frozen():
        start = time.process_time()
        for kind, seq, payload in events:
            handlers[kind](seq, payload)
        return time.process_time() - start


def per_event(
    factory: Factory, stream: PoolStream, num_blocks: int, overhead_ns: float
) -> dict[str, float]:
    """Mean µs of each operation (module docstring) over one pass."""
    driver = factory(num_blocks, stream.block_size)
    handlers = driver.handlers
    clock = time.perf_counter_ns
    totals = [0, 0, 0]
    counts = [0, 0, 0]
    with replay.stream_frozen():
        for kind, seq, payload in stream.events:
            start = clock()
            handlers[kind](seq, payload)
            totals[kind] += clock() - start
            counts[kind] += 1
    units = {
        PROMPT: stream.prompt_blocks,
        DECODE: counts[DECODE],
        FREE: stream.freed_blocks,
    }
    return {
        name: (totals[kind] - overhead_ns * counts[kind]) / 1000 / max(1, units[kind])
        for name, kind in zip(OPERATIONS, (PROMPT, DECODE, FREE), strict=True)
    }


def interleaved(
    factories: dict[str, Factory], stream: PoolStream, num_blocks: int, repetitions: int
) -> dict[str, list[float]]:
    """Each caller's seconds per repetition, the order rotating so none always goes first."""
    names = list(factories)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repetitions):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(seconds(factories[name], stream, num_blocks))
    return times


def ratios(theirs: Sequence[float], ours: Sequence[float]) -> Spread:
    return Spread.of([t / o for t, o in zip(theirs, ours, strict=True)])


def spread_cell(spread: Spread, scale: float = 1.0) -> str:
    return (
        f"{cell(spread.median * scale)} [{cell(spread.low * scale)}, {cell(spread.high * scale)}]"
    )


def measure(spec: WorkloadSpec, repetitions: int) -> Section:
    """The section: the stream, end to end and per operation, every caller against vLLM v1."""
    workload = build(spec)
    stream = derive(workload)
    num_blocks = pool_size(stream, spec.num_gpu_blocks)
    counts = stream.counts()
    facts = Table("pool-level stream", ["what", "value"])
    facts.rows = [
        ["from", workload.describe()],
        ["events", ", ".join(f"{value} {name}" for name, value in counts.items())],
        ["pool", f"{num_blocks} blocks of {spec.block_size} (vLLM v1: one more, its null block)"],
        ["load average", load_average()],
    ]
    overhead = replay.clock_overhead_ns()
    drivers = callers()
    times = interleaved(drivers, stream, num_blocks, repetitions)
    theirs = times[VLLM]
    end_to_end = Table(
        f"end to end, CPU ms per replay, median [min, max] of {repetitions}"
        f" (load average {load_average()})",
        ["caller", "ms", "vLLM v1 / caller"],
    )
    data: dict[str, Any] = {"stream": counts, "num_blocks": num_blocks, "end_to_end": {}}
    for name, values in times.items():
        ratio = ratios(theirs, values)
        end_to_end.rows.append([name, spread_cell(Spread.of(values), 1000), spread_cell(ratio)])
        data["end_to_end"][name] = {
            "seconds": Spread.of(values).as_json(),
            "vllm_over_this": ratio.as_json(),
        }
    end_to_end.notes.append("above 1: faster than vLLM v1's BlockPool driven by its manager")
    passes = max(1, min(repetitions, 5))
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in drivers}
    for round_ in range(passes):
        names = list(drivers)
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(per_event(drivers[name], stream, num_blocks, overhead))
    per_op = Table(
        f"per operation, µs, median [min, max] of {passes} passes; vLLM v1 / pagedkv per pass",
        ["operation", *drivers, "vLLM v1 / public", "vLLM v1 / per token", "vLLM v1 / core"],
    )
    data["per_operation"] = {}
    data["per_operation_vllm_over_this"] = {}
    for op in OPERATIONS:
        row: list[Any] = [op]
        for name in drivers:
            row.append(spread_cell(Spread.of([s[op] for s in samples[name]])))
        v1 = [s[op] for s in samples[VLLM]]
        over: dict[str, Any] = {}
        for name in (PAGEDKV, PER_TOKEN, "pagedkv core"):
            ratio = ratios(v1, [s[op] for s in samples[name]])
            row.append(spread_cell(ratio))
            over[name] = ratio.as_json()
        per_op.rows.append(row)
        data["per_operation_vllm_over_this"][op] = over
        data["per_operation"][op] = {
            name: Spread.of([s[op] for s in samples[name]]).as_json() for name in drivers
        }
    per_op.notes.append(
        "append: one decode token (vLLM's pool, and pagedkv's public API in the headline row,"
        " is called only when the token needs a new block or fills one; the request keeps the"
        " tokens; the per-token row calls append_tokens for every token)"
    )
    per_op.notes.append(
        "prompt per block, free per block: the call of an event over the blocks it covers; the"
        " headline row makes one allocate_immutable_chain and one free_blocks per event, as"
        " vLLM's caller batches its pool calls; the per-token row one call per block"
    )
    return Section("pool", [facts, end_to_end, per_op], data)


def pool_section(seed: int = 0, repetitions: int = 5, quick: bool = False) -> Section:
    """The section for the bench's workload (``sections.workload_spec``), or a smoke run's."""
    spec = quick_spec(seed) if quick else WorkloadSpec(seed=seed)
    return measure(spec, 1 if quick else repetitions)


def section(context: Context) -> Section:
    """``pagedkv bench``'s section: one entry of ``runner.SECTIONS``."""
    options = context.options
    try:
        callers()[VLLM](2, 16)  # vLLM's modules load here: its files must be fetched
    except Exception as error:  # vLLM's files missing (make peers-fetch): say so, time nothing
        skipped = f"not run: vLLM 0.33.0's BlockPool cannot be loaded: {error}"
        return Section("pool", [Table("pool level", [], notes=[skipped])], {"skipped": skipped})
    return pool_section(options.seed, options.repetitions, options.quick)


def print_section(section: Section) -> None:
    for table in section.tables:
        print()
        print(plain_text(table))
        for note in table.notes:
            print(f"  ({note})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    args = parser.parse_args(argv)
    gc.collect()
    print_section(pool_section(args.seed, args.repetitions, args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
