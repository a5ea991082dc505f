"""``make crosshair``: CrossHair over the PEP 316 contracts of ``specs/`` and ``reference/``, and
``crosshair diffbehavior`` over each pair of ``pagedkv.model_tests.formal.pairs``.

Prints every condition with its outcome (confirmed over all paths, not refuted within the
per-condition timeout, or refuted with CrossHair's counterexample) and every pair with CrossHair's
verdict; exits 1 on any counterexample, on any difference, or when a target yields no condition at
all (a check that ran nothing must not pass). CrossHair counts its timeouts in CPU time, so a
loaded machine takes longer in wall time but checks as much.

    python -m pagedkv.model_tests.formal.crosshair_check [--timeout S] [--pair-timeout S] [--jobs N]
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pagedkv.model_tests.machines.explorer import positive

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).with_name("crosshair_plugin.py")
CROSSHAIR = [sys.executable, "-m", "crosshair"]

CONTRACT_TARGETS = (
    "specs/accounting.py",
    "specs/content_hash.py",
    "specs/slots.py",
    "specs/validation.py",
    "reference/allocation.py",
    "reference/block_table.py",
    "reference/block_pool.py",
)
PAIRS_MODULE = "pagedkv.model_tests.formal.pairs"
PAIRS = (
    ("window release", "window_release", "out_of_window ~ num_out_of_window"),
    ("eviction order", "eviction_order", "first_to_evict + own_eviction_pick ~ Evictor"),
    ("lowest free id", "allocation_order", "take_block ~ FreeList via the pool"),
    ("block prefixes", "block_prefixes", "prefix_at ~ BlockTable.prefixes"),
)
WORKED_AROUND = (
    "immutables.Map arguments: built by crosshair_plugin.py (CrossHair's own guess has values of"
    " the wrong type)",
    "encode_block injectivity: stated by decoding each field (two encodings compared run"
    " struct.pack over a symbolic list, spurious ([], [])); pinned in test_formal.py",
    "UTF-8 encodability: stated with code points (a symbolic str.encode accepts lone"
    " surrogates); pinned in test_formal.py",
)
SKIPPED: tuple[tuple[str, str], ...] = ()
"""(target, reason) of contracts deliberately not given to CrossHair; none at present."""

_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+): (?P<kind>info|error): (?P<message>.*)$")


@dataclass(frozen=True)
class Outcome:
    target: str
    line: int
    function: str
    condition: str
    status: str  # "confirmed", "not refuted" or "refuted"
    detail: str = ""


def contract_lines(path: Path) -> dict[int, tuple[str, str]]:
    """Line number -> (function, condition text) for every pre/post/raises line of a docstring."""
    found: dict[int, tuple[str, str]] = {}
    source = path.read_text(encoding="utf-8").splitlines()

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{scope}{child.name}.")
            elif isinstance(child, ast.FunctionDef) and child.body:
                first = child.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    end = first.end_lineno or first.lineno
                    for number in range(first.lineno, end + 1):
                        text = source[number - 1].strip()
                        if text.startswith(("pre:", "post:", "raises:")):
                            found[number] = (f"{scope}{child.name}", text)

    visit(ast.parse("\n".join(source)), "")
    return found


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def check_contracts(target: str, timeout: float) -> tuple[list[Outcome], list[str]]:
    """Run ``crosshair check`` on one file; the outcomes of its conditions and any other output."""
    # through the link in pagedkv/, so that CrossHair imports it as pagedkv.specs.x, not specs.x
    path = ROOT / "pagedkv" / target if not Path(target).is_absolute() else Path(target)
    command = [
        *CROSSHAIR,
        "check",
        "--report_all",
        f"--per_condition_timeout={timeout}",
        f"--extra_plugin={PLUGIN}",
        str(path),
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, check=False
    )
    conditions = contract_lines(path)
    outcomes: list[Outcome] = []
    other: list[str] = []
    for raw in done.stdout.splitlines():
        match = _LINE.match(raw)
        if match is None:
            other.append(raw)
            continue
        number = int(match["line"])
        function, condition = conditions.get(number, ("?", "(line without a condition)"))
        message = match["message"]
        if match["kind"] == "error":
            status, detail = "refuted", message
        elif message.startswith("Confirmed over all paths"):
            status, detail = "confirmed", ""
        else:
            status, detail = "not refuted", ""
        outcomes.append(Outcome(target, number, function, condition, status, detail))
    if done.returncode not in (0, 1):
        other.append(f"crosshair exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return outcomes, other


@dataclass(frozen=True)
class PairOutcome:
    name: str
    helpers: str
    differs: bool
    text: str


def diff_pair(first: str, second: str, timeout: float) -> tuple[bool, str]:
    """``crosshair diffbehavior`` on two functions: (whether they differ, CrossHair's words)."""
    command = [*CROSSHAIR, "diffbehavior", f"--per_condition_timeout={timeout}", first, second]
    done = subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, check=False
    )
    text = (done.stdout + done.stderr).strip()
    differs = done.returncode != 0 or "No differences found" not in text
    return differs, text


def check_pair(name: str, stem: str, helpers: str, timeout: float) -> PairOutcome:
    differs, text = diff_pair(
        f"{PAIRS_MODULE}.reference_{stem}", f"{PAIRS_MODULE}.optimized_{stem}", timeout
    )
    return PairOutcome(name, helpers, differs, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    number = positive(float)
    parser.add_argument("--timeout", type=number, default=20.0, help="CPU seconds per condition")
    parser.add_argument("--pair-timeout", type=number, default=60.0, help="CPU seconds per pair")
    parser.add_argument("--jobs", type=positive(int), default=2, help="CrossHair processes at once")
    args = parser.parse_args(argv)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        contract_runs = list(
            pool.map(lambda target: check_contracts(target, args.timeout), CONTRACT_TARGETS)
        )
        pair_runs = [pool.submit(check_pair, *pair, args.pair_timeout) for pair in PAIRS]

    failed = False
    print(f"CrossHair contracts (per-condition timeout {args.timeout:g} CPU seconds)")
    counts = {"confirmed": 0, "not refuted": 0, "refuted": 0}
    for target, (outcomes, other) in zip(CONTRACT_TARGETS, contract_runs, strict=True):
        print(f"  {target}")
        if not outcomes:
            print("    no condition was checked: FAIL")
            failed = True
        for outcome in outcomes:
            counts[outcome.status] += 1
            print(f"    {outcome.status:<11}  {outcome.function}: {outcome.condition}")
            if outcome.detail:
                print(f"                 {outcome.detail}")
        for line in other:
            print(f"    {line}")
            failed = True
    failed = failed or counts["refuted"] > 0
    total = sum(counts.values())
    print(
        f"  {total} conditions: {counts['confirmed']} confirmed over all paths,"
        f" {counts['not refuted']} not refuted within the timeout, {counts['refuted']} refuted"
    )
    print(f"diffbehavior pairs (per-condition timeout {args.pair_timeout:g} CPU seconds)")
    for pair in (run.result() for run in pair_runs):
        verdict = "DIFFERENT" if pair.differs else "same"
        summary = " ".join(pair.text.split())
        print(f"  {pair.name:<15} {verdict:<9} {pair.helpers}: {summary}")
        failed = failed or pair.differs
    print("skipped: " + ("none" if not SKIPPED else ""))
    for target, reason in SKIPPED:
        print(f"  {target}: {reason}")
    print("worked around:")
    for note in WORKED_AROUND:
        print(f"  {note}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
