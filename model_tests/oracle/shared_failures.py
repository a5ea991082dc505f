"""Failures shared between checks through Hypothesis's own example database (``--database``).

A check given a database first replays the failures stored there for the same check (the same
target, level, profile and policy, contract, group layouts, known differences and steps per run,
under the same pagedkv), then searches from its seed exactly as it would without one, and stores
the smallest failing run it made. So a failure one worker or one machine finds is the first thing
every later check of the same target makes, whatever its seed.

- ``DIRECTORY`` (a path): Hypothesis's ``DirectoryBasedExampleDatabase``; on one machine, or on a
  shared file system.
- ``redis://HOST:PORT/DB``: Hypothesis's ``RedisExampleDatabase`` (the ``redis`` package:
  ``pip install 'pagedkv[redis]'``); for several machines.

A database never turns a failure into a pass: the replay runs on top of the budget, and the
seeded search that follows makes the runs it would make without a database (its failures are
stored by pagedkv, not by Hypothesis, which would draw on the seed's random stream:
``machines/hypothesis_internals.py`` items 4 and 5). A stored failure is only ever a choice
sequence: replayed, it is a fresh run of this check's machine against this check's target, and
it fails only if this target fails it; one that no longer fails (the bug is fixed) is dropped
from the database by Hypothesis. Checks that differ in anything above read and write under
different keys (``scope``), so they never replay, or drop, each other's failures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from pagedkv.model_tests.machines.hypothesis_internals import ScopedDatabase
from pagedkv.model_tests.machines.manager_machine import Contract
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.known import KnownDifferences
from pagedkv.specs.policy import Profile

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class DatabaseError(Exception):
    """A ``--database`` that cannot be opened or reached: an error of use (exit 2)."""


@dataclass(frozen=True)
class SharedFailures:
    """Where a check shares its failures: the database, as the user named it, and the target's
    name (``--target`` as given: the same target checked from two machines shares)."""

    database: ExampleDatabase
    where: str
    target: str

    def scoped(self, key: bytes) -> ScopedDatabase:
        """One check's part of the database, under ``key`` (``scope``)."""
        return ScopedDatabase(self.database, key)


def scope(
    target: str,
    level: Level,
    profile: Profile,
    contract: Contract,
    layouts: Sequence[str],
    known: KnownDifferences | None,
    per_run: int,
) -> bytes:
    """The key prefix of one check: a digest of everything that decides what a stored choice
    sequence means as a run, or whether it fails. The seed and the budget are left out: they
    decide only which runs a search makes."""
    parts = [
        f"pagedkv {_version()}",
        f"target {target}",
        f"level {level}",
        f"profile {profile.name} safety={profile.safety} policy {profile.policy.describe()}",
        f"contract {contract}",
        f"groups {','.join(layouts) if level == 'request' else '-'}",
        f"steps per run {per_run}",
        f"known {_known_text(known)}",
    ]
    digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:32]
    return f"pagedkv-check.{digest}".encode("ascii")


def _version() -> str:
    try:
        return metadata.version("pagedkv")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _known_text(known: KnownDifferences | None) -> str:
    """The known differences as text that is the same in every process (no set's order)."""
    if known is None:
        return "-"
    return "; ".join(
        f"{d.name}|{sorted(d.operations)}|{sorted(d.kinds)}"
        f"|{'' if d.message is None else d.message.pattern}|{d.config!r}"
        for d in known.differences
    )


def open_database(where: str, target: str) -> SharedFailures:
    """The database ``where`` names (a directory, made if missing, or a ``redis://`` URL,
    reached once now); ``DatabaseError`` with one line if it cannot be used."""
    if where.startswith(REDIS_SCHEMES):
        return SharedFailures(_redis(where), where, target)
    if "://" in where:  # a URL of a kind not offered: never a directory named after it
        raise DatabaseError(
            f"--database {where}: not a directory and not a redis:// URL"
            f" (the schemes taken: {', '.join(REDIS_SCHEMES)})"
        )
    path = Path(where)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pagedkv-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise DatabaseError(
            f"--database {where}: cannot use it as a directory: {error.strerror or error}"
        ) from None
    return SharedFailures(DirectoryBasedExampleDatabase(path), where, target)


def _redis(url: str) -> ExampleDatabase:
    try:  # an optional dependency (the `redis` extra), imported only where it is asked for
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise DatabaseError(
            f"--database {url}: needs the redis package: pip install 'pagedkv[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(url)
        client.ping()
    except (redis.RedisError, ValueError) as error:
        raise DatabaseError(f"--database {url}: cannot reach it: {error}") from None
    return RedisExampleDatabase(client)
