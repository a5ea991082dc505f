"""The plot of a ``pagedkv bench`` JSON file: ``python -m pagedkv.model_tests.bench.plot BENCH.json
OUT.png``. A program of its own because matplotlib is an optional dependency (the ``bench``
extra) that nothing else imports.

One panel per figure the file has data for (``PANELS``, in order; none is drawn empty): each
implementation's µs per operation, the end-to-end time of each implementation over the optimized
manager's on the same calls, the request level's (vLLM 0.33.0's ``KVCacheManager`` over pagedkv's),
the manager level's against vLLM 0.6.3 driven natively (end to end and per operation), µs per call
against the pool size beside the control loop, and each kernel's share of a plain ``copy_``'s
bandwidth. Every bar is a median with a whisker from the smallest to the largest repetition; a
ratio panel has its line at 1 (as fast as the manager it is measured against).
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FormatStrFormatter, NullLocator

Draw = Callable[[Axes], None]
Panel = Callable[[dict[str, Any]], Draw | None]
"""From the bench's document, a function drawing the panel, or None where it has no data."""

POOL_YARDSTICK = "vLLM v1 BlockPool"
POOL_HEADLINE = "pagedkv public API"
"""The pool section's callers by name (``pool.py``): the one every other is measured against,
and pagedkv's headline one, whose per-operation ratios are drawn."""

COLLECTOR = "(garbage collector)"
"""The per-operation table's row for the collector's pauses: not an operation."""


def short(label: str, width: int = 30) -> str:
    """A label for an axis: a factory's name without its module, wrapped."""
    name, bracket, rest = label.partition(" [")
    if ":" in name:
        name = name.rsplit(":", 1)[1]
    return textwrap.fill(name + bracket + rest, width)


def _whiskers(spreads: Sequence[dict[str, float]]) -> list[list[float]]:
    return [[s["median"] - s["min"] for s in spreads], [s["max"] - s["median"] for s in spreads]]


def operations_panel(document: dict[str, Any]) -> Draw | None:
    """Each implementation's mean µs per call of its ten costliest operations (log scale)."""
    found: dict[str, dict[str, Any]] = (document.get("operations") or {}).get(
        "implementations"
    ) or {}
    names = [name for name, ops in found.items() if ops]
    if not names:
        return None

    def draw(axes: Axes) -> None:
        first = found[names[0]]
        ops = sorted((op for op in first if op != COLLECTOR), key=lambda op: -first[op]["mean_us"])
        ops = ops[:10]
        height = 0.8 / len(names)
        for index, name in enumerate(names):
            shown = [op for op in ops if op in found[name] and found[name][op]["mean_us"] > 0]
            spreads = [
                {
                    "median": found[name][op]["mean_us"],
                    "min": found[name][op].get("min_us", found[name][op]["mean_us"]),
                    "max": found[name][op].get("max_us", found[name][op]["mean_us"]),
                }
                for op in shown
            ]
            axes.barh(
                [ops.index(op) + index * height for op in shown],
                [s["median"] for s in spreads],
                height,
                xerr=_whiskers(spreads),
                capsize=2,
                label=short(name, 60),
            )
        axes.set_yticks([i + 0.4 - height / 2 for i in range(len(ops))], ops, fontsize=8)
        axes.invert_yaxis()
        axes.set_xscale("log")
        axes.set_xlabel("µs per call (mean over the stream; median, min and max of passes)")
        axes.set_title("per operation, each implementation on its stream", fontsize=10)
        axes.legend(fontsize=7, loc="lower right")

    return draw


def ratio_draw(
    labels: list[str], spreads: list[dict[str, float]], title: str, xlabel: str
) -> Draw | None:
    """Horizontal bars of ratios, each labelled with its median, and the line at 1."""
    if not labels:
        return None

    def draw(axes: Axes) -> None:
        rows = range(len(labels))
        medians = [s["median"] for s in spreads]
        axes.barh(rows, medians, 0.5, xerr=_whiskers(spreads), capsize=4, color="tab:blue")
        axes.axvline(1.0, color="black", linewidth=1, linestyle="--")
        axes.set_yticks(rows, [short(label) for label in labels], fontsize=8)
        axes.set_ylim(max(len(labels), 3) - 0.5, -0.5)
        if max(s["max"] for s in spreads) / max(min(s["min"] for s in spreads), 1e-9) > 20:
            axes.set_xscale("log")
        for row, spread in zip(rows, spreads, strict=True):
            axes.annotate(
                f" {spread['median']:.2f}× [{spread['min']:.2f}, {spread['max']:.2f}]",
                (spread["max"], row),
                va="center",
                fontsize=8,
            )
        axes.margins(x=0.35)
        axes.set_xlabel(xlabel)
        axes.set_title(textwrap.fill(title, 60), fontsize=10)

    return draw


def end_to_end_panel(document: dict[str, Any]) -> Draw | None:
    found: dict[str, dict[str, Any]] = document.get("end_to_end") or {}
    labels = [name for name, data in found.items() if "ratio_to_optimized" in data]
    return ratio_draw(
        labels,
        [found[name]["ratio_to_optimized"] for name in labels],
        "manager level, end to end: each against the optimized manager on the same calls",
        "CPU time / the optimized manager's (right of the line: slower than pagedkv)",
    )


def requests_panel(document: dict[str, Any]) -> Draw | None:
    managers: dict[str, dict[str, Any]] = (document.get("requests") or {}).get("managers") or {}
    labels = list(managers)[1:]  # the first is pagedkv's own, the measure of the others
    return ratio_draw(
        labels,
        [managers[name]["ratio_to_pagedkv"] for name in labels],
        "request level, end to end: against pagedkv's optimized request manager",
        "CPU time / pagedkv's (right of the line: slower than pagedkv)",
    )


NATIVE_OPERATIONS = (
    "can_allocate",
    "allocate",
    "append_slots",
    "free",
    "can_append_slots",
    "get_block_table",
    "access_all_blocks_in_seq",
    "get_common_computed_block_ids",
    "mark_blocks_as_computed",
)
"""Operations drawn per engine in the native panel (where it has them): admission, decoding,
freeing, and the scheduler's per-step questions."""


def native_panel(document: dict[str, Any]) -> Draw | None:
    """The manager level against each engine driven natively (``manager_sections.py``): end to
    end, then per operation (``NATIVE_OPERATIONS``)."""
    labels: list[str] = []
    spreads: list[dict[str, float]] = []
    for data in (document.get("native") or {}).values():
        managers: dict[str, dict[str, Any]] = data.get("managers") or {}
        for name in list(managers)[1:]:  # the first is pagedkv's own, the measure of the others
            labels.append(f"{name}, end to end")
            spreads.append(managers[name]["ratio_to_pagedkv"])
        ops: dict[str, dict[str, Any]] = data.get("operations") or {}
        for op in (op for op in NATIVE_OPERATIONS if "ratio_to_pagedkv" in ops.get(op, {})):
            labels.append(op)
            spreads.append(ops[op]["ratio_to_pagedkv"])
            if "ratio_with_engine_steps" in ops[op]:
                labels.append(f"{op} with its engine steps")
                spreads.append(ops[op]["ratio_with_engine_steps"])
    return ratio_draw(
        labels,
        spreads,
        "manager level: each engine driven as its scheduler drives it, against pagedkv's"
        " optimized manager on the engine's stream",
        "the engine's CPU time / pagedkv's (right of the line: slower than pagedkv)",
    )


def pool_panel(document: dict[str, Any]) -> Draw | None:
    """The pool beside vLLM v1's ``BlockPool``: end to end for each of pagedkv's callers, then
    per operation for the public API (the headline caller)."""
    pool = document.get("pool") or {}
    whole: dict[str, dict[str, Any]] = pool.get("end_to_end") or {}
    per_op: dict[str, dict[str, Any]] = pool.get("per_operation_vllm_over_this") or {}
    labels: list[str] = []
    spreads: list[dict[str, float]] = []
    for name, data in whole.items():
        if name != POOL_YARDSTICK:
            labels.append(f"{name}, end to end")
            spreads.append(data["vllm_over_this"])
    for op, by_caller in per_op.items():
        if POOL_HEADLINE in by_caller:
            labels.append(f"{POOL_HEADLINE}, {op}")
            spreads.append(by_caller[POOL_HEADLINE])
    return ratio_draw(
        labels,
        spreads,
        "pool level: vLLM 0.33.0's BlockPool against pagedkv's pool on the serving stream",
        "vLLM v1's CPU time / pagedkv's (right of the line: slower than pagedkv)",
    )


def scaling_panel(document: dict[str, Any]) -> Draw | None:
    scaling = document.get("scaling") or {}
    sizes: Sequence[int] = scaling.get("sizes", [])
    every = scaling.get("every_call")
    if not sizes or every is None:
        return None

    def draw(axes: Axes) -> None:
        axes.plot(sizes, every["optimized_us"], "o-", label="optimized, every call")
        axes.plot(sizes, every["control_us"], "s--", label="control loop, every call")
        collected = scaling.get("with_collector")
        if collected is not None:
            axes.plot(sizes, collected["optimized_us"], "^:", label="optimized, + collector")
            axes.plot(sizes, collected["control_us"], "v:", label="control loop, + collector")
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xticks(sizes, [f"{size:,}" for size in sizes], fontsize=8)
        axes.xaxis.set_minor_locator(NullLocator())
        for formatter in (axes.yaxis.set_major_formatter, axes.yaxis.set_minor_formatter):
            formatter(FormatStrFormatter("%g"))
        axes.set_xlabel("GPU blocks")
        axes.set_ylabel("µs per call (the smallest pool's mix)")
        axes.set_title("growth with the pool, beside a plain dict-and-list loop", fontsize=10)
        axes.legend(fontsize=7)

    return draw


def kernels_panel(document: dict[str, Any]) -> Draw | None:
    rows = (document.get("kernels") or {}).get("rows", [])
    if not rows:
        return None

    def draw(axes: Axes) -> None:
        labels = [f"{r['kernel']} {r['device']} bs{r['block_size']} ×{r['pairs']}" for r in rows]
        spreads = [r["ratio"] for r in rows]
        axes.bar(range(len(rows)), [s["median"] for s in spreads], yerr=_whiskers(spreads))
        axes.set_xticks(range(len(rows)), labels, fontsize=6, rotation=60, ha="right")
        axes.axhline(1.0, color="black", linewidth=1, linestyle="--")
        axes.set_ylabel("bandwidth / a plain copy_'s")
        axes.set_title("kernels: bandwidth against a plain copy_ of the same bytes", fontsize=10)

    return draw


PANELS: list[Panel] = [
    operations_panel,
    end_to_end_panel,
    requests_panel,
    native_panel,
    pool_panel,
    scaling_panel,
    kernels_panel,
]


def draw(document: dict[str, Any], out: Path) -> int:
    """Draw the panels there are data for; returns how many."""
    found = [made for panel in PANELS if (made := panel(document)) is not None]
    columns = 1 if len(found) == 1 else 2
    lines = max(1, math.ceil(len(found) / columns))
    figure = plt.figure(figsize=(8 * columns, 5.5 * lines))
    grid = figure.add_gridspec(lines, columns)
    for index, made in enumerate(found):
        line, column = divmod(index, columns)
        last_alone = index == len(found) - 1 and column == 0 and columns == 2
        made(figure.add_subplot(grid[line, :] if last_alone else grid[line, column]))
    workload = document.get("workload") or {}
    figure.suptitle(
        f"pagedkv bench: {workload.get('calls', '?')} calls,"
        f" load average at end {document.get('load_average_at_end', '?')}"
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return len(found)


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
