"""Benchmarks, run as ``python -m optimized.bench`` (``make bench``): they print, never assert.

``main`` runs one function per section; a section builds its rows and hands them to
``print_table``. Timings are the best of several repetitions after a warm-up, measured with
``time.perf_counter`` around a device synchronisation, and every kernel figure is printed beside a
plain contiguous ``copy_`` of the same number of bytes measured in the same run, because absolute
GB/s mean little on a shared machine while the ratio to what the memory system gives a single
large copy does.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial

import torch

from optimized.kernels import copy_blocks, swap_blocks, swap_blocks_in_place
from optimized.kv_store import KVStore

Row = Sequence[object]
REPEATS = 5
BUDGET_S = 1.5

# --- shared helpers (for every section) ---------------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` so that a timer measures it (no-op on the host)."""
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is not None and device.type == accelerator.type:
        torch.accelerator.synchronize(device)


def best_times(
    fns: Sequence[Callable[[], object]],
    devices: Sequence[torch.device],
    *,
    repeats: int = REPEATS,
    warmup: int = 1,
    budget: float = BUDGET_S,
) -> list[float]:
    """Seconds of the fastest of ``repeats`` calls of each function: the least disturbed one.

    The functions take turns within each repetition, so that a kernel and its baseline see the
    same conditions even when other work on the machine comes and goes. Past ``budget`` seconds
    (and at least two rounds) it stops early, so that an overloaded machine cannot stretch the
    whole bench without bound.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    best = [float("inf")] * len(fns)
    began = time.perf_counter()
    for round_ in range(repeats):
        if round_ >= 2 and time.perf_counter() - began > budget:
            break
        for i, fn in enumerate(fns):
            for device in devices:
                synchronize(device)
            start = time.perf_counter()
            fn()
            for device in devices:
                synchronize(device)
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _align(cells: Sequence[str], widths: Sequence[int], numeric: Sequence[bool]) -> str:
    return "  ".join(
        c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)
    )


def print_table(title: str, columns: Sequence[str], rows: Sequence[Row]) -> None:
    """A rich table on a terminal, aligned plain text otherwise (logs, CI, pipes)."""
    text = [[f"{cell:.2f}" if isinstance(cell, float) else str(cell) for cell in r] for r in rows]
    numeric = [all(isinstance(r[i], int | float) for r in rows) for i in range(len(columns))]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for name, num in zip(columns, numeric, strict=True):
            table.add_column(name, justify="right" if num else "left")
        for cells in text:
            table.add_row(*cells)
        Console().print(table)
        return
    widths = [max([len(name)] + [len(r[i]) for r in text]) for i, name in enumerate(columns)]
    print(title)
    print(_align(columns, widths, numeric))
    print(_align(["-" * w for w in widths], widths, numeric))
    for cells in text:
        print(_align(cells, widths, numeric))
    print()


# --- kernels ------------------------------------------------------------------------------------

LAYERS, KV_HEADS, HEAD_DIM, DTYPE = 4, 8, 128, torch.float16
PAIRS = 64
BLOCKS = {16: 512, 128: 192}  # block_size -> blocks per store (256 KiB / 2 MiB per block)


def _scattered_pairs(num_blocks: int, rng: random.Random) -> list[tuple[int, int]]:
    """Even sources, odd destinations, shuffled: no two pairs can coalesce into a run, and the
    pairs are disjoint, so the same list serves the exchange kernel."""
    srcs = rng.sample(range(0, num_blocks, 2), PAIRS)
    dsts = rng.sample(range(1, num_blocks, 2), PAIRS)
    return list(zip(srcs, dsts, strict=True))


def _run_pairs(num_blocks: int) -> list[tuple[int, int]]:
    """One run of consecutive ids onto another: the best case for coalescing."""
    return [(i, num_blocks // 2 + i) for i in range(PAIRS)]


class _Baseline:
    """Contiguous buffers for the plain ``dst.copy_(src)`` of each size, kept for reuse."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, torch.device, torch.device], Callable[[], object]] = {}

    def copy(self, nbytes: int, src: torch.device, dst: torch.device) -> Callable[[], object]:
        key = (nbytes, src, dst)
        if key not in self._buffers:
            pin = src.type == "cpu" and dst.type != "cpu" and torch.cuda.is_available()
            numel = nbytes // DTYPE.itemsize
            a = torch.ones(numel, dtype=DTYPE, device=src, pin_memory=pin)
            b = torch.zeros(numel, dtype=DTYPE, device=dst)
            self._buffers[key] = partial(b.copy_, a, non_blocking=src != dst)
        return self._buffers[key]


def _kernel_rows(device: torch.device, block_size: int, rng: random.Random) -> list[Row]:
    baseline = _Baseline()  # freed with the stores when this block size is done
    host = torch.device("cpu")
    num_blocks = BLOCKS[block_size]
    store = KVStore(LAYERS, num_blocks, block_size, KV_HEADS, HEAD_DIM, DTYPE, device)
    # The other end of a swap: the host for a GPU store, a second host store for the host.
    peer = KVStore(LAYERS, num_blocks, block_size, KV_HEADS, HEAD_DIM, DTYPE, host)
    directions = [(store, peer)] if device == host else [(peer, store), (store, peer)]
    rows: list[Row] = []

    def add(
        where: str,
        kernel: str,
        case: str,
        moved: int,
        run: Callable[[], object],
        baseline_devices: tuple[torch.device, torch.device],
    ) -> None:
        base_copy = baseline.copy(moved, *baseline_devices)
        secs, base_secs = best_times([run, base_copy], [device, host])
        gbps, base = moved / secs / 1e9, moved / base_secs / 1e9
        rows.append([where, block_size, kernel, case, moved / 2**20, gbps, base, gbps / base])

    for case, pairs in (
        ("64 scattered", _scattered_pairs(num_blocks, rng)),
        ("64 in one run", _run_pairs(num_blocks)),
    ):
        moved = len(pairs) * store.block_bytes
        local = (device, device)
        add(str(device), "copy_blocks", case, moved, partial(copy_blocks, store, pairs), local)
        # An exchange moves every listed block twice, once each way.
        exchange = partial(swap_blocks_in_place, store, pairs)
        add(str(device), "swap_blocks_in_place", case, 2 * moved, exchange, local)
        for src, dst in directions:
            swap = partial(swap_blocks, src, dst, pairs)
            where = f"{src.device}->{dst.device}"
            add(where, "swap_blocks", case, moved, swap, (src.device, dst.device))
    return rows


def bench_kernels() -> None:
    """GB/s of each block kernel beside a contiguous ``copy_`` of the same bytes."""
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    rng = random.Random(0)
    rows: list[Row] = []
    for device in devices:
        for block_size in BLOCKS:
            rows.extend(_kernel_rows(device, block_size, rng))
    print_table(
        f"block kernels: {LAYERS} layers x (K, V), {KV_HEADS} kv heads x {HEAD_DIM}, {DTYPE}\n"
        f"GB/s = 1e9 bytes moved / s (an exchange moves each block twice), best of up to "
        f"{REPEATS}; ratio = kernel / one contiguous copy_ of the same bytes",
        ["device", "block", "kernel", "pairs", "MiB", "kernel GB/s", "copy_ GB/s", "ratio"],
        rows,
    )


# --- entry point --------------------------------------------------------------------------------


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"CUDA {'available' if torch.cuda.is_available() else 'not available'}, "
        f"load average {os.getloadavg()[0]:.1f} (other work on the machine skews every figure)"
    )
    print()
    bench_kernels()


if __name__ == "__main__":
    main()
