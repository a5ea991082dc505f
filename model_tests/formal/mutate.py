"""``make mutate``: the strength of the suite, measured by mutants of ``optimized/`` and
``reference/``.

A small AST mutator: each mutant changes one thing in one module (a comparison, an arithmetic or
boolean operator, a constant, ``min``/``max``, ``break``/``continue``, or deletes one call, raise
or augmented assignment). A mutant runs in a fresh process that builds the mutated module from
source, puts it in ``sys.modules`` in place of the real one (no file is written, so runs can go
side by side), and runs the killer tests with ``pytest -x`` under the ``mutate`` Hypothesis
profile (a fixed seed and a modest budget). A mutant is killed when a test fails or it hangs past
the timeout; it survives when every killer passes.

Survivors that change nothing observable are listed in ``EQUIVALENT`` with the reason; the score
is killed over non-equivalent mutants, per file. A full run is long (every site of every file), so
``--sample N`` takes N mutants per file, chosen with ``--seed``.

    python -m pagedkv.model_tests.formal.mutate [--sample N] [--seed S] [--jobs J] [FILE ...]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import random
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from pagedkv.model_tests.machines.explorer import positive

ROOT = Path(__file__).resolve().parents[2]

FILES = (
    "optimized/block_pool.py",
    "optimized/block_manager.py",
    "optimized/block_table.py",
    "optimized/evictor.py",
    "optimized/free_list.py",
    "reference/allocation.py",
    "reference/block_pool.py",
    "reference/block_table.py",
    "reference/block_manager.py",
    "reference/manager_state.py",
    "reference/pool_state.py",
    "reference/swap.py",
)
KILLERS = (
    "pagedkv/model_tests/tests/test_pool_examples.py",
    "pagedkv/model_tests/tests/test_manager_examples.py",
    "pagedkv/model_tests/tests/test_operations.py",
    "pagedkv/model_tests/tests/test_exhaustive.py::test_every_state_to_depth_three_agrees_and_keeps_the_invariants",
    "pagedkv/model_tests/tests/test_pool_lockstep.py",
    "pagedkv/model_tests/tests/test_manager_lockstep.py",
)
"""Fastest first: with ``-x`` most mutants die in the first seconds."""

_STAMPS = "stamps need only differ and rise; `pop` tells entries apart by identity"
_COMPACTION = (
    "when the evictor's heap is rebuilt bounds its memory only: the live entries, and so the"
    " eviction order, stay the same"
)
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("optimized/evictor.py", "self._next_stamp += 1", "1 -> 2"): _STAMPS,
    ("optimized/evictor.py", "self._next_stamp += 1", "delete the augmented assignment"): _STAMPS,
    ("optimized/evictor.py", "self._compact_if_stale()", "delete the call"): _COMPACTION,
    (
        "optimized/evictor.py",
        "if len(self._heap) - live > 2 * live + _SLACK:",
        "2 -> 3",
    ): _COMPACTION,
    (
        "optimized/evictor.py",
        "if len(self._heap) - live > 2 * live + _SLACK:",
        "Add -> Sub",
    ): _COMPACTION,
    (
        "optimized/evictor.py",
        "if len(self._heap) - live > 2 * live + _SLACK:",
        "Mult -> FloorDiv",
    ): _COMPACTION,
    ("optimized/evictor.py", "_SLACK = 32", "32 -> 33"): _COMPACTION,
    (
        "reference/swap.py",
        "if view.content_hash is not None and view.prefix is not None:",
        "And -> Or",
    ): ("a block view's prefix is set exactly when its hash is (I3), so either test is both"),
    ("optimized/free_list.py", "heapq.heapify(self._heap)", "delete the call"): (
        "every pool builds its free list from config.block_ids, a rising range: already a heap"
    ),
}
"""(file, source line stripped, mutation) -> why the mutant cannot be observed. Each entry was
read and argued by hand from a survivor of a run (``make mutate``)."""

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}


@dataclass(frozen=True)
class Mutant:
    file: str
    index: int
    line: int
    description: str

    def source_line(self) -> str:
        return (ROOT / self.file).read_text(encoding="utf-8").splitlines()[self.line - 1].strip()

    def equivalence(self) -> str | None:
        return EQUIVALENT.get((self.file, self.source_line(), self.description))


class _Mutator(ast.NodeTransformer):
    """Numbers every mutation site in a fixed traversal; applies site ``target`` if given."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target
        self.sites: list[tuple[int, str]] = []

    def _offer(self, node: ast.AST, description: str, make: Callable[[], ast.AST]) -> ast.AST:
        line = getattr(node, "lineno", 0)
        index = len(self.sites)
        self.sites.append((line, description))
        if index == self.target:
            return ast.copy_location(make(), node)
        return node

    # --- what is never mutated: docstrings, annotations, asserts, messages -------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        first = node.body[0]
        start = int(isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant))
        node.body[start:] = [self.visit(statement) for statement in node.body[start:]]
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.body = [self.visit(stmt) for stmt in node.body]
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return node

    # --- statements --------------------------------------------------------------------------

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant):  # a docstring or a bare string
            return node
        self.generic_visit(node)
        return self._offer(node, "delete the call", ast.Pass)

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        self.generic_visit(node)
        return self._offer(node, "delete the raise", ast.Pass)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        swapped = _BINOP_SWAPS.get(type(node.op))
        if swapped is not None:
            node = self._offer(  # type: ignore[assignment]
                node,
                f"{type(node.op).__name__}= -> {swapped.__name__}=",
                lambda: ast.AugAssign(node.target, swapped(), node.value),
            )
        return self._offer(node, "delete the augmented assignment", ast.Pass)

    def visit_Break(self, node: ast.Break) -> ast.AST:
        return self._offer(node, "break -> continue", ast.Continue)

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return self._offer(node, "continue -> break", ast.Break)

    # --- expressions -------------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for position, op in enumerate(node.ops):
            swapped = _COMPARE_SWAPS.get(type(op))
            if swapped is None:
                continue

            def make(position: int = position, swapped: type[ast.cmpop] = swapped) -> ast.AST:
                ops = list(node.ops)
                ops[position] = swapped()
                return ast.Compare(node.left, ops, node.comparators)

            result = self._offer(node, f"{type(op).__name__} -> {swapped.__name__}", make)
            if result is not node:
                return result
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swapped = _BINOP_SWAPS.get(type(node.op))
        if swapped is None:
            return node
        return self._offer(
            node,
            f"{type(node.op).__name__} -> {swapped.__name__}",
            lambda: ast.BinOp(node.left, swapped(), node.right),
        )

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other: type[ast.boolop] = ast.Or if isinstance(node.op, ast.And) else ast.And
        return self._offer(
            node,
            f"{type(node.op).__name__} -> {other.__name__}",
            lambda: ast.BoolOp(other(), node.values),
        )

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not | ast.USub):
            return self._offer(node, f"drop {type(node.op).__name__}", lambda: node.operand)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            return self._offer(node, f"{value} -> {not value}", lambda: ast.Constant(not value))
        if isinstance(value, int):
            return self._offer(node, f"{value} -> {value + 1}", lambda: ast.Constant(value + 1))
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            other = "max" if node.func.id == "min" else "min"
            return self._offer(
                node,
                f"{node.func.id} -> {other}",
                lambda: ast.Call(ast.Name(other, ast.Load()), node.args, node.keywords),
            )
        return node


def mutants_of(file: str) -> list[Mutant]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    mutator = _Mutator()
    mutator.visit(tree)
    return [
        Mutant(file, index, line, description)
        for index, (line, description) in enumerate(mutator.sites)
    ]


def mutated_source(file: str, index: int) -> str:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    mutator = _Mutator(index)
    tree = mutator.visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def install(file: str, index: int) -> None:
    """Put the mutant of ``file`` in ``sys.modules`` before anything imports the real one."""
    name = "pagedkv." + file.removesuffix(".py").replace("/", ".")
    package_name, _, attribute = name.rpartition(".")
    package = importlib.import_module(package_name)
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / file)
    module.__package__ = package_name
    sys.modules[name] = module
    exec(compile(mutated_source(file, index), str(ROOT / file), "exec"), module.__dict__)
    setattr(package, attribute, module)


def worker(file: str | None, index: int, tests: Sequence[str]) -> int:
    """In the mutant's own process: install it, then run the killers."""
    if file is not None:
        install(file, index)
    return int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]))


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    status: str  # "killed", "survived", "timeout"
    seconds: float


def run_one(mutant: Mutant | None, tests: Sequence[str], timeout: float) -> tuple[str, float]:
    env = dict(os.environ, PAGEDKV_PROFILE="mutate")
    command = [sys.executable, "-m", "pagedkv.model_tests.formal.mutate", "--worker"]
    if mutant is not None:
        command += [mutant.file, str(mutant.index)]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*command, "--", *tests],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    status = "survived" if done.returncode == 0 else "killed"
    if mutant is None and done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    return status, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        split = argv.index("--")
        spec, tests = argv[1:split], argv[split + 1 :]
        return worker(spec[0] if spec else None, int(spec[1]) if spec else 0, tests)
    parser = argparse.ArgumentParser(description="mutation score of optimized/ and reference/")
    parser.add_argument("files", nargs="*", default=list(FILES))
    parser.add_argument("--sample", type=int, default=0, help="mutants per file (0: all)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--jobs", type=positive(int), default=2)
    parser.add_argument("--timeout", type=positive(float), default=600.0, help="seconds per mutant")
    parser.add_argument(
        "--mutant", action="append", default=[], help="FILE:INDEX, only these (repeatable)"
    )
    parser.add_argument(
        "--rescore",
        nargs="+",
        help="score earlier runs' outputs instead; a later file's line for a mutant wins",
    )
    args = parser.parse_args(argv)
    if args.rescore:
        merged: dict[tuple[str, int, str], Result] = {}
        for log in args.rescore:
            if not Path(log).is_file():
                parser.error(f"no such file: {log}")
            for result in read_results(Path(log).read_text(encoding="utf-8")):
                mutant = result.mutant
                merged[(mutant.file, mutant.line, mutant.description)] = result
        return report(list(merged.values()))

    named = [named_mutant(parser, spec) for spec in args.mutant]
    status, seconds = run_one(None, KILLERS, args.timeout)
    print(f"baseline: the killers {'pass' if status == 'survived' else 'FAIL'} ({seconds:.0f} s)")
    if status != "survived":
        return 1
    chosen = named
    for file in [] if args.mutant else args.files:
        every = mutants_of(file)
        picked = (
            every
            if not args.sample
            else random.Random(f"{args.seed}/{file}").sample(every, min(args.sample, len(every)))
        )
        chosen += sorted(picked, key=lambda m: m.index)
        print(f"{file}: {len(picked)} of {len(every)} mutants")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = [(m, pool.submit(run_one, m, KILLERS, args.timeout)) for m in chosen]
        results = []
        for mutant, future in runs:
            status, seconds = future.result()
            results.append(Result(mutant, status, seconds))
            print(f"  {status:<8} {mutant.file}:{mutant.line} {mutant.description}", flush=True)
    return report(results)


def named_mutant(parser: argparse.ArgumentParser, spec: str) -> Mutant:
    file, _, index = spec.rpartition(":")
    if not (ROOT / file).is_file() or not index.isdigit():
        parser.error(f"--mutant takes FILE:INDEX with FILE under {ROOT}, got {spec!r}")
    every = mutants_of(file)
    if int(index) >= len(every):
        parser.error(f"{file} has {len(every)} mutants (0..{len(every) - 1}), got {index}")
    return every[int(index)]


def read_results(output: str) -> list[Result]:
    """The results an earlier run printed (``  killed   FILE:LINE DESCRIPTION``), so that its
    survivors can be scored again once they are classified."""
    results = []
    for line in output.splitlines():
        status, _, rest = line.strip().partition(" ")
        if status not in ("killed", "survived", "timeout") or ":" not in rest:
            continue
        place, _, description = rest.strip().partition(" ")
        file, _, number = place.rpartition(":")
        results.append(Result(Mutant(file, -1, int(number), description), status, 0.0))
    return results


def report(results: Sequence[Result]) -> int:
    if not results:
        print("no mutant was run: no score")
        return 1
    print(f"\n{'file':<30} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'gaps':>5} {'score':>7}")
    worst = 100.0
    for file in dict.fromkeys(r.mutant.file for r in results):
        mine = [r for r in results if r.mutant.file == file]
        killed = sum(r.status != "survived" for r in mine)
        equivalent = sum(
            r.status == "survived" and r.mutant.equivalence() is not None for r in mine
        )
        gaps = len(mine) - killed - equivalent
        score = 100.0 * killed / (killed + gaps) if killed + gaps else 100.0
        worst = min(worst, score)
        print(f"{file:<30} {len(mine):>7} {killed:>6} {equivalent:>6} {gaps:>5} {score:>6.1f}%")
    survivors = [r for r in results if r.status == "survived"]
    print("\nsurvivors:" if survivors else "\nsurvivors: none")
    for r in survivors:
        reason = r.mutant.equivalence()
        verdict = f"equivalent: {reason}" if reason else "GAP"
        print(f"  {r.mutant.file}:{r.mutant.line} {r.mutant.description}")
        print(f"      {r.mutant.source_line()}")
        print(f"      {verdict}")
    return 0 if worst >= 98.0 else 1


if __name__ == "__main__":
    sys.exit(main())
