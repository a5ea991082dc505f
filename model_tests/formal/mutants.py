"""The mutants of ``make mutate``: where each one changes the code, and its compiled module.

A small AST mutator: each mutant changes one thing in one module (a comparison, an arithmetic or
boolean operator, a constant, ``min``/``max``, ``break``/``continue``, or deletes one call, raise
or augmented assignment). Docstrings, annotations, asserts, f-strings and imports are never
mutated. The mutated tree is compiled as it is (no ``unparse``), so a traceback's line numbers are
the file's.

Nothing here imports ``reference/`` or ``optimized/``: the files are read as text, so that the
runner can install a mutant before the first import of the module it replaces.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the folder that holds ``reference/`` and ``optimized/``)."""

MUTATED_FOLDERS = ("reference", "optimized")
NOT_MUTATED = {"__init__.py": "a package's docstring, no code"}
"""File names left out of every folder, and why."""


def files_to_mutate() -> tuple[str, ...]:
    """Every module of ``reference/`` and ``optimized/`` (a new file is mutated with no edit
    here), as ``folder/name.py``."""
    return tuple(
        f"{folder}/{path.name}"
        for folder in MUTATED_FOLDERS
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.name not in NOT_MUTATED
    )


def module_name(file: str) -> str:
    """``reference/allocation.py`` -> ``pagedkv.reference.allocation``: the name every importer
    uses (the folders are pagedkv's subpackages through links)."""
    return "pagedkv." + file.removesuffix(".py").replace("/", ".")


def module_path(file: str) -> Path:
    """The path the real module is imported from (through the ``pagedkv/<folder>`` link)."""
    return ROOT / "pagedkv" / file


@dataclass(frozen=True)
class Mutant:
    file: str
    index: int
    """The site's number in ``sites_of(file)``'s order: stable while the file is unchanged."""
    line: int
    description: str
    source: str
    """The mutated line, stripped: with the description, the key that survives edits elsewhere in
    the file (``EQUIVALENT``, the controls)."""

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line} {self.description}"


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


def _source(file: str) -> str:
    return (ROOT / file).read_text(encoding="utf-8")


def mutants_of(file: str) -> list[Mutant]:
    source = _source(file)
    lines = source.splitlines()
    mutator = _Mutator()
    mutator.visit(ast.parse(source))
    return [
        Mutant(file, index, line, description, lines[line - 1].strip())
        for index, (line, description) in enumerate(mutator.sites)
    ]


def mutated_code(mutant: Mutant) -> CodeType:
    """The mutant's module, compiled with the real file's name and line numbers."""
    tree = _Mutator(mutant.index).visit(ast.parse(_source(mutant.file)))
    return compile(ast.fix_missing_locations(tree), str(module_path(mutant.file)), "exec")


def find(file: str, source: str, description: str) -> Mutant:
    """The one mutant of ``file`` on the line that reads ``source`` with ``description``."""
    found = [m for m in mutants_of(file) if (m.source, m.description) == (source, description)]
    if len(found) != 1:
        raise LookupError(f"{file}: {len(found)} mutants {description!r} of {source!r}")
    return found[0]
