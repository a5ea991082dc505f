"""The layers import one way (``specs/README.md``, "The layers of the code"):

    specs  <-  reference, optimized, model_tests.independent  <-  model_tests.lockstep
           <-  model_tests.machines  <-  model_tests.oracle  <-  model_tests.teaching,
           model_tests.peers, model_tests.bench  <-  pagedkv

Each module is parsed with ``ast`` (nothing is imported), and every import of a project module is
checked against that order: no arrow from a lower layer to a higher one, no import between the
implementations (they share only ``specs``), and no import inside a function (a lazy import
hides an arrow from a reader, and from this test). Torch is imported only where tensors are used,
Hypothesis only above the implementations.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("specs", "reference", "optimized", "model_tests", "pagedkv", "pagedkv_entry")

LAYERS: dict[str, int] = {
    "specs": 0,
    "model_tests": 0,  # the package's __init__: a docstring
    "reference": 1,
    "optimized": 1,
    "model_tests.independent": 1,
    "model_tests.lockstep": 2,
    "model_tests.machines": 3,
    "model_tests.oracle": 4,
    "model_tests.teaching": 5,
    "model_tests.peers": 5,  # real engines' adapters and `make peers`: above the oracle they drive
    "model_tests.formal": 5,  # development tools (CrossHair, mutation): nothing imports them
    "model_tests.bench": 5,
    "model_tests.corpus": 5,  # the wrong variants and their measurement, above the oracle
    "pagedkv": 6,
    "pagedkv_entry": 7,  # the console script's entry: signal handlers, then pagedkv.cli
    "model_tests.tests": 7,
}
TORCH_ALLOWED = {
    "optimized.kv_store",
    "optimized.kernels",
    "model_tests.bench.kernels",
    "model_tests.bench.defrag",
    "model_tests.machines.torch_kv",
}
HYPOTHESIS_FROM_LAYER = 2


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """The longest layer name that ``module`` is, or is inside."""
    found = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return max(found, key=len) if found else None


def project_modules() -> list[Path]:
    found = [ROOT / f"{name}.py" for name in PACKAGES if (ROOT / f"{name}.py").is_file()]
    return sorted(found + [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")])


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
            if root == "torch" and importer not in TORCH_ALLOWED and own != "model_tests.tests":
                problems.append(f"{where}: {importer} imports torch")
            if root == "hypothesis" and LAYERS[own] < HYPOTHESIS_FROM_LAYER:
                problems.append(f"{where}: {importer} ({own}) imports hypothesis")
            if root not in PACKAGES:
                continue
            theirs = layer_of(imported)
            if theirs is None:
                problems.append(f"{where}: {imported} is in no layer")
                continue
            if not at_top and own != "model_tests.tests":
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
        ("from model_tests.oracle import codec\n", "an arrow running up"),
        ("from optimized.block_pool import OptimizedBlockPool\n", "imports its sibling"),
        ("def f():\n    from specs import types\n", "inside a function"),
        ("import torch\n", "imports torch"),
    ],
)
def test_the_walk_catches_a_bad_import(
    source: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: a module of ``reference`` with each kind of bad import is caught."""
    planted = ROOT / "reference" / "_planted_for_test_layers.py"
    monkeypatch.setattr(
        "model_tests.tests.test_layers.project_modules",
        lambda: [planted],
    )
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    problems = violations()
    assert any(says in problem for problem in problems), problems
