"""``pagedkv check`` starts in under 0.5 CPU s from the wheel (issue 25): it loads only the
modules a check uses. The time itself is measured, not tested (``specs/oracle.md`` §6); what is
tested is what decides it: which modules the command line loads before and while it checks a
target that passes, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_FOR_CHECK = (
    "rich",  # the output is not a terminal here: plain text
    "jinja2",  # the trace viewer's page: only for a divergence
    "torch",
    "matplotlib",
    "pagedkv.model_tests.bench.runner",
    "pagedkv.model_tests.bench.sections",
    "pagedkv.model_tests.teaching.page",
    "pagedkv.model_tests.teaching.terminal",
    "pagedkv.model_tests.teaching.demo",
    "pagedkv.pages",
    "pagedkv.rich_output",
    "pagedkv.model_tests.oracle.soak",  # the soak, its stand-in model and the optimized manager
    "pagedkv.model_tests.oracle.soak_model",
    "pagedkv.optimized",
)
"""Modules of other commands, or of a check's failure or terminal, and their libraries."""

PROBE = """
import io, sys
import pagedkv.entry
from pagedkv import cli
argv = {argv!r}
code = cli.main(argv, stdout=io.StringIO(), stderr=io.StringIO()) if argv else 0
heavy = {heavy!r}
print(code, sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))
"""


def loaded_by(argv: list[str], heavy: tuple[str, ...] = NOT_FOR_CHECK) -> str:
    probe = PROBE.format(argv=argv, heavy=heavy)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("command", ["import", "check"])
def test_the_check_path_loads_no_other_command_s_modules(command: str, tmp_path: Path) -> None:
    checked = ["check", "--target", "reference", "--steps", "20", "--seed", "0"]
    argv = [] if command == "import" else [*checked, "--trace-out", str(tmp_path / "t.jsonl")]
    assert loaded_by(argv) == "0 []"


def test_the_probe_sees_a_module_that_is_loaded() -> None:
    """The probe can fail: the demo loads the teaching tools it must not find under check."""
    found = loaded_by(["demo"])
    assert "pagedkv.model_tests.teaching.demo" in found and "jinja2" not in found, found


PLUGIN_PROBE = """
import json, os, sys
from importlib.metadata import entry_points
plugins = sorted({entry.value.split(":")[0] for entry in entry_points(group="hypothesis")})
import pagedkv.entry
loaded = [plugin for plugin in plugins if plugin in sys.modules]
print(json.dumps([plugins, loaded, os.environ.get("HYPOTHESIS_NO_PLUGINS")]))
"""


def test_the_command_runs_no_hypothesis_plugin() -> None:
    """The command imports Hypothesis without running the plugins installed packages register
    (``pagedkv/entry.py``: trio's imported trio and pytest, 0.13 CPU s of every start), and
    leaves the environment as it found it (an ``exec:`` target inherits it)."""
    done = subprocess.run(
        [sys.executable, "-c", PLUGIN_PROBE], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    plugins, loaded, switch = json.loads(done.stdout)
    if not plugins:
        pytest.skip("no Hypothesis plugin is installed here")
    assert loaded == [] and switch is None, done.stdout
