"""The plot of a ``pagedkv bench`` JSON file: ``python -m pagedkv.model_tests.bench.plot BENCH.json
OUT.png``. A program of its own because matplotlib is an optional dependency (the ``bench``
extra) that nothing else imports.

Four panels: per-operation µs of each implementation (log scale), the end-to-end ratio to the
optimized manager with its spread, µs per call against the pool size beside the control loop,
and each kernel's share of plain-copy bandwidth.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes


def operations_panel(axes: Axes, operations: dict[str, dict[str, Any]]) -> None:
    names = list(operations)
    if not names:
        axes.set_visible(False)
        return
    ops = sorted(operations[names[0]], key=lambda op: -operations[names[0]][op]["mean_us"])[:10]
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        values = [operations[name].get(op, {}).get("mean_us", 0) or 1e-3 for op in ops]
        axes.barh([i + index * width for i in range(len(ops))], values, width, label=name)
    axes.set_yticks([i + 0.4 - width / 2 for i in range(len(ops))], ops, fontsize=7)
    axes.set_xscale("log")
    axes.set_xlabel("µs per call (mean over the stream)")
    axes.set_title("per operation")
    axes.legend(fontsize=7)


def end_to_end_panel(axes: Axes, end_to_end: dict[str, dict[str, Any]]) -> None:
    names = [n for n, d in end_to_end.items() if "ratio_to_optimized" in d]
    if not names:
        axes.set_visible(False)
        return
    medians = [end_to_end[n]["ratio_to_optimized"]["median"] for n in names]
    low = [
        m - end_to_end[n]["ratio_to_optimized"]["min"] for n, m in zip(names, medians, strict=True)
    ]
    high = [
        end_to_end[n]["ratio_to_optimized"]["max"] - m for n, m in zip(names, medians, strict=True)
    ]
    axes.bar(names, medians, yerr=[low, high], capsize=4)
    axes.set_yscale("log")
    axes.set_ylabel("time / optimized (same calls)")
    axes.set_title("end to end: median, min and max of repetitions")
    for label in axes.get_xticklabels():
        label.set_fontsize(7)


def scaling_panel(axes: Axes, scaling: dict[str, Any]) -> None:
    sizes: Sequence[int] = scaling.get("sizes", [])
    every = scaling.get("every_call")
    if not sizes or every is None:
        axes.set_visible(False)
        return
    axes.plot(sizes, every["optimized_us"], "o-", label="optimized, every call")
    axes.plot(sizes, every["control_us"], "s--", label="control loop, every call")
    for op, values in list(scaling.get("operations", {}).items())[:4]:
        axes.plot(sizes, values["optimized_us"], ".:", label=op, alpha=0.7)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("GPU blocks")
    axes.set_ylabel("µs per call")
    axes.set_title("growth with the pool")
    axes.legend(fontsize=6)


def kernels_panel(axes: Axes, kernels: dict[str, Any]) -> None:
    rows = kernels.get("rows", [])
    if not rows:
        axes.set_visible(False)
        return
    labels = [f"{r['kernel']}\n{r['device']} bs{r['block_size']}\n{r['pairs']}" for r in rows]
    medians = [r["ratio"]["median"] for r in rows]
    low = [m - r["ratio"]["min"] for r, m in zip(rows, medians, strict=True)]
    high = [r["ratio"]["max"] - m for r, m in zip(rows, medians, strict=True)]
    axes.bar(range(len(rows)), medians, yerr=[low, high], capsize=3)
    axes.set_xticks(range(len(rows)), labels, fontsize=5, rotation=90)
    axes.axhline(1.0, color="grey", linewidth=0.5)
    axes.set_ylabel("share of plain copy_ bandwidth")
    axes.set_title("kernels")


def draw(document: dict[str, Any], out: Path) -> None:
    figure, grid = plt.subplots(2, 2, figsize=(14, 10))
    operations_panel(grid[0][0], document.get("operations") or {})
    end_to_end_panel(grid[0][1], document.get("end_to_end") or {})
    scaling_panel(grid[1][0], document.get("scaling") or {})
    kernels_panel(grid[1][1], document.get("kernels") or {})
    workload = document.get("workload") or {}
    figure.suptitle(
        f"pagedkv bench: {workload.get('calls', '?')} calls,"
        f" load average at end {document.get('load_average_at_end', '?')}"
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m pagedkv.model_tests.bench.plot BENCH.json OUT.png", file=sys.stderr)
        return 2
    document = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    draw(document, Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
