"""The kernels' bandwidth beside a plain ``copy_`` of the same bytes: a program of its own
(``python -m pagedkv.model_tests.bench.kernels``), the only part of the benchmarks that needs torch.
``pagedkv bench --kernels`` runs it as a child process and reads the JSON it prints.

Each case times the kernel and a contiguous ``copy_`` of as many bytes in turns, and keeps the
ratio of each turn: what counts is the median of those ratios (with the smallest and largest),
never the best of a few runs, since on a shared machine one lucky run says nothing. On the host
torch gets one intra-op thread (``--threads`` changes it) and the time is this process's CPU
time, so that other work on the machine shows as noise, not as a slower kernel; with an
accelerator the wall clock between two synchronisations is used.

The kernels move blocks of ``KVStore``s, whose host memory is advised for huge pages
(``optimized/host_memory.py``); the ``copy_`` runs between plain torch tensors. Huge pages are
what scattered slabs need; the contiguous ``copy_`` gains nothing from them that shows (16 MiB:
1.01 [0.95, 1.11] of itself on 4 KiB pages, one thread, median of 15).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from pagedkv.optimized.kernels import copy_blocks, swap_blocks, swap_blocks_in_place
from pagedkv.optimized.kv_store import KVStore

LAYERS, KV_HEADS, HEAD_DIM, DTYPE = 4, 8, 128, torch.float16
PAIRS = 64
BLOCKS = {16: 512, 128: 192}  # block_size -> blocks per store (256 KiB / 2 MiB per block)
QUICK_BLOCKS = {16: 160, 128: 136}


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` so that a timer measures it (no-op on the host)."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None and device.type == accelerator.type:
        torch.accelerator.synchronize(device)


def scattered_pairs(num_blocks: int, rng: random.Random) -> list[tuple[int, int]]:
    """Even sources, odd destinations, shuffled: no two pairs can coalesce into a run, and the
    pairs are disjoint, so the same list serves the exchange kernel."""
    srcs = rng.sample(range(0, num_blocks, 2), PAIRS)
    dsts = rng.sample(range(1, num_blocks, 2), PAIRS)
    return list(zip(srcs, dsts, strict=True))


def run_pairs(num_blocks: int) -> list[tuple[int, int]]:
    """One run of consecutive ids onto another: the best case for coalescing."""
    return [(i, num_blocks // 2 + i) for i in range(PAIRS)]


class Timer:
    """Seconds of a call: CPU time on the host (one thread), wall time around a sync else."""

    def __init__(self, devices: Sequence[torch.device]) -> None:
        self.devices = devices
        self.host_only = all(d.type == "cpu" for d in devices)
        self.clock_name = "process CPU time" if self.host_only else "wall time between syncs"

    def __call__(self, fn: Callable[[], object], times: int) -> float:
        clock = time.process_time if self.host_only else time.perf_counter
        for device in self.devices:
            synchronize(device)
        start = clock()
        for _ in range(times):
            fn()
        for device in self.devices:
            synchronize(device)
        return (clock() - start) / times


def ratio_of(
    kernel: Callable[[], object],
    baseline: Callable[[], object],
    timer: Timer,
    repetitions: int,
) -> tuple[list[float], list[float]]:
    """(kernel seconds, baseline seconds) of each repetition, the two timed in turns. Each
    sample repeats the call until it has run for a few milliseconds, so that the clock's
    resolution does not matter."""
    kernel()
    baseline()
    one = max(timer(kernel, 1), 1e-6)
    times = max(1, min(50, int(0.004 / one)))
    kernels, baselines = [], []
    for _ in range(repetitions):
        kernels.append(timer(kernel, times))
        baselines.append(timer(baseline, times))
    return kernels, baselines


def _contiguous_copy(nbytes: int, src: torch.device, dst: torch.device) -> Callable[[], object]:
    pin = src.type == "cpu" and dst.type != "cpu" and torch.cuda.is_available()
    numel = nbytes // DTYPE.itemsize
    a = torch.ones(numel, dtype=DTYPE, device=src, pin_memory=pin)
    b = torch.zeros(numel, dtype=DTYPE, device=dst)
    return partial(b.copy_, a, non_blocking=src != dst)


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def kernel_rows(
    device: torch.device, block_size: int, blocks: int, repetitions: int, rng: random.Random
) -> list[dict[str, Any]]:
    host = torch.device("cpu")
    store = KVStore(LAYERS, blocks, block_size, KV_HEADS, HEAD_DIM, DTYPE, device)
    peer = KVStore(LAYERS, blocks, block_size, KV_HEADS, HEAD_DIM, DTYPE, host)
    directions = [(store, peer)] if device == host else [(peer, store), (store, peer)]
    timer = Timer([device, host])
    rows: list[dict[str, Any]] = []

    def add(where: str, kernel: str, case: str, moved: int, run: Callable[[], object]) -> None:
        src, _, dst = where.partition("->")
        baseline = _contiguous_copy(moved, torch.device(src), torch.device(dst or src))
        secs, base_secs = ratio_of(run, baseline, timer, repetitions)
        ratios = [b / k for k, b in zip(secs, base_secs, strict=True)]
        rows.append(
            {
                "device": where,
                "block_size": block_size,
                "kernel": kernel,
                "pairs": case,
                "mib": moved / 2**20,
                "kernel_gbps": moved / statistics.median(secs) / 1e9,
                "copy_gbps": moved / statistics.median(base_secs) / 1e9,
                "ratio": spread(ratios),
            }
        )

    for case, pairs in (
        ("64 scattered", scattered_pairs(blocks, rng)),
        ("64 in one run", run_pairs(blocks)),
    ):
        moved = len(pairs) * store.block_bytes
        here = str(store.device)
        add(here, "copy_blocks", case, moved, partial(copy_blocks, store, pairs))
        # An exchange moves every listed block twice, once each way.
        add(
            here,
            "swap_blocks_in_place",
            case,
            2 * moved,
            partial(swap_blocks_in_place, store, pairs),
        )
        for src, dst in directions:
            where = f"{src.device}->{dst.device}"
            add(where, "swap_blocks", case, moved, partial(swap_blocks, src, dst, pairs))
    return rows


def measure(repetitions: int, threads: int, quick: bool) -> dict[str, Any]:
    torch.set_num_threads(threads)
    devices = [torch.device("cpu")]
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None:
        devices.append(torch.device(accelerator.type, torch.accelerator.current_device_index()))
    rng = random.Random(0)
    rows: list[dict[str, Any]] = []
    for device in devices:
        for block_size, blocks in (QUICK_BLOCKS if quick else BLOCKS).items():
            rows.extend(kernel_rows(device, block_size, blocks, repetitions, rng))
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "accelerator": None if accelerator is None else accelerator.type,
        "layout": f"{LAYERS} layers x (K, V), {KV_HEADS} kv heads x {HEAD_DIM}, {DTYPE}",
        "timer": "process CPU time" if len(devices) == 1 else "wall time between syncs",
        "repetitions": repetitions,
        "load_average": os.getloadavg(),
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedkv.model_tests.bench.kernels")
    parser.add_argument("--reps", type=int, default=15, help="repetitions per case (15)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    parser.add_argument("--quick", action="store_true", help="small stores, for a smoke run")
    args = parser.parse_args(argv)
    json.dump(measure(max(1, args.reps), max(1, args.threads), args.quick), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
