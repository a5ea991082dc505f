"""How the optimized manager's time per operation grows with the pool, judged against a plain
dict-and-list loop over the same calls (``control``): the memory hierarchy alone makes the
loop slower on a large pool, and a manager may grow no faster than that.

For each pool size the workload keeps its shape (requests, concurrency and CPU blocks grow with
the pool, so it is as full and as contended) and the stream is cut after a number of calls, the
same for every size: enough to fill the largest pool and run it for a few steps.
"""

from __future__ import annotations

from typing import Any

from pagedkv.model_tests.bench import replay
from pagedkv.model_tests.bench.control import ControlLoop
from pagedkv.model_tests.bench.replay import COLLECTOR
from pagedkv.model_tests.bench.report import Section, Spread, Table, load_average
from pagedkv.model_tests.bench.sections import Context, workload_spec
from pagedkv.model_tests.bench.workload import build
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager

QUICK_SIZES = (128, 512)


def scaling_section(context: Context) -> Section:
    options = context.options
    if not options.scaling:
        return Section("scaling")
    sizes = QUICK_SIZES if options.quick else options.scaling
    budget = 20_000 if options.quick else options.scaling_calls
    base = workload_spec(options)
    passes = min(3, options.repetitions)
    found: dict[int, dict[str, dict[str, replay.OpTime]]] = {}
    described: dict[int, str] = {}
    for size in sizes:
        workload = build(base.scaled(size, max_calls=budget))
        described[size] = f"{len(workload.calls)} calls, {workload.totals.steps} steps"
        found[size] = {
            name: replay.per_operation(
                factory, workload.config, workload.calls, context.overhead_ns, passes
            )
            for name, factory in (
                ("optimized", OptimizedBlockSpaceManager),
                ("control", ControlLoop),
            )
        }
        del workload
    first, last = sizes[0], sizes[-1]
    table = Table(
        f"growth with the pool: µs per call, {first} to {last} GPU blocks, median [min, max]"
        f" of {passes} pass(es) (load average {load_average()})",
        [
            "operation",
            *[f"{size} blocks" for size in sizes],
            "growth",
            "control growth",
            "no worse",
        ],
    )
    ops = sorted(
        found[last]["optimized"],
        key=lambda op: -found[last]["optimized"][op].total_s,
    )
    data: dict[str, Any] = {"sizes": list(sizes), "streams": described, "operations": {}}
    for op in ops:
        mine = [_mean(found[size]["optimized"], op) for size in sizes]
        control = [_mean(found[size]["control"], op) for size in sizes]
        growth = mine[-1] / mine[0] if mine[0] else float("nan")
        control_growth = control[-1] / control[0] if control[0] else float("nan")
        spreads = [_spread(found[size]["optimized"], op) for size in sizes]
        table.rows.append(
            [op, *spreads, growth, control_growth, "yes" if growth <= control_growth else "NO"]
        )
        data["operations"][op] = {
            "optimized_us": mine,
            "control_us": control,
            "growth": growth,
            "control_growth": control_growth,
        }
    weights = {op: t.calls for op, t in found[first]["optimized"].items() if op != COLLECTOR}
    for label, key, collector in (
        ("", "every_call", False),
        (" + collector", "with_collector", True),
    ):
        mine_all = [_overall(found[size]["optimized"], weights, collector) for size in sizes]
        control_all = [_overall(found[size]["control"], weights, collector) for size in sizes]
        growth = mine_all[-1] / mine_all[0]
        control_growth = control_all[-1] / control_all[0]
        table.rows.append(
            [
                f"every call ({first}-block mix){label}",
                *mine_all,
                growth,
                control_growth,
                "yes" if growth <= control_growth else "NO",
            ]
        )
        table.rows.append([f"  control{label}", *control_all, control_growth, "", ""])
        data[key] = {
            "optimized_us": mine_all,
            "control_us": control_all,
            "growth": growth,
            "control_growth": control_growth,
        }
    table.notes.append("growth, control growth and the every-call rows are of the medians")
    table.notes.append(
        f"each operation's time leaves out the collector's pauses; the {COLLECTOR} row is their"
        " time per call of each stream (a full collection walks every live object, so it grows"
        " with what the manager keeps), counted in the '+ collector' rows"
    )
    table.notes.append(
        "can_allocate validates a prompt the first time it sees it: the larger streams are"
        " cut during admission, where most prompts are new"
    )
    table.notes.append(
        "growth = µs at the largest pool / µs at the smallest; streams: "
        + "; ".join(f"{size}: {text}" for size, text in described.items())
    )
    context.facts["scaling"] = data
    return Section("scaling", [table], data)


def _spread(timings: dict[str, replay.OpTime], op: str) -> Spread | float:
    timing = timings.get(op)
    return timing.spread if timing is not None else float("nan")


def _mean(timings: dict[str, replay.OpTime], op: str) -> float:
    timing = timings.get(op)
    return timing.mean_us if timing is not None else float("nan")


def _overall(
    timings: dict[str, replay.OpTime], weights: dict[str, int], collector: bool = False
) -> float:
    """µs per call for one mix of operations at every size (the smallest pool's: the larger
    streams are cut early, so admission weighs more in them); with ``collector``, plus the
    collector's time per call of the stream."""
    used = {op: n for op, n in weights.items() if op in timings}
    mean = sum(timings[op].mean_us * n for op, n in used.items()) / sum(used.values())
    return mean + (timings[COLLECTOR].mean_us if collector and COLLECTOR in timings else 0.0)
