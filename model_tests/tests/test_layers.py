"""The layers import one way (``specs/README.md``, "The layers of the code"), every module by its
installed name (``pagedkv.specs``, never ``specs``):

    specs  <-  reference, optimized, model_tests.independent  <-  model_tests.lockstep
           <-  model_tests.machines  <-  model_tests.oracle  <-  model_tests.teaching,
           model_tests.peers, model_tests.bench  <-  pagedkv (the face)  <-  pagedkv.entry

Each module is parsed with ``ast`` (nothing is imported), and every import of a project module is
checked against that order: no arrow from a lower layer to a higher one, no import between the
implementations (they share only ``specs``), and no import inside a function (a lazy import
hides an arrow from a reader, and from this test) except where ``LAZY`` says why. Torch is
imported only where tensors are used, Hypothesis only above the implementations.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("specs", "reference", "optimized", "model_tests")
"""The design card's folders: ``pagedkv.<folder>`` once installed (``pagedkv/<folder>`` links to
``../<folder>``)."""

LAYERS: dict[str, int] = {
    "pagedkv.specs": 0,
    "pagedkv.model_tests": 0,  # the package's __init__: a docstring
    "pagedkv.reference": 1,
    "pagedkv.optimized": 1,
    "pagedkv.model_tests.independent": 1,
    "pagedkv.model_tests.lockstep": 2,
    "pagedkv.model_tests.machines": 3,
    "pagedkv.model_tests.oracle": 4,
    "pagedkv.model_tests.teaching": 5,
    "pagedkv.model_tests.peers": 5,  # real engines' adapters, above the oracle they drive
    "pagedkv.model_tests.formal": 5,  # development tools (CrossHair, mutation)
    "pagedkv.model_tests.bench": 5,
    "pagedkv.model_tests.corpus": 5,  # the wrong variants and their measurement
    "pagedkv": 6,
    "pagedkv.entry": 7,  # the console script's entry: signal handlers, then pagedkv.cli
    "pagedkv.__main__": 8,  # python -m pagedkv: runs the entry
    "pagedkv.model_tests.tests": 7,
}
TORCH_ALLOWED = {
    "pagedkv.optimized.kv_store",
    "pagedkv.optimized.kernels",
    "pagedkv.model_tests.bench.kernels",
    "pagedkv.model_tests.bench.defrag",
    "pagedkv.model_tests.machines.torch_kv",
    # SGLang's RadixCache and allocators keep their KV indices in (CPU) tensors
    "pagedkv.model_tests.peers.sglang_radix",
    "pagedkv.model_tests.peers.sglang_scheduler",
}
HYPOTHESIS_FROM_LAYER = 2
LAZY = {
    "pagedkv.model_tests.oracle.pytest_plugin": "pytest loads it in every session of an"
    " environment with pagedkv installed: the oracle loads only when a test checks something",
    "pagedkv.cli": "each command loads what only it uses (the benchmark, the teaching tools and"
    " their pages, rich on a terminal) when it runs, so that `pagedkv check` starts in under"
    " 0.5 CPU s (test_startup.py)",
}
"""Modules allowed an import inside a function, and why (never to dodge a cycle)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "pagedkv" else ["pagedkv", *parts])


def layer_of(module: str) -> str | None:
    """The longest layer name that ``module`` is, or is inside."""
    found = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return max(found, key=len) if found else None


def project_modules() -> list[Path]:
    """Every module once: the folders' own files, and the face's (not again through its links)."""
    face = sorted((ROOT / "pagedkv").glob("*.py"))
    return face + sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    top_level = {id(node) for node in tree.body}
    top_level |= {
        id(inner)
        for node in tree.body
        if isinstance(node, ast.If | ast.Try)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, node.lineno, id(node) in top_level))
    return found


def violations() -> list[str]:
    problems = []
    for path in project_modules():
        importer = module_name(path)
        own = layer_of(importer)
        assert own is not None, f"{importer} is in no layer: add it to LAYERS"
        for imported, line, at_top in imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            root = imported.split(".")[0]
            tests = own == "pagedkv.model_tests.tests"
            if root == "torch" and importer not in TORCH_ALLOWED and not tests:
                problems.append(f"{where}: {importer} imports torch")
            if root == "hypothesis" and LAYERS[own] < HYPOTHESIS_FROM_LAYER:
                problems.append(f"{where}: {importer} ({own}) imports hypothesis")
            if root in FOLDERS:
                problems.append(f"{where}: {importer} imports {imported}: say pagedkv.{imported}")
                continue
            if root != "pagedkv":
                continue
            theirs = layer_of(imported)
            if theirs is None:
                problems.append(f"{where}: {imported} is in no layer")
                continue
            if not at_top and not tests and importer not in LAZY:
                problems.append(f"{where}: {importer} imports {imported} inside a function")
            if LAYERS[theirs] > LAYERS[own]:
                problems.append(
                    f"{where}: {importer} ({own}, layer {LAYERS[own]}) imports {imported}"
                    f" ({theirs}, layer {LAYERS[theirs]}): an arrow running up"
                )
            elif LAYERS[theirs] == LAYERS[own] and theirs != own:
                problems.append(f"{where}: {importer} ({own}) imports its sibling {imported}")
    return problems


def test_every_project_module_is_in_a_layer_and_imports_only_downward() -> None:
    modules = project_modules()
    assert len(modules) > 50  # the walk found the tree
    problems = violations()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("from pagedkv.model_tests.oracle import codec\n", "an arrow running up"),
        ("from pagedkv.optimized.block_pool import OptimizedBlockPool\n", "imports its sibling"),
        ("def f():\n    from pagedkv.specs import types\n", "inside a function"),
        ("import torch\n", "imports torch"),
        ("from specs.types import BlockId\n", "say pagedkv.specs.types"),
    ],
)
def test_the_walk_catches_a_bad_import(
    source: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: a module of ``reference`` with each kind of bad import is caught."""
    planted = ROOT / "reference" / "_planted_for_test_layers.py"
    monkeypatch.setattr(
        "pagedkv.model_tests.tests.test_layers.project_modules",
        lambda: [planted],
    )
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    problems = violations()
    assert any(says in problem for problem in problems), problems


@pytest.mark.parametrize(
    "module",
    ["pagedkv", "pagedkv.optimized.block_manager", "pagedkv.model_tests.oracle.pytest_plugin"],
)
def test_a_light_import_loads_no_oracle_hypothesis_or_torch(module: str) -> None:
    """``import pagedkv`` (its names load on first use), the optimized manager a scheduler
    imports, and the pytest plugin every pytest session of a user's environment loads."""
    heavy = ("hypothesis", "torch", "pagedkv.model_tests.oracle.check", "pagedkv.cli")
    probe = f"import sys, {module}; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stdout + done.stderr


def test_the_face_lazily_exports_every_name_it_lists() -> None:
    import pagedkv

    assert sorted(pagedkv.__all__) == sorted(pagedkv._HOME_OF)
    for name in pagedkv.__all__:
        assert getattr(pagedkv, name) is not None
