"""``pagedkv check --workers N`` (issue 26, item 7): worker ``i`` checks seed ``S + i`` with the
whole budget and makes exactly the runs of that seed's check alone; the verdict is a FAIL if any
worker fails or ends without a verdict, never a pass; a pass counts every worker's runs.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pagedkv import cli
from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle import api, trace
from pagedkv.model_tests.oracle.check import CheckResult, WorkerLost, check_report
from pagedkv.model_tests.oracle.workers import (
    Job,
    WorkerOutcome,
    combine,
    run_workers,
    seeds_of,
    worker_trace,
)
from pagedkv.specs.policy import PAGEDKV, profile

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((ROOT / "specs" / "verdict.schema.json").read_text())
)
POOL_FORK = "pagedkv.model_tests.corpus.pools:PoolForkForgetsLastBlock"
"""Found within 60 calls on seeds 0 to 2 (``specs/corpus.md``): workers of seconds."""
BROKEN_SWAP = "pagedkv.model_tests.independent.broken:BrokenSwapDropsPair"


def job(target: str, level: Any, steps: int, trace_out: Path | None = None) -> Job:
    return Job(
        target, level, profile("pagedkv"), steps, trace_out, None, None, "any", ("full",), None
    )


def run_cli(tmp_path: Path, *argv: str) -> tuple[int, str, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    verdict_path = tmp_path / "verdict.json"
    code = cli.main(["check", *argv, "--json", str(verdict_path)], stdout=out, stderr=err)
    assert err.getvalue() == "" or code == 1, err.getvalue()
    verdict = json.loads(verdict_path.read_text())
    VALIDATOR.validate(verdict)
    assert verdict["exit_code"] == code
    return code, out.getvalue(), verdict


def test_the_seeds_are_consecutive_and_wrap() -> None:
    assert seeds_of(7, 3) == (7, 8, 9)
    assert seeds_of(2**32 - 1, 2) == (2**32 - 1, 0)
    assert worker_trace(Path("/x/t.jsonl"), 8) == Path("/x/t.seed-8.jsonl")


def test_each_worker_makes_the_runs_of_its_seed_alone(tmp_path: Path) -> None:
    outcomes = run_workers(job(POOL_FORK, "pool", 2000, tmp_path / "t.jsonl"), (0, 1), None)
    for outcome in outcomes:
        alone = api.check(POOL_FORK, "pool", seed=outcome.seed, steps=2000)
        assert outcome.result is not None and not outcome.result.passed
        assert outcome.result.found_after == alone.found_after, f"seed {outcome.seed}"
        assert outcome.result.trace_path == tmp_path / f"t.seed-{outcome.seed}.jsonl"


def test_workers_fail_with_the_smallest_failure_and_its_trace(tmp_path: Path) -> None:
    trace_out = tmp_path / "divergence.jsonl"
    code, out, verdict = run_cli(
        tmp_path,
        *("--target", POOL_FORK, "--level", "pool", "--workers", "2", "--seed", "0"),
        *("--steps", "2000", "--trace-out", str(trace_out)),
    )
    assert code == 1 and verdict["verdict"] == "fail"
    assert "seeds 0 to 1 (2 workers)" in out.splitlines()[0]
    assert verdict["seeds"] == [0, 1]
    assert verdict["divergence"]["trace"] == str(trace_out)
    factory = api._factory(POOL_FORK, "pool", None, PAGEDKV)
    assert not trace.replay(trace.read(trace_out), factory).ok
    assert any(note.startswith("note: 2 workers made") for note in verdict["notes"])


def test_workers_pass_counting_every_worker_s_runs(tmp_path: Path) -> None:
    code, out, verdict = run_cli(
        tmp_path, "--target", "reference", "--workers", "2", "--seed", "3", "--steps", "60"
    )
    assert code == 0 and verdict["verdict"] == "pass", out
    alone = [api.check("reference", seed=seed, steps=60) for seed in (3, 4)]
    assert verdict["seeds"] == [3, 4]
    assert verdict["runs"] == sum(result.runs for result in alone)
    assert verdict["calls"] == sum(result.calls for result in alone)


ENDS_ITS_PROCESS = """
import os
from pagedkv.model_tests.independent.manager import IndependentManager

class OsExit(IndependentManager):
    def fork(self, parent_id, child_id):
        os._exit(0)
"""


def test_a_worker_that_ends_its_process_is_a_fail_never_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ends.py").write_text(ENDS_ITS_PROCESS)
    monkeypatch.chdir(tmp_path)
    code, out, verdict = run_cli(
        tmp_path, "--target", "ends:OsExit", "--workers", "2", "--seed", "0", "--steps", "2000"
    )
    assert code == 1 and verdict["verdict"] == "fail", out
    assert "ended before its verdict (exit code 0)" in out


# --- one verdict out of several, without processes ------------------------------------------------


def failing(seed: int, steps: int) -> CheckResult:
    result = CheckResult("manager", seed, runs=10, calls=100)
    result.failure = AssertionError("diverges")
    result.record = RunRecord("manager", object(), (("free", (1,)),) * steps, failed_call=True)
    return result


def passing(seed: int) -> CheckResult:
    return CheckResult("manager", seed, runs=10, calls=100)


def test_one_failing_worker_fails_the_verdict_with_the_smallest_failure() -> None:
    outcomes = [
        WorkerOutcome(0, passing(0)),
        WorkerOutcome(1, failing(1, 5)),
        WorkerOutcome(2, failing(2, 3)),
        WorkerOutcome(3, failing(3, 3)),
    ]
    result = combine(job("t", "manager", 100), outcomes)
    assert not result.passed and result.seed == 2 and result.seeds == (0, 1, 2, 3)
    assert "note: seed 1 fails too (5 steps)" in result.notes
    assert "note: 4 workers made 40 runs, 400 calls in all" in result.notes


def test_a_lost_worker_fails_the_verdict_even_when_the_others_pass() -> None:
    outcomes = [WorkerOutcome(0, passing(0)), WorkerOutcome(1, lost="killed by signal SIGKILL")]
    result = combine(job("t", "manager", 100), outcomes)
    assert isinstance(result.failure, WorkerLost) and not result.passed
    report = check_report(result, "t")
    assert report.verdict == (
        "FAIL: the worker of seed 1 ended before its verdict (killed by signal SIGKILL)"
    )
    with_failure = [*outcomes, WorkerOutcome(2, failing(2, 4))]
    result = combine(job("t", "manager", 100), with_failure)
    assert result.seed == 2 and not result.passed
    assert "note: the worker of seed 1 ended before its verdict" in " ".join(result.notes)


def test_passing_workers_pass_with_every_run_counted() -> None:
    outcomes = [WorkerOutcome(seed, passing(seed)) for seed in (5, 6, 7)]
    result = combine(job("t", "manager", 100), outcomes)
    assert result.passed and (result.runs, result.calls) == (30, 300)
    assert result.all_seeds == (5, 6, 7)


def test_ctrl_c_stops_every_worker_and_is_130(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group; the parent answers it, for every worker."""
    command = [sys.executable, "-m", "pagedkv", "check", "--target", "reference"]
    command += ["--workers", "2", "--steps", "20000", "--seed", "1"]
    started = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PAGEDKV_PROGRESS": "0.5"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert started.stderr is not None
    for line in started.stderr:  # the workers are under way
        if "checking:" in line and not line.split("checking: ")[1].startswith("0 of"):
            break
    os.killpg(started.pid, signal.SIGINT)
    _, err = started.communicate(timeout=60)
    assert started.returncode == 130
    assert err.strip().endswith("pagedkv: interrupted"), err
    deadline = time.monotonic() + 10  # what has ended may wait a moment to be reaped by init
    with pytest.raises(ProcessLookupError):  # nothing of the group is left
        while time.monotonic() < deadline:
            os.killpg(started.pid, 0)
            time.sleep(0.1)
