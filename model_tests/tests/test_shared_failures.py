"""Failures shared through Hypothesis's example database, ``pagedkv check --database`` (issue 26,
item 7): a failure one check finds is the first thing the next check of the same target makes,
whatever its seed and budget; checks of anything else neither replay it nor drop it; and the
database changes nothing in a seed's own search.

Each check runs as its own ``pagedkv`` process, as workers on other machines would, sharing a
directory or a real ``redis-server`` (Debian's package, installed by ``make setup`` where root;
the Redis test is skipped without it, and fails under ``CI=true``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.oracle.shared_failures import DatabaseError, open_database, scope
from pagedkv.specs.policy import profile

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "pagedkv.model_tests.independent.broken:BrokenSwapDropsPair"
FINDS_IT = ("--seed", "0", "--steps", "2000")
"""A budget that finds it: after 5 runs (501 calls) on Hypothesis 6.170."""
TOO_SMALL = ("--seed", "5", "--steps", "30")
"""One run of 30 steps: too few to find it alone (shown each time)."""
REDIS_SERVER = shutil.which("redis-server")
PAGEDKV_CHECK = (sys.executable, "-m", "pagedkv", "check", "--target")


def check(tmp_path: Path, name: str, target: str, *argv: str) -> dict[str, Any]:
    """``pagedkv check`` in a process of its own; its verdict as JSON."""
    verdict = tmp_path / f"{name}.json"
    done = subprocess.run(
        [
            *PAGEDKV_CHECK,
            target,
            *argv,
            "--json",
            str(verdict),
            "--trace-out",
            str(tmp_path / f"{name}.jsonl"),
        ],
        cwd=ROOT,
        env={**os.environ, "PAGEDKV_PROGRESS": "0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    result: dict[str, Any] = json.loads(verdict.read_text())
    found = result["found_after"]
    print(
        f"  {name:<20} {' '.join(argv).replace(str(tmp_path), '$TMP'):<50}"
        f" -> {result['verdict'].upper()}"
        + (f", found after {found['calls']} calls in {found['runs']} runs" if found else "")
        + f" ({result['runs']} runs, {result['calls']} calls in all)"
    )
    return result


def found_in_runs(result: dict[str, Any]) -> int | None:
    found = result["found_after"]
    return None if found is None else int(found["runs"])


def two_workers_share(tmp_path: Path, database: str) -> None:
    """The first check finds the failure and stores it; the second, with a budget too small to
    find it alone, replays it in its first run; a check of another target in between neither
    replays it nor drops it."""
    alone = check(tmp_path, "second, no database", BROKEN, *TOO_SMALL)
    assert alone["verdict"] == "pass", "the small budget must not find it alone"
    first = check(tmp_path, "first worker", BROKEN, *FINDS_IT, "--database", database)
    assert first["verdict"] == "fail" and found_in_runs(first) == 5
    assert any(note.startswith(f"note: stored in {database}") for note in first["notes"])
    other = check(tmp_path, "another target", "reference", *TOO_SMALL, "--database", database)
    assert other["verdict"] == "pass" and other["runs"] == alone["runs"], "it replayed another's"
    second = check(tmp_path, "second worker", BROKEN, *TOO_SMALL, "--database", database)
    assert second["verdict"] == "fail", "the failure stored by the first did not reach it"
    assert found_in_runs(second) == 1
    assert "note: found by replaying a failure stored in the database" in second["notes"]
    assert second["divergence"]["kind"] == first["divergence"]["kind"] == ["result"]
    assert len(second["divergence"]["steps"]) == len(first["divergence"]["steps"]) == 3


def test_two_workers_share_a_failure_through_a_directory(tmp_path: Path) -> None:
    database = str(tmp_path / "examples")
    two_workers_share(tmp_path, database)
    plain = check(tmp_path, "first, no database", BROKEN, *FINDS_IT)
    first = json.loads((tmp_path / "first worker.json").read_text())
    assert plain["found_after"] == first["found_after"], "the database changed the seed's search"


# --- Redis --------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _redis_missing() -> str | None:
    if REDIS_SERVER is None:
        return "redis-server is not installed (apt-get install redis-server; make setup does)"
    try:
        import redis  # noqa: F401  (the `redis` extra)
    except ImportError:
        return "the redis package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real ``redis-server`` of its own on a free loopback port, nothing saved to disk."""
    missing = _redis_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Redis test, but {missing}")
        pytest.skip(missing)
    assert REDIS_SERVER is not None
    port = _free_port()
    server = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                open_database(url, "probe")
                break
            except DatabaseError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_two_workers_share_a_failure_through_redis(tmp_path: Path, redis_url: str) -> None:
    print(f"\nredis-server at {redis_url}")
    two_workers_share(tmp_path, redis_url)


# --- what a database is and what it is not ----------------------------------------------------


def test_a_database_that_cannot_be_used_is_one_line_and_exit_2(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    port = _free_port()  # nothing listens there
    for database, says in [
        (str(blocked / "examples"), "cannot use it as a directory"),
        (f"redis://127.0.0.1:{port}/0", "cannot reach it" if not _redis_missing() else "redis"),
        ("postgres://127.0.0.1/x", "not a directory and not a redis:// URL"),
    ]:
        done = subprocess.run(
            [
                *PAGEDKV_CHECK,
                "reference",
                "--steps",
                "30",
                "--database",
                database,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stdout
        assert done.stdout == ""
        assert done.stderr.startswith(f"pagedkv: error: --database {database}: "), done.stderr
        assert says in done.stderr and len(done.stderr.splitlines()) == 1


def test_checks_that_differ_in_meaning_never_share_a_key(tmp_path: Path) -> None:
    """The seed and the budget are left out of the key (they only choose runs); the target,
    level, profile and policy, contract, group layouts, steps per run and known differences
    are in it."""
    known = tmp_path / "known.toml"
    known.write_text('[[difference]]\nname = "x"\noperation = "swap_in"\nkind = "result"\n')
    base: dict[str, Any] = dict(
        target=BROKEN,
        level="manager",
        profile=profile("pagedkv"),
        contract="any",
        layouts=("full", "window", "hybrid"),
        known=None,
        per_run=30,
    )
    keys = {scope(**base)}
    assert scope(**base) in keys  # the same check: the same key, in any process
    changes: list[dict[str, Any]] = [
        {"target": "reference"},
        {"level": "pool"},
        {"profile": profile("vllm-v0")},
        {"profile": profile("pagedkv", {"promotion": "keep"})},
        {"profile": profile("safety")},
        {"contract": "scheduler"},
        {"per_run": 20},
        {"known": load_known(known, "manager")},
    ]
    for change in changes:
        key = scope(**{**base, **change})
        assert key not in keys, f"{change} shares a key"
        keys.add(key)
    request = {**base, "level": "request"}
    assert scope(**request) != scope(**{**request, "layouts": ("full",)})
