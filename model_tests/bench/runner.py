"""``pagedkv bench``: run the sections in order, hand each to the caller to print as it is done,
then write the JSON file and the plot.

``SECTIONS`` is the list a new section joins: a function from the ``Context`` (options, the
streams, what earlier sections found) to a ``Section``, which prints it as it comes back and
keeps its ``data`` in the JSON file under its name (the plot reads that file: a section with a
figure worth drawing adds a panel to ``plot.PANELS``). The kernels and the plot need torch and
matplotlib, which the rest does not: each runs as a program of its own (``python -m
pagedkv.model_tests.bench.kernels``, ``python -m pagedkv.model_tests.bench.plot``) when asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pagedkv.model_tests.bench import baseline, pool
from pagedkv.model_tests.bench.manager_sections import native_section
from pagedkv.model_tests.bench.report import Section, Spread, Table, load_average
from pagedkv.model_tests.bench.request_sections import requests_section
from pagedkv.model_tests.bench.scaling import scaling_section
from pagedkv.model_tests.bench.sections import (
    Context,
    Options,
    Target,
    check_section,
    end_to_end_section,
    machine_section,
    memory_section,
    operations_section,
    queries_section,
    workload_section,
)
from pagedkv.model_tests.bench.streams import PAGEDKV
from pagedkv.model_tests.oracle import targets, trace
from pagedkv.model_tests.oracle.guard import guard


class BenchError(Exception):
    """Bad input to the benchmark (a target that cannot be loaded, a baseline that cannot be
    exported): one line for the user."""


TORCH_MISSING = "No module named 'torch'"
"""What a child's last line of stderr says when torch is not installed (``ModuleNotFoundError``)."""


def torch_is_missing(reason: str) -> bool:
    """Whether a child failed for want of torch: only then is installing the ``kv`` extra the
    advice (a CUDA build of torch without a driver fails otherwise, and is already installed)."""
    return TORCH_MISSING in reason


def kernels_section(context: Context) -> Section:
    """The kernel benchmark, run as a child process (it imports torch)."""
    section = Section("kernels")
    if not context.options.kernels:
        return section
    argv = [sys.executable, "-m", "pagedkv.model_tests.bench.kernels"]
    argv += ["--reps", "2", "--quick"] if context.options.quick else ["--reps", "15"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["failed"])[-1]
        table = Table("block kernels", ["skipped"], [[reason]])
        if torch_is_missing(reason):
            table.notes.append("the kernels need torch: pip install 'pagedkv[kv]'")
        section.tables.append(table)
        section.data = {"error": reason}
        return section
    data: dict[str, Any] = json.loads(done.stdout)
    table = Table(
        f"block kernels: {data['layout']}; torch {data['torch']}, {data['threads']} thread(s),"
        f" {data['timer']}, load average {data['load_average'][0]:.2f}",
        [
            "device",
            "block",
            "kernel",
            "pairs",
            "MiB",
            "kernel GB/s",
            "copy_ GB/s",
            "ratio",
        ],
    )
    for row in data["rows"]:
        ratio = row["ratio"]
        table.rows.append(
            [
                row["device"],
                row["block_size"],
                row["kernel"],
                row["pairs"],
                row["mib"],
                row["kernel_gbps"],
                row["copy_gbps"],
                Spread(ratio["median"], ratio["min"], ratio["max"], ratio.get("n", 0)),
            ]
        )
    table.notes.append(
        "ratio = the kernel's bandwidth / a contiguous copy_ of the same bytes, per repetition"
        " (the two timed in turns), median [min, max]; GB/s: medians; an exchange moves each"
        " block twice"
    )
    section.tables.append(table)
    section.data = data
    context.facts["kernels"] = data["rows"]
    return section


def defrag_section(context: Context) -> Section:
    """The defragmenter's figure (``model_tests/bench/defrag.py``), run as a child process."""
    section = Section("defragmenter")
    if not context.options.defrag:
        return section
    argv = [sys.executable, "-m", "pagedkv.model_tests.bench.defrag", "--json", "--threads", "1"]
    argv += ["--steps", "200", "--blocks", "256"] if context.options.quick else []
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["failed"])[-1]
        table = Table("defragmenter", ["skipped"], [[reason]])
        if torch_is_missing(reason):
            table.notes.append("the defragmenter's kernel needs torch: pip install 'pagedkv[kv]'")
        section.tables.append(table)
        section.data = {"error": reason}
        return section
    found: list[dict[str, Any]] = json.loads(done.stdout)
    section.tables = [Table(**table) for table in found]
    section.data = {"tables": found}
    return section


SECTIONS: list[Callable[[Context], Section]] = [
    machine_section,
    workload_section,
    check_section,
    operations_section,
    end_to_end_section,
    memory_section,
    queries_section,
    pool.section,
    requests_section,
    native_section,
    scaling_section,
    kernels_section,
    defrag_section,
]


def resolve_targets(
    specs: list[str],
    revision: str | None,
    reference_calls: int | None,
    timeout: float | None = None,
    profile: str = PAGEDKV,
) -> list[Target]:
    """The implementations to compare with the optimized manager: an earlier commit's optimized
    manager (``revision``), the reference (unless ``reference_calls`` is None) and every
    ``--target``, held to ``profile``; ``timeout`` for each call into them (None: the
    environment's)."""
    found: list[Target] = []
    if revision is not None:
        try:
            root, spec = baseline.export(revision)
        except baseline.BaselineError as error:
            raise BenchError(f"--baseline {revision}: {error}") from None
        sys.path.insert(0, str(root))
        found.append(Target(f"optimized@{revision}", _load(spec, timeout)))
    if reference_calls is not None:
        found.append(Target("reference", _load("reference", timeout), reference_calls or None))
    for spec in specs:
        found.append(Target(spec, _load(spec, timeout), profile=profile))
    return found


def _load(spec: str, timeout: float | None) -> Any:
    """The factory, checked. A Python factory is called directly, as the optimized manager is:
    through the oracle's guard (``model_tests/oracle/guard.py``) every call would pay for its
    deadline, about as much as many operations cost, so every ratio would measure the guard;
    the replays keep the same per-call timeout at no cost per call instead
    (``model_tests/oracle/loop_deadline.py``). An ``exec:`` program answers from its own
    process, under its own timeout, whatever the measurement."""
    try:
        if spec.startswith("exec:"):
            return targets.check(spec, "manager", timeout)
        factory = targets.load(spec, "manager")
        targets.build(guard(factory, timeout), "manager", spec)  # a hanging factory times out
        return factory
    except targets.TargetError as error:
        raise BenchError(str(error)) from None


def run(
    options: Options,
    emit: Callable[[Section], None],
    json_out: Path | None = None,
    plot_out: Path | None = None,
) -> list[Section]:
    context = Context(options)
    done: list[Section] = []
    for section in SECTIONS:
        result = section(context)
        if result.tables:
            emit(result)
        done.append(result)
    document: dict[str, Any] = {s.name: s.data for s in done}
    document["load_average_at_end"] = load_average()
    if json_out is not None:
        trace.write_text(json_out, json.dumps(document, indent=1, default=str))
    if plot_out is not None:
        emit(_plot(document, json_out, plot_out))
    return done


def _plot(document: dict[str, Any], json_out: Path | None, plot_out: Path) -> Section:
    """The plot, drawn by a child process (matplotlib is the ``bench`` extra)."""
    with tempfile.TemporaryDirectory() as scratch:
        source = json_out
        if source is None:
            source = Path(scratch) / "bench.json"
            source.write_text(json.dumps(document, default=str), encoding="utf-8")
        argv = [sys.executable, "-m", "pagedkv.model_tests.bench.plot", str(source), str(plot_out)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["failed"])[-1]
        if "matplotlib" in reason:
            reason += " (the plot needs matplotlib: pip install 'pagedkv[bench]')"
        return Section("plot", [Table("plot", ["not drawn"], [[reason]])])
    return Section("plot", [Table("plot", ["written"], [[str(plot_out)]])])
