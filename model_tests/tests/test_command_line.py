"""The command line never lies: hostile targets, traces, options and environments.

Each of the thirteen cases of the command line's threat list (issue 10) gets exit code 2 and one
clear line on stderr, or the right verdict, with no traceback and nothing left running. Cases
where the process matters (``sys.exit`` in a target, hangs, process groups) run the real
``pagedkv`` console script in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pagedkv import cli
from pagedkv.model_tests.independent.manager import IndependentManager
from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle import exec_target, trace
from pagedkv.model_tests.oracle.check import CheckResult, check_report, run_check
from pagedkv.model_tests.oracle.guard import GuardedFactory, TargetCrash
from pagedkv.model_tests.oracle.known import finding_of
from pagedkv.model_tests.oracle.timeout import FOREVER, TargetTimeout
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.errors import ConfigurationError, InvalidArgumentError
from pagedkv.specs.types import ManagerConfig, PoolConfig

PAGEDKV = str(Path(sys.executable).parent / "pagedkv")

HOSTILE = """
import sys, time
from pagedkv.model_tests.independent.manager import IndependentManager

class ExitsZero(IndependentManager):
    def fork(self, parent_id, child_id):
        sys.exit()

class ExitsOne(IndependentManager):
    def fork(self, parent_id, child_id):
        sys.exit(1)

class RaisesGeneratorExit(IndependentManager):
    def free(self, seq_id):
        raise GeneratorExit

class LoopsForever(IndependentManager):
    def fork(self, parent_id, child_id):
        while True:
            pass

def exits_while_built(config):
    sys.exit(0)
"""

HANGS_ON_FORK = """
import json, os, sys, time
from pagedkv.model_tests.oracle.example_peer import Peer

peer = Peer("independent")
with open(sys.argv[1], "a") as log:
    log.write(f"{os.getpid()}\\n")
for line in sys.stdin:
    if json.loads(line).get("op") == "fork":
        time.sleep(3600)
    sys.stdout.write(json.dumps(peer.answer(line)) + "\\n")
    sys.stdout.flush()
"""


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with hostile targets, importable as the current directory."""
    (tmp_path / "hostile.py").write_text(HOSTILE)
    (tmp_path / "hangs_on_fork.py").write_text(HANGS_ON_FORK)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(
        f"#!/bin/sh\n{sys.executable} {tmp_path / 'hangs_on_fork.py'} {tmp_path / 'pids'}\n"
    )
    wrapper.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*argv: str, env: dict[str, str] | None = None, wait: float = 300) -> tuple[int, str, str]:
    """The console script in a subprocess: (exit code, stdout, stderr)."""
    done = subprocess.run(
        [PAGEDKV, *argv],
        capture_output=True,
        text=True,
        timeout=wait,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def run_here(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def one_line(err: str, says: str) -> None:
    assert err.startswith("pagedkv: error: ") and says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it is not)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


# --- 1 and 8: a target that raises SystemExit or GeneratorExit diverges ------------------------


@pytest.mark.parametrize(
    ("target", "raised"),
    [("ExitsZero", "SystemExit()"), ("ExitsOne", "SystemExit(1)")],
)
def test_1_a_target_calling_sys_exit_is_a_divergence_not_a_pass(
    hostile: Path, target: str, raised: str
) -> None:
    code, out, err = run("check", "--target", f"hostile:{target}", "--seed", "1")
    assert code == 1 and err == "", out + err
    assert "FAIL: the target diverges" in out and raised in out, out


def test_1_a_factory_calling_sys_exit_is_one_line(hostile: Path) -> None:
    code, out, err = run("check", "--target", "hostile:exits_while_built")
    assert code == 2 and out == ""
    one_line(err, "the factory raised TargetCrash: SystemExit(0)")


def test_1_a_module_calling_sys_exit_when_imported_is_one_line(hostile: Path) -> None:
    (hostile / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    code, out, err = run("check", "--target", "exits_on_import:make")
    assert code == 2 and out == ""
    one_line(err, "importing exits_on_import raised SystemExit")


def test_8_a_target_raising_generator_exit_is_a_divergence(hostile: Path) -> None:
    code, out, err = run_here("check", "--target", "hostile:RaisesGeneratorExit", "--seed", "1")
    assert code == 1 and err == "", out + err
    assert "GeneratorExit()" in out and "<-- diverges" in out


def test_a_base_exception_never_reaches_the_caller() -> None:
    """The guard turns it into an ordinary exception, whatever the call."""

    class Quits:
        def free(self, seq_id: int) -> None:
            raise KeyboardInterrupt  # its own, not the user's Ctrl-C

    for timeout in (5.0, FOREVER):
        target = GuardedFactory(lambda config: Quits(), timeout)(None)
        expected = KeyboardInterrupt if timeout == FOREVER else TargetCrash
        with pytest.raises(expected):  # inline, a KeyboardInterrupt is the user's: it goes up
            target.free(1)


# --- 2, 3, 4 and 12: traces that must be refused -----------------------------------------------

HEADER: dict[str, Any] = {
    "format": "pagedkv-trace",
    "version": 2,
    "level": "manager",
    "config": {"block_size": 2, "num_gpu_blocks": 4, "num_cpu_blocks": 2},
}
FREE = {"op": "free", "args": [1], "expect": {"error": "UnknownSequenceError"}}
END = {"end": "pagedkv-trace", "steps": 1}


def lines(*values: Any) -> str:
    return "".join((v if isinstance(v, str) else json.dumps(v)) + "\n" for v in values)


def with_field(value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**value, **extra}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            lines(HEADER, '{"op": "free", "args": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            "line 2: not a protocol value: nested deeper than 16 levels",
        ),
        (
            lines({**HEADER, "config": {**HEADER["config"], "num_gpu_blocks": 10**12}}),
            "line 1: config: num_gpu_blocks must be at most 2**24 (16777216), got 1000000000000",
        ),
        (
            lines({**HEADER, "config": {**HEADER["config"], "block_size": 2**17}}),
            "block_size must be at most 2**16",
        ),
        (lines(HEADER, FREE, FREE, {**END, "steps": 2})[: -len(json.dumps(END)) - 1], "truncated"),
        (lines(HEADER, FREE), "truncated after line 2"),
        (lines(HEADER, FREE, {**END, "steps": 3}), "the trailer says 3 steps but the trace has 1"),
        (lines(HEADER, FREE, END, FREE), "nothing may follow the trailer (line 3)"),
        (lines(HEADER, with_field(FREE, note="hi"), END), "unknown field(s) in an operation: note"),
        (lines(with_field(HEADER, comment="x"), END), "unknown field(s) in the header: comment"),
        (lines(HEADER, FREE, with_field(END, x=1)), "unknown field(s) in the trailer: x"),
        (
            lines({**HEADER, "config": {**HEADER["config"], "colour": 1}}),
            "unknown field(s) colour",
        ),
        (lines(HEADER, "NaN"), "line 2: NaN is not JSON"),
    ],
    ids=[
        "2-nested",
        "3-huge-header",
        "3-huge-block",
        "12-cut-at-a-line",
        "12-no-trailer",
        "12-wrong-count",
        "12-after-trailer",
        "12-unknown-op-field",
        "12-unknown-header-field",
        "12-unknown-trailer-field",
        "12-unknown-config-field",
        "nan",
    ],
)
def test_a_bad_trace_is_one_line_and_exit_2(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    code, out, err = run_here("replay", str(path), "--target", "reference")
    assert code == 2 and out == "", out
    one_line(err, says)


def test_4_dev_zero_is_refused_at_once() -> None:
    code, out, err = run("replay", "/dev/zero", "--target", "reference", wait=60)
    assert code == 2 and out == ""
    one_line(err, "/dev/zero: line 1 is longer than 1 MiB")


def test_4_a_trace_larger_than_the_limit_is_refused_while_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(lines(HEADER, *[FREE] * 50, {**END, "steps": 50}))
    assert trace.read(path).ops  # within the limits: read
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 1000)
    with pytest.raises(trace.TraceError, match="larger than 0 MiB: not read"):
        trace.read(path)


@pytest.mark.parametrize("command", ["replay", "show"])
def test_a_trace_too_large_for_the_reference_is_refused_up_front(
    tmp_path: Path, command: str
) -> None:
    """At the validation bound (2**24 blocks a device) the reference took 3.4 GB and 165 s to
    build; such a trace is refused in one line before anything is built."""
    config = ManagerConfig(16, 2**24, 2**24)
    path = trace.write(trace.Trace("manager", config), tmp_path / "big.jsonl")
    started = time.monotonic()
    extra = ["--target", "optimized"] if command == "replay" else []
    code, out, err = run_here(command, str(path), *extra)
    assert (code, out) == (2, ""), err
    one_line(err, f"big.jsonl: the configuration has {2**25:,} blocks; the reference replays")
    assert time.monotonic() - started < 30  # nothing was built
    fits = trace.write(trace.Trace("manager", ManagerConfig(16, 2**19, 2**19)), path)
    trace.check_reference_size(trace.read(fits).config)  # the bound itself is accepted


def test_12_a_version_1_trace_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(lines({**HEADER, "version": 1}, FREE))  # no trailer in version 1
    code, out, err = run_here("replay", str(path), "--target", "reference")
    assert code == 0 and "PASS: 1 steps" in out, out + err


def test_a_written_trace_ends_with_its_step_count(tmp_path: Path) -> None:
    config = ManagerConfig(2, 4, 2)
    made = trace.trace_of_calls("manager", config, [("free", (1,)), ("free", (2,))])
    path = trace.write(made, tmp_path / "t.jsonl")
    last = json.loads(path.read_text().splitlines()[-1])
    assert last == {"end": "pagedkv-trace", "steps": 2}
    assert trace.read(path).ops == made.ops


# --- 3: configuration bounds, in every implementation ------------------------------------------

MANAGERS = [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager, IndependentManager]


@pytest.mark.parametrize("make", MANAGERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("config", "says"),
    [
        (ManagerConfig(2, 2**80, 1), "num_gpu_blocks must be at most 2**24"),
        (ManagerConfig(2, 4, 2**24 + 1), "num_cpu_blocks must be at most 2**24"),
        (ManagerConfig(2**16 + 1, 4, 1), "block_size must be at most 2**16"),
        (ManagerConfig(2, 4, 1, sliding_window=2**31 + 1), "sliding_window must be at most"),
    ],
)
def test_3_every_manager_refuses_a_configuration_too_large(
    make: Any, config: ManagerConfig, says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says.replace("*", r"\*")):
        make(config)


@pytest.mark.parametrize("make", [ReferenceBlockPool, OptimizedBlockPool], ids=lambda c: c.__name__)
def test_3_every_pool_refuses_a_configuration_too_large(make: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"num_blocks must be at most 2\*\*24"):
        make(PoolConfig(2**24 + 1, 2))
    with pytest.raises(ConfigurationError, match=r"block_size must be at most 2\*\*16"):
        make(PoolConfig(4, 2**16 + 1))


def test_3_the_largest_configuration_is_accepted() -> None:
    ReferenceBlockPool(PoolConfig(4, 2**16))
    ReferenceBlockSpaceManager(ManagerConfig(2**16, 4, 2, sliding_window=2**31))


# --- 13: lookup validates its hash, in both pools -----------------------------------------------


@pytest.mark.parametrize("make", [ReferenceBlockPool, OptimizedBlockPool], ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [[], b"short", None, "x" * 32], ids=repr)
def test_13_lookup_of_a_bad_hash_raises_the_typed_error(make: Any, bad: Any) -> None:
    pool = make(PoolConfig(4, 2))
    with pytest.raises(InvalidArgumentError, match="a content hash is 32 bytes"):
        pool.lookup(bad)


# --- 5, 6: where results go ---------------------------------------------------------------------


def test_5_trace_out_naming_a_directory_is_refused_before_the_search(tmp_path: Path) -> None:
    target = (
        "pagedkv.model_tests.independent.broken:BrokenNoUpFrontCheck"  # would fail, after a search
    )
    code, out, err = run_here(
        "check", "--target", target, "--steps", "100000", "--trace-out", str(tmp_path)
    )
    assert code == 2 and out == ""  # no search ran: it would have printed a report
    one_line(err, "is a directory, not a file")


def test_6_record_refuses_a_file_and_existing_traces_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    code, out, err = run_here("record", "--out", str(tmp_path / "file"))
    assert code == 2 and out == ""
    one_line(err, "exists and is not a directory")
    corpus = tmp_path / "corpus"
    assert run_here("record", "--level", "pool", "--runs", "4", "--out", str(corpus))[0] == 0
    before = sorted(corpus.iterdir())
    code, out, err = run_here("record", "--level", "pool", "--runs", "4", "--out", str(corpus))
    assert code == 2 and out == ""
    one_line(err, "pool trace(s) (pool-0001.jsonl, ...); --force replaces them")
    assert sorted(corpus.iterdir()) == before
    code, out, _ = run_here(
        "record", "--level", "pool", "--runs", "4", "--out", str(corpus), "--force"
    )
    assert code == 0 and "pool:" in out


# --- 7: the environment -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "argv"),
    [
        ("PAGEDKV_EXEC_TIMEOUT", "abc", ["check", "--target", "reference"]),
        ("PAGEDKV_TIMEOUT", "-1", ["replay", "x.jsonl", "--target", "reference"]),
        ("PAGEDKV_TIMEOUT", "nan", ["soak", "--steps", "10"]),
        ("PAGEDKV_TRACEBACK", "yes", ["check", "--target", "reference"]),
    ],
)
def test_7_a_bad_environment_value_is_one_line(
    tmp_path: Path, variable: str, value: str, argv: list[str]
) -> None:
    done = subprocess.run(
        [PAGEDKV, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, variable: value},
    )
    assert done.returncode == 2 and done.stdout == ""
    one_line(done.stderr, f"{variable}={value!r}")


def test_7_the_timeout_is_read_only_where_it_counts(tmp_path: Path) -> None:
    # --timeout overrides the environment; record never calls a target; every variable that is
    # set is checked, the former name too
    bad = {"PAGEDKV_TIMEOUT": "abc"}
    code, out, err = run(
        "check", "--target", "reference", "--steps", "300", "--seed", "0", "--timeout", "5", env=bad
    )
    assert code == 0 and "PASS" in out, out + err
    code, out, err = run("record", "--out", str(tmp_path / "r"), "--runs", "1", env=bad)
    assert code == 0, err
    both = {"PAGEDKV_TIMEOUT": "5", "PAGEDKV_EXEC_TIMEOUT": "abc"}
    code, out, err = run("check", "--target", "reference", "--steps", "50", env=both)
    assert code == 2
    one_line(err, "PAGEDKV_EXEC_TIMEOUT='abc'")


@pytest.mark.parametrize("seed", ["-1", "abc", "1.5"])
def test_a_seed_is_a_whole_number_from_0(seed: str) -> None:
    code, out, err = run_here("check", "--target", "reference", "--seed", seed)
    assert code == 2 and out == ""
    assert "expected a whole number from 0" in err and err.count("\n") == 1, err


ARGUMENT_ERROR = re.compile(
    r"pagedkv: error: argument --[a-z-]+: expected [^\n]+, got '[^']*'"
    r" \(see pagedkv [a-z]+ --help\)\n"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--target", "reference", "--steps", "0"],
        ["check", "--target", "reference", "--steps", "many"],
        ["check", "--target", "reference", "--seed", "-1"],
        ["check", "--target", "reference", "--timeout", "-1"],
        ["check", "--target", "reference", "--policy", "eviction"],
        ["record", "--runs", "0"],
        ["soak", "--steps", "0"],
        ["bench", "--reps", "0"],
        ["bench", "--scaling-calls", "-5"],
        ["bench", "--reference-calls", "-1"],
        ["bench", "--scaling", "1024,0"],
        ["bench", "--seed", "x"],
    ],
    ids=" ".join,
)
def test_every_bad_option_value_is_one_line_of_one_shape(argv: list[str]) -> None:
    """``--steps 0`` and ``--seed -1`` were two shapes; every option's bad value is now argparse's
    ``argument --NAME: expected ..., got '...'``, exit 2."""
    code, out, err = run_here(*argv)
    assert (code, out) == (2, ""), err
    assert ARGUMENT_ERROR.fullmatch(err), err


def test_7_the_timeout_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    target = "pagedkv.model_tests.independent.manager:IndependentManager"
    monkeypatch.setenv("PAGEDKV_TIMEOUT", "0")
    code, out, err = run_here("check", "--target", target, "--steps", "200", "--seed", "2")
    assert code == 0 and "PASS" in out, out + err
    assert GuardedFactory(IndependentManager).timeout == FOREVER
    monkeypatch.setenv("PAGEDKV_TIMEOUT", "off")
    assert GuardedFactory(IndependentManager).timeout == FOREVER
    assert GuardedFactory(IndependentManager, timeout=2.5).timeout == 2.5  # --timeout wins


def test_7_a_bad_profile_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    conftest = Path(__file__).parent / "conftest.py"
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_nothing.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PAGEDKV_PROFILE": "fast"},
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "PAGEDKV_PROFILE='fast': expected one of dev, ci, fuzz" in done.stderr
    assert "Traceback" not in done.stderr


# --- 9, 10, 11: hangs ---------------------------------------------------------------------------


def test_9_an_in_process_target_that_loops_forever_times_out(hostile: Path) -> None:
    code, out, err = run(
        "check", "--target", "hostile:LoopsForever", "--seed", "1", "--timeout", "2", wait=120
    )
    assert code == 1 and err == "", out + err
    assert "does not answer in time (hangs)" in out
    assert "did not return from fork(" in out and "within 2 s" in out
    assert "not shrunk or replayed" in out  # a hung thread is not called again


def peer_pids(directory: Path) -> list[int]:
    path = directory / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_10_a_wrapper_whose_child_hangs_is_killed_with_its_child(hostile: Path) -> None:
    code, out, err = run(
        "check", "--target", "exec:./wrapper.sh", "--seed", "1", "--timeout", "2", wait=300
    )
    assert code == 1 and err == "", out + err
    assert "did not answer 'fork'" in out and "its process group was killed" in out
    pids = peer_pids(hostile)
    assert pids  # the children of the wrapper really ran
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)], "a peer outlived pagedkv"


def test_10_closing_a_factory_kills_each_program_with_its_children(hostile: Path) -> None:
    factory = exec_target.ExecFactory([str(hostile / "wrapper.sh")], "manager", timeout=30)
    target = factory(ManagerConfig(2, 4, 2))
    assert target.get_num_free_gpu_blocks() == 4
    target.close()  # back to the factory, idle
    pids = peer_pids(hostile)
    assert pids and all(alive(pid) for pid in pids)
    factory.close()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)], "a peer's child outlived its factory"


LEAVES_ITS_GROUP = """#!/bin/sh
# children that leave the process group: one stays the wrapper's child, one is orphaned at once
ESCAPE='import os, sys, time; os.setsid(); open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(999)'
{python} -c "$ESCAPE" {pids}/stays &
( {python} -c "$ESCAPE" {pids}/orphaned & )
exec sleep 999
"""


def test_10_children_that_left_the_process_group_are_killed_too(tmp_path: Path) -> None:
    """``setsid`` took them out of the group the timeout kills; pagedkv finds them below the
    program, or adopted as a subreaper after their parent exited, and kills them as well."""
    pids = tmp_path / "pids"
    pids.mkdir()
    wrapper = tmp_path / "leaves.sh"
    wrapper.write_text(LEAVES_ITS_GROUP.format(python=sys.executable, pids=pids))
    wrapper.chmod(0o755)
    code, out, err = run("check", "--target", f"exec:{wrapper}", "--timeout", "3", wait=120)
    assert code == 2 and "did not answer 'create' within 3 s" in err, out + err
    escaped = [int(path.read_text()) for path in pids.iterdir()]
    assert len(escaped) == 2  # both really ran, each in a session of its own
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in escaped) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in escaped if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a process that left the group outlived pagedkv"


def test_11_a_hang_is_waited_for_in_full_once(hostile: Path) -> None:
    """The first timeout fails the run at once; minimizing then replays with a short wait."""
    factory = exec_target.ExecFactory(
        [sys.executable, str(hostile / "hangs_on_fork.py"), str(hostile / "pids")],
        "manager",
        timeout=3.0,
    )
    waits: list[float] = []
    real_hang = factory.hang

    def hang(what: str) -> None:
        waits.append(factory.wait_for(first=False) if factory.hung else factory.timeout)
        real_hang(what)

    factory.hang = hang  # type: ignore[method-assign]
    try:
        result = run_check(factory, "manager", steps=600, seed=1, trace_out=None)
    finally:
        factory.close()
    assert result.hung and result.record is not None
    assert result.record.calls[-1][0] == "fork"
    assert waits[0] == 3.0 and all(wait < 3.0 for wait in waits[1:]), waits
    assert len(result.record.calls) < (result.shrunk_from or 0)  # minimized all the same


SLOW_TO_START = """
import json, sys, time
from pagedkv.model_tests.oracle.example_peer import Peer

peer = Peer("reference")
first = True
for line in sys.stdin:
    if first:
        time.sleep(float(sys.argv[1]))  # loading a model, warming a cache
        first = False
    sys.stdout.write(json.dumps(peer.answer(line)) + "\\n")
    sys.stdout.flush()
"""


@pytest.mark.parametrize(("start", "limit"), [(1.0, 20.0), (3.0, 0.5)])
def test_a_slow_starting_peer_is_waited_for_up_to_the_timeout(
    tmp_path: Path, start: float, limit: float
) -> None:
    """A second program started while the first is busy (a configuration check does that) is
    waited for its whole start-up, up to the timeout; past it, it is a timeout, nothing else."""
    (tmp_path / "slow.py").write_text(SLOW_TO_START)
    argv = [sys.executable, str(tmp_path / "slow.py"), str(start)]
    factory = exec_target.ExecFactory(argv, "manager", timeout=limit)
    try:
        if start < limit:
            busy = factory(ManagerConfig(2, 4, 2))
            second = factory(ManagerConfig(2, 3, 2))  # a new program: the first is busy
            assert second.get_num_free_gpu_blocks() == 3 and len(factory.spawned) == 2
            busy.close()
        else:
            late = re.escape("did not answer 'create' within 0.5 s")
            with pytest.raises(TargetTimeout, match=late):
                factory(ManagerConfig(2, 4, 2))
    finally:
        factory.close()


def test_a_hang_while_a_configuration_is_checked_is_a_hang_not_a_disagreement() -> None:
    config = ManagerConfig(2, 1, 2, -0.1, 2)
    hang = TargetTimeout("the target program did not answer 'create' within 3 s")
    record = RunRecord("manager", ManagerConfig(2, 4, 2), (), False, checking_config=config)
    result = CheckResult("manager", 0, failure=hang, record=record, message=str(hang))
    result.finding = finding_of(hang, record)
    report = check_report(result, "exec:./slow")
    assert result.finding is None  # never a known difference, even with operation = "create"
    assert report.verdict.startswith("FAIL: the target does not answer in time (hangs) while")
    assert "disagree" not in report.plain()
    assert "kind: none (a hang is never a known difference)" in report.notes


def test_a_guarded_target_that_hangs_is_not_called_again() -> None:
    class Sleeps:
        def free(self, seq_id: int) -> None:
            time.sleep(3600)

    guarded = GuardedFactory(lambda config: Sleeps(), timeout=0.2)
    target = guarded(None)
    with pytest.raises(TargetTimeout, match=r"did not return from free\(1\) within 0\.2 s"):
        target.free(1)
    with pytest.raises(TargetTimeout, match="not called again"):
        target.free(2)
    with pytest.raises(TargetTimeout, match="not called again"):
        guarded(None)


# --- the stdio protocol refuses what it does not know -------------------------------------------


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ('{"result": null, "extra": 1}', 'not {"result": ...}'),
        ('{"error": "UnknownSequenceError", "message": "x", "id": 3}', 'not {"result": ...}'),
        ("[" * 50 + "]" * 50, "not JSON"),
    ],
    ids=["unknown-field", "unknown-error-field", "nested"],
)
def test_a_peer_answer_with_unknown_fields_is_refused(
    tmp_path: Path, answer: str, says: str
) -> None:
    program = tmp_path / "peer.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import sys
            for line in sys.stdin:
                print({answer!r}, flush=True)
            """
        )
    )
    factory = exec_target.ExecFactory([sys.executable, str(program)], "manager", timeout=30)
    try:
        with pytest.raises(exec_target.PeerError, match=says.replace("{", r"\{")):
            factory(ManagerConfig(2, 4, 2))
    finally:
        factory.close()


class _DropsTermination:
    """Raises as a signal handler would while this finalizer runs: Python drops it."""

    def __del__(self) -> None:
        raise cli.Terminated


def test_a_termination_dropped_by_a_finalizer_is_sent_again() -> None:
    # a signal that lands in a garbage-collection callback (Hypothesis installs one) used to
    # be printed and lost, and the check went on
    started = time.monotonic()
    with pytest.raises(cli.Terminated), cli._sigterm_interrupts():
        _DropsTermination()
        time.sleep(10)
    assert time.monotonic() - started < 5


def caught(pid: int, number: int) -> bool:
    """Whether the process has a handler of its own for signal ``number`` (``SigCgt``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(mask, 16) >> (number - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    ("number", "code", "says"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_while_pagedkv_imports_is_its_one_line(number: int, code: int, says: str) -> None:
    """The console script's first lines catch SIGTERM (``pagedkv.entry``); sent the moment they
    have, the signal lands while pagedkv's modules import (about 0.3 s more), before
    ``pagedkv.cli`` is there: it used to be a KeyboardInterrupt traceback, or death by SIGTERM
    with nothing said."""
    proc = subprocess.Popen(
        [PAGEDKV, "check", "--target", "reference", "--steps", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not caught(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(number)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (code, "", f"pagedkv: {says}\n")


def test_a_check_that_made_no_call_fails() -> None:
    # a budget this small can end with runs that only build the pools: that is no PASS (a
    # manager run always admits a first request)
    code, out, err = run_here(
        "check", "--target", "reference", "--level", "pool", "--steps", "1", "--seed", "0"
    )
    assert code == 1 and "made no call into the target" in out and "nothing was checked" in out
    assert "PASS" not in out, out + err


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    done = subprocess.run(
        f"{PAGEDKV} demo | head -c 1 > /dev/null",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        executable="/bin/bash",
        env={**os.environ, "PAGEDKV_TRACEBACK": "0"},
    )
    assert done.stderr == "", done.stderr
