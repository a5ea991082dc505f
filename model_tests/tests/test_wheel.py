"""The built wheel, as a new user gets it: installed into a fresh virtual environment with its
runtime dependencies only (no torch, no dev extras), outside the checkout, and used through the
``pagedkv`` command: ``--help``, a check of the shipped targets at both levels (in process and
over the stdio protocol), a broken variant caught, a corpus recorded and replayed.

This is what keeps a broken install from landing: a module that imports a dev-only dependency,
or torch on the oracle's path, or a test file shipped in site-packages, fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600
BROKEN = "pagedkv.model_tests.independent.broken:BrokenNoUpFrontCheck"
IGNORED = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a clean copy of the working tree: setuptools builds in ``./build`` and never
    deletes from it, so a build in the checkout could ship a module that was moved away."""
    source = tmp_path_factory.mktemp("source") / "pagedkv"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*IGNORED))
    out = tmp_path_factory.mktemp("dist")
    done = run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)],
        cwd=out,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("pagedkv-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("user")
    env = home / "venv"
    done = run([sys.executable, "-m", "venv", str(env)], cwd=home)
    assert done.returncode == 0, done.stderr
    done = run([str(env / "bin" / "pip"), "install", "--quiet", str(wheel)], cwd=home)
    assert done.returncode == 0, done.stdout + done.stderr
    yield env


def test_the_wheel_ships_one_typed_package_and_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {name.split("/")[0] for name in names if not name.startswith("pagedkv-")}
    assert shipped == {"pagedkv"}
    subpackages = {name.split("/")[1] for name in names if name.count("/") > 1}
    assert {"specs", "reference", "optimized", "model_tests"} <= subpackages
    tests = [n for n in names if "/tests/" in n or n.endswith("conftest.py") or "/test_" in n]
    assert tests == []
    assert [n for n in names if "/formal/" in n or n.endswith(".jsonl")] == []
    assert "pagedkv/py.typed" in names and "pagedkv/cli.py" in names
    assert "pagedkv/specs/block_pool.md" in names
    assert "pagedkv/specs/verdict.schema.json" in names  # what --json writes, for its readers
    assert "pagedkv/specs/trace.schema.json" in names  # the trace format, for other languages
    for template in (
        "page.html",
        "step.html",
        "request_picture.html",
        "cells.html",
    ):  # the viewer's page
        assert f"pagedkv/model_tests/teaching/templates/{template}" in names
    # the real peers' known defects, which `python -m pagedkv.model_tests.peers.run --known` reads
    assert "pagedkv/model_tests/peers/known/vllm-0.6.3-manager.toml" in names, names


def test_installed_without_torch_or_dev_extras(venv: Path) -> None:
    python = str(venv / "bin" / "python")
    done = run([python, "-c", "import torch"], cwd=venv)
    assert done.returncode != 0 and "No module named 'torch'" in done.stderr
    done = run([python, "-c", "import pytest"], cwd=venv)
    assert done.returncode != 0
    probe = "import pagedkv, sys; print([m for m in ('torch', 'hypothesis') if m in sys.modules])"
    done = run([python, "-c", probe], cwd=venv)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
    done = run([python, "-c", "import pagedkv.kv"], cwd=venv)
    assert done.returncode == 1 and "pip install 'pagedkv[kv]'" in done.stderr


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--help"], 0, "check"),
        (["check", "--target", "reference", "--steps", "300", "--seed", "0"], 0, "PASS"),
        (["check", "--target", "optimized", "--level", "pool", "--steps", "300"], 0, "PASS"),
        (
            ["check", "--target", BROKEN, "--steps", "1500", "--seed", "4"],
            1,
            "page: pagedkv-divergence.html (both sides",
        ),
        (["demo"], 0, "step 23 of 23: reset_prefix_cache() -> True"),
        (["demo", "-o", "demo.html"], 0, "wrote demo.html"),
        (["demo", "--level", "request"], 0, "step 27 of 27: allocate_slots(y<15 tokens"),
        (["soak", "--steps", "2000", "--seed", "0"], 0, "PASS"),
        (["bench", "--quick", "--kernels", "--no-reference", "--scaling", ""], 0, "skipped"),
    ],
    ids=[
        "help",
        "check-manager",
        "check-pool",
        "check-broken",
        "demo",
        "demo-page",
        "demo-request",
        "soak",
        "bench-without-torch",
    ],
)
def test_the_command_works_from_the_installed_wheel(
    venv: Path, argv: list[str], code: int, says: str
) -> None:
    done = run([str(venv / "bin" / "pagedkv"), *argv], cwd=venv)
    assert done.returncode == code and says in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_peer_over_stdio_and_a_recorded_corpus_replayed(venv: Path) -> None:
    pagedkv = str(venv / "bin" / "pagedkv")
    python = venv / "bin" / "python"
    peer = f"exec:{python} -m pagedkv.model_tests.oracle.example_peer --impl independent"
    done = run([pagedkv, "check", "--target", peer, "--steps", "300", "--seed", "1"], cwd=venv)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
    done = run([pagedkv, "record", "--out", "traces", "--runs", "4"], cwd=venv)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run([pagedkv, "replay", "traces", "--target", "optimized", "--level", "pool"], cwd=venv)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
    done = run([pagedkv, "replay", "traces", "--target", peer, "--level", "manager"], cwd=venv)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr


def test_a_user_package_named_like_a_layer_is_theirs(venv: Path, tmp_path: Path) -> None:
    """pagedkv installs one import name: a user's own ``specs`` (a namespace folder, the case
    that broke when pagedkv shipped a top-level ``specs``) imports, and a target in it checks."""
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "specs" / "mine.py").write_text(
        "from pagedkv import ReferenceBlockSpaceManager as make\nVALUE = 1\n"
    )
    python = str(venv / "bin" / "python")
    done = run([python, "-c", "import specs.mine; print(specs.mine.VALUE)"], cwd=project)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    argv = [str(venv / "bin" / "pagedkv"), "check", "--target", "specs.mine:make", "--steps", "200"]
    done = run(argv, cwd=project)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
