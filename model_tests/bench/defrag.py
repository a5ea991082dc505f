"""The defragmenter's figure for a long serving run, as ``python -m
pagedkv.model_tests.bench.defrag``.

A seeded stand-in for a serving engine drives the optimized block space manager with prefix
caching: requests share a few system prompts, arrive at random, decode for long-tailed lengths,
and finish (or are preempted by recomputation when the pool is full). Each step the engine tells
an ``OptimizedDefragmenter`` which tables changed and calls ``defragment()``, as
``specs/defragmenter.md`` §5 asks of a caller; the exchange batches it returns are kept and run
on a KV store afterwards, so that the run itself stays quick. It prints (with ``--json``,
the tables as JSON, which ``pagedkv bench --defrag`` shows), never asserts:

1. a timeline: blocks in use, the highest logical id in use (what the highest id would be with no
   defragmenter) and the highest physical id in use after the step's defragmentation;
2. every triggered run summed up: the highest used id before and after, the exchanges made
   against the minimum that reaches the same compaction (``specs/defrag_rule.py``, computed from
   the used ids alone), runs that hit the cap, and the defragmenter's own time per step
   (``update_state`` and ``defragment``) beside the manager's;
3. the exchange kernel on the run's own pair lists: GB/s beside a contiguous ``copy_`` of the
   same bytes, interleaved in one process, median (min, max) over the repetitions, each timed
   as the kernels' benchmark does (``bench/kernels.py``: on the host this process's CPU time,
   each sample repeated to a few milliseconds, so that neither the clock's resolution nor the
   other work on a shared machine decides a batch of one pair).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

import torch

from pagedkv.model_tests.bench.kernels import Timer, ratio_of
from pagedkv.model_tests.bench.report import Table, load_average, plain_text
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.defragmenter import OptimizedDefragmenter
from pagedkv.optimized.kernels import swap_blocks_in_place
from pagedkv.optimized.kv_store import KVStore
from pagedkv.specs import defrag_rule
from pagedkv.specs.types import (
    DEFRAG_PAD_SIZES,
    AllocStatus,
    BlockId,
    DefragConfig,
    ManagerConfig,
    TableKey,
)

BLOCK_SIZE = 16
LAYERS, KV_HEADS, HEAD_DIM, DTYPE = 2, 8, 64, torch.float16
SYSTEM_PROMPTS = 6
MAX_RUNNING = 48
TIMELINE_ROWS = 12
KERNEL_REPEATS = 15


@dataclass
class Request:
    group_id: int
    prompt: list[int]
    output_len: int
    generated: int = 0


@dataclass
class RunFigures:
    steps: int = 0
    finished: int = 0
    preempted: int = 0
    runs: int = 0
    triggered: list[tuple[int, int, int, int]] = field(default_factory=list)
    """Per triggered run: (max used id before, after, exchanges, minimum exchanges)."""
    capped: int = 0
    timeline: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(step, blocks used, max logical id used, max physical id used after defragmenting)."""
    pair_lists: list[list[tuple[BlockId, BlockId]]] = field(default_factory=list)
    manager_seconds: float = 0.0
    defrag_seconds: float = 0.0


class ServingRun:
    """The engine: admission while ``can_allocate`` says OK, one decode token per running
    request per step, recompute preemption when a decode step cannot get a block."""

    def __init__(self, num_blocks: int, threshold: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.manager = OptimizedBlockSpaceManager(
            ManagerConfig(BLOCK_SIZE, num_blocks, 1, watermark=0.01, enable_caching=True)
        )
        self.defrag = OptimizedDefragmenter(DefragConfig(num_blocks, threshold))
        self.systems = [
            [self.rng.randrange(32_000) for _ in range(self.rng.choice((256, 512, 1024)))]
            for _ in range(SYSTEM_PROMPTS)
        ]
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.told: dict[TableKey, tuple[int, BlockId]] = {}
        """Per table the defragmenter knows: (length, last id) when it was last told."""
        self.next_id = 0
        self.figures = RunFigures()

    def new_request(self) -> Request:
        self.next_id += 1
        system = self.rng.choice(self.systems)
        question = [self.rng.randrange(32_000) for _ in range(self.rng.randint(16, 400))]
        output = min(2048, int(self.rng.paretovariate(1.2) * 24))  # long-tailed
        return Request(self.next_id, system + question, output)

    def admit(self, now: float) -> None:
        while self.waiting and len(self.running) < MAX_RUNNING:
            request = self.waiting[0]
            tokens = request.prompt + [1] * request.generated  # recompute after preemption
            if self.manager.can_allocate(tokens, 1) is not AllocStatus.OK:
                return
            self.waiting.pop(0)
            self.manager.allocate(request.group_id, [request.group_id], tokens)
            self.manager.mark_blocks_as_computed(request.group_id)
            self.manager.access_all_blocks_in_seq(request.group_id, now)
            self.running.append(request)

    def decode(self, now: float) -> list[int]:
        """One token for every running request; returns the requests that left the GPU."""
        gone: list[int] = []
        for request in list(self.running):
            while request in self.running and not self.manager.can_append_slots(request.group_id):
                victim = self.running.pop()  # the youngest, as vLLM's recompute preemption
                self.manager.free(victim.group_id)
                self.waiting.insert(0, victim)
                gone.append(victim.group_id)
                self.figures.preempted += 1
            if request not in self.running:
                continue
            copies = self.manager.append_slots(request.group_id, [1])
            assert not copies  # nothing is forked here, so nothing is shared with a writer
            self.manager.mark_blocks_as_computed(request.group_id)
            self.manager.access_all_blocks_in_seq(request.group_id, now)
            request.generated += 1
            if request.generated >= request.output_len:
                self.running.remove(request)
                self.manager.free(request.group_id)
                gone.append(request.group_id)
                self.figures.finished += 1
        return gone

    def tell_defragmenter(self, gone: Sequence[int], tables: dict[int, list[BlockId]]) -> None:
        """``update_state`` with the tables that grew or changed their last block, and the
        finished or preempted ones."""
        changed = {
            seq: table
            for seq, table in tables.items()
            if self.told.get(seq) != (len(table), table[-1])
        }
        finished = [seq for seq in dict.fromkeys(gone) if seq in self.told and seq not in tables]
        self.defrag.update_state(changed, finished)
        for seq in finished:
            del self.told[seq]
        for seq, table in changed.items():
            self.told[seq] = (len(table), table[-1])

    def step(self, index: int) -> None:
        now = float(index)
        for _ in range(2 if self.rng.random() < 0.35 else 1 if self.rng.random() < 0.5 else 0):
            self.waiting.append(self.new_request())
        started = time.perf_counter()
        self.admit(now)
        gone = self.decode(now)
        tables = {r.group_id: self.manager.get_block_table(r.group_id) for r in self.running}
        told = time.perf_counter()
        self.tell_defragmenter(gone, tables)
        updated = time.perf_counter()
        before = self.defrag.view()  # for the figures only, outside the timed part
        asked = time.perf_counter()
        pairs = self.defrag.defragment()
        done = time.perf_counter()
        self.figures.manager_seconds += told - started
        self.figures.defrag_seconds += (updated - told) + (done - asked)
        self.figures.runs += 1
        if pairs:
            self.figures.pair_lists.append(pairs)
        used_logical = {b for table in tables.values() for b in table}
        if defrag_rule.triggered(before.config, before.used):
            after = self.defrag.view()
            minimum = defrag_rule.minimum_exchanges(before.config, before.used)
            self.figures.triggered.append((max(before.used), max(after.used), len(pairs), minimum))
            self.figures.capped += len(pairs) == before.config.max_pairs
        physical = [b for table in self.defrag.resolve_all(list(tables.values())) for b in table]
        self.figures.timeline.append(
            (index, len(used_logical), max(used_logical, default=-1), max(physical, default=-1))
        )
        self.figures.steps += 1


def accelerator() -> torch.device:
    found = torch.accelerator.current_accelerator(check_available=True)
    return torch.device("cpu") if found is None else found


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def kernel_rows(
    num_blocks: int, pair_lists: list[list[tuple[BlockId, BlockId]]]
) -> list[list[object]]:
    """The run's smallest, median and largest exchange batch, each timed on a KV store of the
    run's size beside a contiguous ``copy_`` of the bytes it moves (every listed block moves
    once; the padding repeats pairs and is not counted)."""
    if not pair_lists:
        return []
    store = KVStore(LAYERS, num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, DTYPE, accelerator())
    for cache in store.tensors():
        cache.fill_(1.0)  # touch every page before anything is timed
    by_size = sorted(pair_lists, key=len)
    picks = {"smallest": by_size[0], "median": by_size[len(by_size) // 2], "largest": by_size[-1]}
    rows: list[list[object]] = []
    for name, pairs in picks.items():
        moved = 2 * len(pairs) * store.block_bytes
        src = torch.ones(moved // DTYPE.itemsize, dtype=DTYPE, device=store.device)
        dst = torch.empty_like(src)
        kernel = partial(swap_blocks_in_place, store, pairs, DEFRAG_PAD_SIZES)
        timer = Timer([store.device])
        kernel_s, copy_s = ratio_of(kernel, partial(dst.copy_, src), timer, KERNEL_REPEATS)
        gbps = [moved / s / 1e9 for s in kernel_s]
        base = [moved / s / 1e9 for s in copy_s]
        ratio = [k / b for k, b in zip(gbps, base, strict=True)]
        rows.append([name, len(pairs), moved / 2**20, spread(gbps), spread(base), spread(ratio)])
    return rows


def tables(run: ServingRun, seconds: float) -> list[Table]:
    """The run's figure as tables (``pagedkv bench --defrag`` prints them; so does ``main``)."""
    figures = run.figures
    out: list[Table] = []
    every = max(1, len(figures.timeline) // TIMELINE_ROWS)
    timeline = Table(
        "defragmenter, a serving run's timeline: the highest used id without a defragmenter"
        " (logical) and with one (physical, after the step's defragment())",
        ["step", "blocks used", "max logical id used", "max physical id used"],
        [list(row) for row in figures.timeline[every - 1 :: every]],
        [
            f"{figures.steps} steps, {run.defrag.config.num_blocks} GPU blocks of {BLOCK_SIZE}"
            f" tokens, prefix caching, threshold {run.defrag.config.threshold}, cap"
            f" {run.defrag.config.max_pairs}; {figures.finished} requests finished,"
            f" {figures.preempted} preempted; {seconds:.1f} s; load average {load_average()}"
        ],
    )
    out.append(timeline)
    logical = [row[2] for row in figures.timeline if row[1]]
    physical = [row[3] for row in figures.timeline if row[1]]
    used = [row[1] for row in figures.timeline if row[1]]
    if not used:
        return out
    out.append(
        Table(
            "defragmenter: over every step with blocks in use",
            ["", "mean", "median", "max"],
            [
                ["blocks used", *_summary(used)],
                ["max used id, no defragmenter", *_summary(logical)],
                ["max used id, defragmented", *_summary(physical)],
            ],
        )
    )
    triggered = figures.triggered
    if triggered:
        made = sum(t[2] for t in triggered)
        minimum = sum(t[3] for t in triggered)
        per_step = 1e6 / max(1, figures.steps)
        out.append(
            Table(
                f"defragment(): {figures.runs} calls, {len(triggered)} triggered,"
                f" {figures.capped} at the cap",
                ["", "mean", "median", "max", "total"],
                [
                    ["max used id before", *_summary([t[0] for t in triggered]), "-"],
                    ["max used id after", *_summary([t[1] for t in triggered]), "-"],
                    ["exchanges", *_summary([t[2] for t in triggered]), made],
                    ["minimum exchanges", *_summary([t[3] for t in triggered]), minimum],
                ],
                [
                    f"exchanges made / minimum: {made} / {minimum}; time per step: manager and"
                    f" engine {figures.manager_seconds * per_step:.0f} µs, defragmenter"
                    f" (update_state + defragment) {figures.defrag_seconds * per_step:.0f} µs"
                ],
            )
        )
    rows_k = kernel_rows(run.defrag.config.num_blocks, figures.pair_lists)
    if rows_k:
        out.append(
            Table(
                f"swap_blocks_in_place on this run's batches, {accelerator()}: {LAYERS} layers x"
                f" (K, V), {KV_HEADS} kv heads x {HEAD_DIM}, {DTYPE}; median (min-max) of"
                f" {KERNEL_REPEATS} interleaved repetitions ({Timer([accelerator()]).clock_name});"
                f" torch {torch.__version__},"
                f" {torch.get_num_threads()} thread(s)",
                ["batch", "pairs", "MiB moved", "kernel GB/s", "copy_ GB/s", "ratio"],
                rows_k,
            )
        )
    return out


def print_table(table: Table) -> None:
    """Plain aligned text (``pagedkv bench --defrag`` prints the same tables with rich)."""
    print(plain_text(table))
    for note in table.notes:
        print(f"  {note}")
    print()


def _summary(values: Sequence[int]) -> list[object]:
    return [round(statistics.mean(values), 1), statistics.median(values), max(values)]


def at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an int >= {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its message
    return parse


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pagedkv.model_tests.bench.defrag", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--steps", type=at_least(1), default=4000)
    parser.add_argument("--blocks", type=at_least(2), default=2048)
    parser.add_argument("--threshold", type=at_least(0), default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=at_least(1),
        default=None,
        help="torch CPU threads for the kernel timings (on a loaded machine, 1 keeps every "
        "parallel region from waiting for a second thread the scheduler has not run yet)",
    )
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    run = ServingRun(args.blocks, args.threshold, args.seed)
    start = time.perf_counter()
    for index in range(args.steps):
        run.step(index)
    found = tables(run, time.perf_counter() - start)
    if args.json:
        json.dump([asdict(table) for table in found], sys.stdout)
        print()
        return
    for table in found:
        print_table(table)


if __name__ == "__main__":
    main()
