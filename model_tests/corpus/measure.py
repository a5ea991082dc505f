"""Run the corpus: each wrong variant through ``pagedkv check``'s default budget, for given seeds;
print or write ``specs/corpus.md``'s table (``make corpus``).

    python -m pagedkv.model_tests.corpus.measure [--seeds 0,1,2] [--only NAME ... | --level L]
                                         [--jobs N] [--write specs/corpus.md]

Exit status 1 if a variant passes a check, or is reported with more than ``MAX_SHRUNK_STEPS``
steps. Each check runs in a worker process (``--jobs``, default 2), by the variant's name.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pagedkv.model_tests.corpus.registry import CLAUSES, VARIANTS, Variant, variant
from pagedkv.model_tests.machines.profiles import pin_generation
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.check import CheckResult, run_check
from pagedkv.specs.policy import profile

SEEDS = (0, 1, 2)
MAX_SHRUNK_STEPS = 12
BEGIN = (
    "<!-- corpus table: python -m pagedkv.model_tests.corpus.measure --write specs/corpus.md -->"
)
END = "<!-- end of the corpus table -->"


@dataclass(frozen=True)
class Outcome:
    """One check of one variant."""

    name: str
    seed: int
    calls: int | None
    """Calls the search made up to and including the first failing run (None: it passed)."""
    steps: int | None
    """Steps of the reported trace, shrunk and minimized."""
    replayed: bool
    """The trace, replayed, fails the same way; and passes the same implementation without the
    bug (so the bug is what fails it)."""
    seconds: float
    message: str
    trace: str | None = None
    """The reported trace, as written (``trace.dumps``)."""

    @property
    def caught(self) -> bool:
        return self.calls is not None and self.steps is not None and self.replayed

    @property
    def short(self) -> bool:
        return self.steps is not None and self.steps <= MAX_SHRUNK_STEPS


def check(each: Variant, seed: int, steps: int | None = None) -> CheckResult:
    """``pagedkv check`` of the variant: its level, its profile, the default budget."""
    under = profile(each.profile)
    return run_check(
        each.factory, each.level, steps=steps, seed=seed, trace_out=None, profile=under
    )


def measure(name: str, seed: int, steps: int | None = None) -> Outcome:
    """Check the variant called ``name`` with ``seed`` (a worker's task: names cross processes,
    factories need not)."""
    pin_generation()
    started = time.perf_counter()
    each = variant(name)
    result = check(each, seed, steps)
    found = result.found_after
    replayed = result.replayed is not None and result.replayed.status == "divergence"
    if replayed and result.trace is not None:
        replayed = trace.replay(result.trace, each.correct).ok
    return Outcome(
        name,
        seed,
        None if found is None else found[1],
        None if result.trace is None else len(result.trace.ops),
        replayed,
        round(time.perf_counter() - started, 1),
        result.message,
        None if result.trace is None else trace.dumps(result.trace),
    )


def verdict(outcome: Outcome) -> str:
    if not outcome.caught:
        return "MISSED"
    return "caught" if outcome.short else "TOO LONG"


def measure_all(
    names: Sequence[str], seeds: Sequence[int], jobs: int, steps: int | None = None
) -> dict[tuple[str, int], Outcome]:
    """Every check, each printed as it ends (a long campaign shows where it is)."""
    tasks = [(name, seed) for name in names for seed in seeds]
    outcomes = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for o in pool.map(measure, *zip(*tasks, strict=True), [steps] * len(tasks)):
            outcomes[(o.name, o.seed)] = o
            print(
                f"{verdict(o):8} {o.name} seed {o.seed}: calls {o.calls}, steps {o.steps},"
                f" {o.seconds} s",
                flush=True,
            )
    return outcomes


TRACES = Path(__file__).resolve().parent / "traces"
"""Each variant's reported trace, from the first seed that caught it: ``make test`` replays them
all (each must fail its variant and pass its correct counterpart) and searches for a few live."""


def trace_path(name: str, directory: Path = TRACES) -> Path:
    return directory / (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".jsonl")


def write_traces(outcomes: dict[tuple[str, int], Outcome], seeds: Sequence[int]) -> int:
    """Store each caught variant's trace, from its first seed that caught it."""
    written = 0
    for each in VARIANTS:
        for seed in seeds:
            outcome = outcomes.get((each.name, seed))
            if outcome is not None and outcome.caught and outcome.trace is not None:
                TRACES.mkdir(exist_ok=True)
                trace_path(each.name).write_text(outcome.trace, encoding="utf-8")
                written += 1
                break
    return written


def _clause_cell(clauses: Iterable[str]) -> str:
    cells = []
    for clause in clauses:
        page, _, where = CLAUSES[clause].partition(" ")
        cells.append(f"[{page}](" + page + f") {where}")
    return "<br>".join(cells)


def shown_figures(page: Path) -> dict[str, tuple[str, str]]:
    """The figures the page's table shows now, by variant: (calls, steps)."""
    content = page.read_text(encoding="utf-8")
    rows = content.partition(BEGIN + "\n")[2].partition(END)[0].splitlines()[2:]
    figures = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        if len(cells) == 5:
            figures[cells[0].strip("`")] = (cells[3], cells[4])
    return figures


def table(
    outcomes: dict[tuple[str, int], Outcome],
    seeds: Sequence[int],
    kept: dict[str, tuple[str, str]] | None = None,
) -> str:
    """The markdown table: each variant, the clauses it breaks, and per seed the calls the
    default budget took to catch it and the steps of its shrunk trace. A variant not measured
    now keeps the figures in ``kept`` (the page's, when only some variants were run)."""
    per_seed = "/".join(str(s) for s in seeds)
    lines = [
        f"| variant | level, profile | clause it breaks | calls to catch it, seeds {per_seed}"
        f" | steps in the shrunk trace, seeds {per_seed} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for each in VARIANTS:
        found = [outcomes.get((each.name, seed)) for seed in seeds]
        calls = " / ".join("?" if o is None else "missed" if o.calls is None else str(o.calls)
                           for o in found)  # fmt: skip
        steps = " / ".join("?" if o is None or o.steps is None else str(o.steps) for o in found)
        if kept and each.name in kept and all(o is None for o in found):
            calls, steps = kept[each.name]
        lines.append(
            f"| `{each.name}` | {each.level}, {each.profile} | {_clause_cell(each.clauses)}"
            f" | {calls} | {steps} |"
        )
    return "\n".join(lines)


def write_table(page: Path, text: str) -> None:
    """Replace the table between the page's markers."""
    content = page.read_text(encoding="utf-8")
    head, _, rest = content.partition(BEGIN + "\n")
    _, _, tail = rest.partition(END)
    page.write_text(head + BEGIN + "\n" + text + "\n" + END + tail, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedkv.model_tests.corpus.measure")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--steps", type=int, default=None, help="the budget (default: check's for each level)"
    )
    parser.add_argument("--level", default=None, help="only the variants of this level")
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        metavar="PAGE",
        help="write the table (variants not run keep the page's figures) and the traces",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = [v.name for v in VARIANTS if args.level in (None, v.level)]
    names = args.only or chosen
    for name in names:
        variant(name)  # an unknown name fails before any check runs
    started = time.perf_counter()
    outcomes = measure_all(names, seeds, args.jobs, args.steps)
    bad = [outcome for outcome in outcomes.values() if verdict(outcome) != "caught"]
    kept = shown_figures(args.write) if args.write is not None else None
    text = table(outcomes, seeds, kept)
    if args.write is not None:
        write_table(args.write, text)
        written = write_traces(outcomes, seeds)
        print(f"wrote the table into {args.write}, and {written} traces into {TRACES}")
    else:
        print(text)
    slowest = max(outcomes.values(), key=lambda o: o.seconds)
    longest = max(outcomes.values(), key=lambda o: o.steps or 0)
    print(
        f"{len(outcomes)} checks in {time.perf_counter() - started:.0f} s; slowest"
        f" {slowest.name} seed {slowest.seed}, {slowest.seconds} s; longest trace"
        f" {longest.name} seed {longest.seed}, {longest.steps} steps;"
        f" {len(bad)} missed or too long"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
