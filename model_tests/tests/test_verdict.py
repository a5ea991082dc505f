"""A verdict only from a living process, and one line with the right code for everything else
(issue 22, items 2 and 4).

``pagedkv`` exits 0 only after printing its verdict: a target that ends the process, leaves
threads running or kills it is told apart by the thin parent (``pagedkv/supervisor.py``). Timeouts
are FAILs under every command; output that cannot be written, paths that cannot be written and
input Python cannot even print are one line and exit 2. Cases where the process matters run the
real ``pagedkv`` console script in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pagedkv
from pagedkv import cli, supervisor
from pagedkv.model_tests.oracle import trace

PAGEDKV = str(Path(sys.executable).parent / "pagedkv")

ENDS_ITS_PROCESS = """
import ctypes, os, signal, sys, threading, time
from pagedkv.model_tests.independent.broken import BrokenSwapDropsPair
from pagedkv.model_tests.independent.manager import IndependentManager

class OsExit(IndependentManager):
    def fork(self, parent_id, child_id):
        os._exit(0)

class LibcExit(IndependentManager):
    def fork(self, parent_id, child_id):
        ctypes.CDLL(None).exit(0)

class KillsItself(IndependentManager):
    def fork(self, parent_id, child_id):
        os.kill(os.getpid(), signal.SIGKILL)

def leaves_a_thread(config):
    threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon
    return IndependentManager(config)

class SleepsOnFork(IndependentManager):
    def fork(self, parent_id, child_id):
        time.sleep(3600)

class SlowSwapOut(IndependentManager):
    def swap_out(self, group_id):
        time.sleep(40)
        return super().swap_out(group_id)

class MovesAndDrops(BrokenSwapDropsPair):
    def swap_in(self, group_id):
        os.chdir(os.environ["ELSEWHERE"])
        return super().swap_in(group_id)
"""


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with these targets, importable as the current directory."""
    (tmp_path / "ends.py").write_text(ENDS_ITS_PROCESS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(
    *argv: str, env: dict[str, str] | None = None, wait: float = 300, shell_suffix: str = ""
) -> tuple[int, str, str, float]:
    """The console script in a subprocess: (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    command: str | list[str] = [PAGEDKV, *argv]
    if shell_suffix:
        command = " ".join([PAGEDKV, *(f"'{a}'" for a in argv), shell_suffix])
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=wait,
        env={**os.environ, **(env or {})},
        shell=bool(shell_suffix),
        executable="/bin/bash" if shell_suffix else None,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def run_here(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def one_line(err: str, says: str, prefix: str = "pagedkv: error: ") -> None:
    assert err.startswith(prefix) and says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err


needs_fork = pytest.mark.skipif(not supervisor.can_fork(), reason="the parent needs os.fork")


# --- item 2: a verdict only from a living process -------------------------------------------------


_STOPPED_LATE = """
import sys
from pagedkv import cli, supervisor
def command():
    raise {stop}
sys.exit(supervisor.run_apart(command))
"""


@needs_fork
@pytest.mark.parametrize(
    ("stop", "code", "line"),
    [("KeyboardInterrupt", 130, "interrupted"), ("cli.Terminated", 143, "terminated")],
)
def test_a_stop_after_the_command_s_own_handler_is_the_user_s(
    stop: str, code: int, line: str
) -> None:
    """A second Ctrl-C while the command printed its line reached the child's catch-all, which
    called it a bug of pagedkv's (exit 2, "internal error: KeyboardInterrupt")."""
    found = subprocess.run(
        [sys.executable, "-c", _STOPPED_LATE.format(stop=stop)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (found.returncode, found.stderr) == (code, f"pagedkv: {line}\n")


@needs_fork
@pytest.mark.parametrize("target", ["OsExit", "LibcExit"])
def test_a_target_that_ends_the_process_with_0_is_a_fail(hostile: Path, target: str) -> None:
    """It used to exit 0 with nothing printed: a PASS to any script."""
    code, out, err, _ = run("check", "--target", f"ends:{target}", "--seed", "1")
    assert code == 1 and "PASS" not in out, out + err
    one_line(err, "ended (exit status 0) before its verdict", "pagedkv: FAIL: ")


@needs_fork
def test_a_target_that_kills_the_process_is_a_fail(hostile: Path) -> None:
    code, out, err, _ = run("check", "--target", "ends:KillsItself", "--seed", "1")
    assert code == 1 and "PASS" not in out, out + err
    one_line(err, "was killed by SIGKILL before its verdict", "pagedkv: FAIL: ")


@needs_fork
def test_a_thread_the_target_leaves_running_does_not_hold_the_verdict(hostile: Path) -> None:
    """pagedkv used to print its PASS and then wait for the thread (an hour here)."""
    argv = ["check", "--target", "ends:leaves_a_thread", "--seed", "1", "--steps", "200"]
    code, out, err, seconds = run(*argv, wait=120)
    assert code == 0 and "PASS" in out and err == "", out + err
    started = time.monotonic()
    assert run_here("check", "--target", "reference", "--steps", "200", "--seed", "1")[0] == 0
    alone = time.monotonic() - started
    assert seconds < alone + 20, (seconds, alone)  # no wait for the thread, nor the grace


@needs_fork
@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--target", "reference", "--steps", "50"],
        ["replay", "nothing.jsonl", "--target", "reference"],
        ["soak", "--steps", "50"],
        ["record", "--runs", "1"],
        ["bench", "--quick"],
        ["check", "--help"],
    ],
    ids=lambda argv: argv[0] if argv[1] != "--help" else "help",
)
def test_with_stdout_closed_each_command_is_one_line_and_exit_2(
    tmp_path: Path, argv: list[str]
) -> None:
    """Each printed a traceback and exited 1, the FAIL code."""
    os.chdir(tmp_path)
    code, _, err, _ = run(*argv, shell_suffix=">&-", wait=120)
    assert code == 2, err
    one_line(err, "standard output is closed")
    assert not (tmp_path / "pagedkv-traces").exists()  # nothing ran


def test_version_is_printed_by_the_living_parent_s_child(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"pagedkv {pagedkv.__version__}\n"
    code, out, err, _ = run("--version", wait=120)
    assert (code, out, err) == (0, f"pagedkv {pagedkv.__version__}\n", "")


def test_output_that_cannot_be_written_is_one_line_and_exit_2() -> None:
    code, _, err, _ = run(
        "check", "--target", "reference", "--steps", "50", shell_suffix="> /dev/full", wait=120
    )
    assert code == 2, err
    one_line(err, "cannot write the output: No space left on device")


# --- item 4: timeouts are FAILs everywhere -------------------------------------------------------


def test_a_hang_under_soak_is_a_fail_not_an_internal_error(hostile: Path) -> None:
    """It was ``internal error: TargetTimeout``, exit 2 (under check the same hang is a FAIL)."""
    code, out, err = run_here(
        "soak", "--target", "ends:SleepsOnFork", "--steps", "3000", "--seed", "1", "--timeout", "1"
    )
    assert code == 1 and err == "", out + err
    assert "FAIL after" in out and "does not answer in time (hangs)" in out
    assert "did not return from fork(" in out and "within 1 s" in out
    # the episode up to the hang is a trace (it had none), its last call the fork that hung
    written = trace.read(Path("pagedkv-divergence.jsonl"))
    assert written.ops[-1].op == "fork" and "the one that hung last" in out
    # with the run's --timeout: under the default 30 s the replay waits the sleep out and PASSes
    replay = "pagedkv replay pagedkv-divergence.jsonl --target ends:SleepsOnFork --timeout 1"
    assert f"replay: {replay}\n" in out


def test_bench_has_the_same_per_call_timeout_as_check(hostile: Path) -> None:
    """It had none: a target sleeping 40 s per swap_out ran past 300 s."""
    started = time.monotonic()
    code, out, err = run_here(
        "bench",
        *("--quick", "--scaling", "", "--no-reference"),
        *("--target", "ends:SlowSwapOut", "--timeout", "1"),
    )
    assert code == 1 and err == "", out + err
    assert "FAIL: ends:SlowSwapOut does not answer in time (hangs)" in out
    assert "did not return from swap_out(" in out and "within 1 s" in out
    assert time.monotonic() - started < 60  # the first swap_out, stopped after 1 s


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main([command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_bench_and_soak_take_the_timeout_option_of_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    timeout = help_of("check", capsys).split("--timeout SECONDS ")[1]
    assert help_of("bench", capsys).split("--timeout SECONDS ")[1] == timeout
    assert help_of("soak", capsys).split("--timeout SECONDS ")[1] == timeout


# --- item 4: one-line errors that were internal errors -------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["bench", "--quick", "--json", "/proc/pagedkv.json"], "/proc/pagedkv.json: cannot be"),
        (["bench", "--quick", "--plot", "/proc/pagedkv.png"], "/proc/pagedkv.png: cannot be"),
        (["bench", "--scaling", str(2**40)], "block counts from 1 to 2**24"),
        (["check", "--target", "reference", "--trace-out", "/proc/x.jsonl"], "cannot be written"),
        (["soak", "--trace-out", "/proc/x.jsonl"], "/proc/x.jsonl: cannot be written"),
    ],
    ids=["bench-json", "bench-plot", "bench-scaling", "check-trace-out", "soak-trace-out"],
)
def test_a_place_that_cannot_be_written_is_refused_before_anything_runs(
    argv: list[str], says: str
) -> None:
    """``bench --json`` to an unwritable path ran the whole benchmark, then said ``internal
    error``; ``check --trace-out /proc/x.jsonl`` ran the search and exited 0 with no trace."""
    code, out, err = run_here(*argv)
    assert (code, out) == (2, ""), out + err
    one_line(err, says)


def test_a_trace_out_inside_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    code, out, err = run_here(
        "check", "--target", "reference", "--trace-out", str(tmp_path / "file" / "x.jsonl")
    )
    assert (code, out) == (2, "")
    one_line(err, "is not a directory")


def test_a_trace_out_whose_folder_is_missing_is_tried_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder is made when a trace is written (``--help`` says so); trying it at the start
    leaves nothing behind."""
    assert "a missing folder is made" in help_of("check", capsys)
    where = tmp_path / "new" / "deeper" / "x.jsonl"
    assert trace.check_writable(where) == where
    assert list(tmp_path.iterdir()) == []
    code, _, _ = run_here(
        "check", "--target", "reference", "--steps", "50", "--seed", "0", "--trace-out", str(where)
    )
    assert code == 0 and list(tmp_path.iterdir()) == []


def test_trace_out_is_resolved_before_the_target_changes_directory(
    hostile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target moves to another directory before it diverges: the trace is written where
    the user named it, and the report names that place."""
    elsewhere = hostile / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("ELSEWHERE", str(elsewhere))
    code, out, err = run_here(
        "check", "--target", "ends:MovesAndDrops", "--seed", "0", "--trace-out", "t/x.jsonl"
    )
    assert code == 1, out + err
    assert "trace: t/x.jsonl" in out and "page: t/x.html" in out
    assert (hostile / "t" / "x.jsonl").is_file() and (hostile / "t" / "x.html").is_file()
    assert list(elsewhere.iterdir()) == []


def test_demo_on_an_ascii_only_stdout_draws_in_ascii() -> None:
    """It was ``internal error: UnicodeEncodeError``."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    code = cli.main(["demo"], stdout=stream, stderr=io.StringIO())
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert code == 0 and "step 23 of 23" in text
    assert "-- step 1 of 23" in text  # the rule drawn with ASCII


def test_demo_step_with_stdin_closed_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's ``sys.stdin`` is None where descriptor 0 was closed: it was ``internal error:
    AttributeError``."""
    monkeypatch.setattr(sys, "stdin", None)
    code, out, err = run_here("demo", "--step")
    assert (code, out) == (2, "")
    one_line(err, "--step waits for Enter on standard input, which is closed")


def test_a_trace_version_of_5000_digits_is_one_line(tmp_path: Path) -> None:
    """Python will not read (nor print) an int of more than 4300 digits: it was ``internal
    error: ValueError``."""
    header = {
        "format": "pagedkv-trace",
        "version": 0,
        "level": "manager",
        "config": {"block_size": 2, "num_gpu_blocks": 4, "num_cpu_blocks": 2},
    }
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(header).replace('"version": 0', '"version": ' + "9" * 5000) + "\n")
    code, out, err = run_here("replay", str(path), "--target", "reference")
    assert (code, out) == (2, "")
    one_line(err, "line 1: not a protocol value: a number longer than 4300 digits")


def test_a_huge_option_value_is_quoted_short(tmp_path: Path) -> None:
    code, out, err = run_here("check", "--target", "reference", "--steps", "9" * 5000)
    assert (code, out) == (2, "")
    one_line(err, "argument --steps: expected a whole number from 1, got '999")
    assert len(err) < 200, err
