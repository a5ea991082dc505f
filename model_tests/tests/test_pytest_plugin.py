"""The pytest plugin is ``pagedkv check`` in a test: the same options (as the fixture's
arguments, the ``pagedkv`` marker, ``--pagedkv-*`` and ini keys, in that order of precedence),
the same budget, the same verdict and report on the same seed; a seed of its own per test,
stable from one session to the next.

The test files run in this process (``pytester``); budgets are small but for the comparison with
the command line, which needs a failure the known file does not cover."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pagedkv
from pagedkv import cli
from pagedkv.model_tests.oracle.check import budget, default_steps
from pagedkv.model_tests.oracle.codec import LEVELS
from pagedkv.model_tests.oracle.plugin_settings import Source, derived_seed, resolve

pytest_plugins = ["pytester"]

BROKEN = "pagedkv.model_tests.independent.request_broken:RequestHitNotCapped"
"""Caught at the request level in 13 runs on seed 3, past the events the known file names."""
KNOWN = """\
level = "request"
[[difference]]
name = "vllm-events"
operation = "*"
kind = "events"
"""
"""The reference's events differ from profile vllm-v1's (its ``AllBlocksCleared`` without
caching): the known file steps past them, so that the check reaches the target's own defect."""
OPTIONS = {"level": "request", "groups": "full", "profile": "vllm-v1", "seed": 3, "steps": 900}


def run_cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def cli_argv(target: str, known: Path, trace_out: Path, verdict: Path) -> list[str]:
    argv = ["check", "--target", target, "--known", str(known), "--trace-out", str(trace_out)]
    for name, value in OPTIONS.items():
        argv += [f"--{name}", str(value)]
    return [*argv, "--json", str(verdict)]


def found_after(report: str) -> str:
    found = re.search(r"found after \d+ calls? in \d+ runs?", report)
    assert found, report
    return found.group()


def test_a_test_fails_and_passes_as_pagedkv_check_does(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Profile, known file, level, groups and a fixed seed: the broken target fails with the
    check's own title, verdict, known line, steps and kind; the reference passes with its runs
    and calls."""
    known = pytester.path / "known.toml"
    known.write_text(KNOWN)
    pytester.makepyfile(
        test_engine=f"""
        import json
        OPTIONS = {OPTIONS!r}

        def test_broken(pagedkv_oracle):
            pagedkv_oracle({BROKEN!r}, known="known.toml", **OPTIONS)

        def test_reference(pagedkv_oracle):
            result = pagedkv_oracle("reference", known="known.toml", **OPTIONS)
            print("RESULT", json.dumps([result.runs, result.calls, result.stepped.total]))
        """
    )
    outcome = pytester.runpytest("-s", "-p", "no:cacheprovider")
    outcome.assert_outcomes(failed=1, passed=1)
    plugin = outcome.stdout.str()

    verdict = tmp_path / "verdict.json"
    code, shown = run_cli(*cli_argv(BROKEN, known, tmp_path / "t.jsonl", verdict))
    assert code == 1, shown
    wanted = json.loads(verdict.read_text())
    cli_lines = shown.splitlines()
    title = next(line for line in cli_lines if line.startswith("pagedkv check "))
    assert "seed 3" in title and "profile vllm-v1" in title and "groups full" in title
    assert title in plugin.splitlines()
    assert found_after(plugin) == found_after(shown)
    known_line = next(line for line in cli_lines if line.startswith("known differences ("))
    assert known_line in plugin.splitlines()
    # The failure's report only: under CI=true pytest repeats the whole message in the short
    # summary, which would list every step twice.
    report = plugin.partition("short test summary info")[0]
    steps = [line for line in report.splitlines() if re.match(r"\s+\d+\. .* -> ", line)]
    divergence = wanted["divergence"]
    assert len(steps) == len(divergence["steps"]) and steps[-1].endswith("<-- diverges")
    assert f" {divergence['operation']}(" in steps[-1]
    kind = f"kind: {', '.join(divergence['kind'])} (at {divergence['operation']}); to step past it"
    assert f"{kind}, put this in a file and pass known=FILE (to pagedkv_oracle" in plugin
    assert "--known FILE" not in plugin
    trace = re.search(r"^trace: (\S+)$", plugin, re.MULTILINE)
    assert trace and Path(trace.group(1)).is_file()

    code, shown = run_cli(*cli_argv("reference", known, tmp_path / "r.jsonl", verdict))
    assert code == 0, shown
    passed = json.loads(verdict.read_text())
    ran = re.search(r"RESULT (.*)$", plugin, re.MULTILINE)
    assert ran, plugin
    assert json.loads(ran.group(1)) == [passed["runs"], passed["calls"], passed["known"]["runs"]]


PRECEDENCE = """
import pytest

pytestmark = pytest.mark.pagedkv(steps=90)

def show(result):
    print("RESULT", result.level, result.runs, result.seed, result.contract, result.profile.name)

def test_module_marker_and_ini(pagedkv_oracle):
    show(pagedkv_oracle("reference"))

@pytest.mark.pagedkv(steps=60, seed=5, profile="safety")
def test_own_marker(pagedkv_oracle):
    show(pagedkv_oracle("reference"))

@pytest.mark.pagedkv(steps=60, contract="any", profile="safety")
def test_call(pagedkv_oracle):
    show(pagedkv_oracle("reference", steps=30, seed=7, profile="pagedkv"))
"""


def results(outcome: pytest.RunResult) -> list[list[str]]:
    """What the inner tests printed after ``RESULT`` (where pytest's progress may precede it)."""
    return [line.partition("RESULT ")[2].split() for line in outcome.outlines if "RESULT " in line]


def test_the_call_beats_the_marker_beats_the_command_line_beats_the_ini_file(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        """
        [pytest]
        pagedkv_steps = 120
        pagedkv_contract = scheduler
        pagedkv_seed = 11
        pagedkv_level = request
        """
    )
    pytester.makepyfile(test_options=PRECEDENCE)
    runs = {steps: str(budget(steps)[0]) for steps in (30, 60, 90)}
    outcome = pytester.runpytest("-s", "-p", "no:cacheprovider")
    outcome.assert_outcomes(passed=3)
    assert results(outcome) == [
        ["request", runs[90], "11", "scheduler", "pagedkv"],
        ["request", runs[60], "5", "scheduler", "safety"],
        ["request", runs[30], "7", "any", "pagedkv"],
    ]
    outcome = pytester.runpytest("-s", "-p", "no:cacheprovider", "--pagedkv-seed", "13")
    outcome.assert_outcomes(passed=3)
    assert [result[2] for result in results(outcome)] == ["13", "5", "7"]


SEEDS = """
def test_one(pagedkv_oracle):
    print("RESULT", pagedkv_oracle("reference", steps=30).seed)

def test_two(pagedkv_oracle):
    print("RESULT", pagedkv_oracle("reference", steps=30).seed)
"""


def test_a_test_has_its_own_seed_in_every_session(pytester: pytest.Pytester) -> None:
    """Derived from the node id: the same in another process under another hash seed; another
    for another test; ``--pagedkv-seed random`` draws new ones."""
    pytester.makepyfile(test_seeds=SEEDS)
    derived = [[str(derived_seed(f"test_seeds.py::test_{name}"))] for name in ("one", "two")]
    assert derived[0] != derived[1]
    assert results(pytester.runpytest("-s", "-p", "no:cacheprovider")) == derived
    root = Path(pagedkv.__file__).parent.parent  # this checkout, not whatever is installed
    other = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_seeds.py"],
        cwd=pytester.path,
        env={**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = other.stdout.splitlines()
    assert [line.partition("RESULT ")[2].split() for line in lines if "RESULT " in line] == (
        derived
    ), lines
    drawn = results(pytester.runpytest("-s", "-p", "no:cacheprovider", "--pagedkv-seed=random"))
    assert len(drawn) == 2 and not {drawn[0][0], drawn[1][0]} & {derived[0][0], derived[1][0]}


def test_the_seed_is_in_the_failure_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_failing="""
        from pagedkv import ReferenceBlockSpaceManager

        class CountsWrong(ReferenceBlockSpaceManager):
            def get_num_free_gpu_blocks(self):
                return super().get_num_free_gpu_blocks() + 1

        def test_counts(pagedkv_oracle):
            pagedkv_oracle(CountsWrong, steps=30)
        """
    )
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    outcome.assert_outcomes(failed=1)
    seed = derived_seed("test_failing.py::test_counts")
    outcome.stdout.fnmatch_lines(
        [
            f"pagedkv check * (manager level, isomorphic mode, profile pagedkv, seed {seed})",
            "FAIL: the target diverges from the reference*",
            f"seed {seed}: derived from the test's id, the same in every session*",
        ]
    )


@pytest.mark.parametrize(
    ("written", "cli_argv", "plugin_says"),
    [
        ("@pytest.mark.pagedkv(steps=0)", ["--steps", "0"], "marker pagedkv(steps=...)"),
        ("@pytest.mark.pagedkv(level='x')", ["--level", "x"], "marker pagedkv(level=...)"),
        ("@pytest.mark.pagedkv(timeout=-1)", ["--timeout", "-1"], "marker pagedkv(timeout=...)"),
        ("@pytest.mark.pagedkv(groups='full,x')", ["--groups", "full,x"], "marker pagedkv(gro"),
        ("@pytest.mark.pagedkv(contract='y')", ["--contract", "y"], "marker pagedkv(contract="),
        ("@pytest.mark.pagedkv(policy={'foo': '1'})", ["--policy", "foo=1"], "marker pagedkv(pol"),
        ("@pytest.mark.pagedkv(profile='vllm-v1')", ["--profile", "vllm-v1"], ""),
    ],
)
def test_a_bad_option_reads_as_the_command_line_says_it(
    pytester: pytest.Pytester, written: str, cli_argv: list[str], plugin_says: str
) -> None:
    code, shown = run_cli("check", "--target", "reference", *cli_argv)
    assert code == 2, shown
    message = (
        shown.strip().removeprefix("pagedkv: error: ").removesuffix(" (see pagedkv check --help)")
    )
    message = re.sub(r"^argument --\w+: ", "", message)
    pytester.makepyfile(
        test_bad=f"""
        import pytest

        {written}
        def test_it(pagedkv_oracle):
            pagedkv_oracle("reference")
        """
    )
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    outcome.assert_outcomes(failed=1)
    said = f"pagedkv: {plugin_says}*: {message}" if plugin_says else f"pagedkv: {message}"
    outcome.stdout.fnmatch_lines([said.replace("[", "[[]")])


def test_a_bad_session_option_stops_the_session_at_once(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npagedkv_level = x\n")
    pytester.makepyfile(test_any="def test_it():\n    pass\n")
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(
        ["*pagedkv: ini pagedkv_level: invalid choice: 'x' (choose from 'manager', *"]
    )
    outcome = pytester.runpytest("-p", "no:cacheprovider", "--pagedkv-steps", "many")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(
        ["*pagedkv: --pagedkv-steps: expected a whole number from 1, got 'many'*"]
    )


def test_the_default_budget_is_the_command_lines() -> None:
    """Checked as numbers, not run: 16,000 steps (32,000 at the request level), as ``pagedkv
    check`` takes when ``--steps`` is not given."""
    assert cli.parser().parse_args(["check", "--target", "reference"]).steps is None
    for level in LEVELS:
        given = Source({"level": level}, lambda name: f"argument {name}", Path.cwd())
        steps = resolve([given], nodeid="test_x.py::test_y").steps
        assert steps == default_steps(level) == (32_000 if level == "request" else 16_000)


def test_known_files_in_a_marker_are_read_from_the_test_files_folder(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "checks").mkdir()
    (pytester.path / "checks" / "known.toml").write_text(KNOWN)
    (pytester.path / "checks" / "test_known.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.pagedkv(known="known.toml", level="request", profile="vllm-v1")
            def test_it(pagedkv_oracle):
                result = pagedkv_oracle("reference", groups="full", steps=300, seed=3)
                print("RESULT", result.stepped.known.source)
            """
        )
    )
    outcome = pytester.runpytest("-s", "-p", "no:cacheprovider", "checks")
    outcome.assert_outcomes(passed=1)
    assert results(outcome) == [[str(pytester.path / "checks" / "known.toml")]]
