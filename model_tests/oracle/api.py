"""The oracle as three functions, for code rather than the command line (``pagedkv`` re-exports
them): ``check`` a target, ``replay`` a trace against one, ``record`` a corpus of traces.

A target is a factory (a callable taking the level's configuration) or a string the command line
accepts: ``package.module:factory``, ``exec:./program [args]``, ``reference`` or ``optimized``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pagedkv.model_tests.machines.manager_machine import Contract
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import targets, trace
from pagedkv.model_tests.oracle.check import CheckResult, run_check
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.known import KnownDifferences
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.oracle.record import Corpus, record_level
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.model_tests.oracle.shared_failures import open_database
from pagedkv.model_tests.oracle.targets import Factory
from pagedkv.model_tests.oracle.trace import Trace, Verdict
from pagedkv.specs.policy import Policy
from pagedkv.specs.policy import profile as named_profile


def _factory(target: Factory | str, level: Level, timeout: float | None, policy: Policy) -> Factory:
    if isinstance(target, str):
        return targets.check(target, level, timeout, policy=policy)
    return target


def check(
    target: Factory | str,
    level: Level = "manager",
    *,
    steps: int | None = None,
    seed: int | None = None,
    trace_out: str | Path | None = None,
    timeout: float | None = None,
    profile: str = "pagedkv",
    policy: Mapping[str, str] | None = None,
    known: KnownDifferences | str | Path | None = None,
    contract: Contract = "any",
    groups: Sequence[GroupKind] = LAYOUTS,
    database: str | None = None,
) -> CheckResult:
    """Drive ``target`` and the reference (under ``profile``, with ``policy``'s options
    overriding it; ``specs/policy.md``) or the safety tier alone (``profile="safety"``) with
    about ``steps`` calls (None: ``check.default_steps(level)``); ``result.passed``, or the
    shrunk failing run (written to ``trace_out`` when given). Each call into the target may take
    ``timeout`` seconds (None: ``$PAGEDKV_TIMEOUT`` or 30; ``math.inf``: forever). A target that
    cannot be loaded or built raises ``targets.TargetError``. ``known`` differences (a file's
    path, or a ``KnownDifferences``; ``specs/oracle.md`` §9) are counted and stepped past; a bad
    file raises ``known.KnownError``. At the request level, ``groups`` are the group layouts
    the runs draw from (``full``, ``window``, ``hybrid``: all three by default). ``database``
    (a directory or a ``redis://`` URL) shares failures with every other check of the same
    target there (``shared_failures.py``); one that cannot be used raises
    ``shared_failures.DatabaseError``."""
    chosen = named_profile(profile, dict(policy or {}))
    if known is not None and not isinstance(known, KnownDifferences):
        known = load_known(known, level)
    factory = _factory(target, level, timeout, chosen.policy)
    shared = None if database is None else open_database(database, target_name(target))
    return run_check(
        factory,
        level,
        steps=steps,
        seed=seed,
        trace_out=trace_out,
        timeout=timeout,
        profile=chosen,
        known=known,
        contract=contract,
        layouts=groups,
        shared=shared,
    )


def target_name(target: Factory | str) -> str:
    """A target as ``--target`` names it: a factory by its module and qualified name."""
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


def replay(
    recorded: Trace | str | Path, target: Factory | str, *, timeout: float | None = None
) -> Verdict:
    """Replay a trace (or the trace file at a path) against ``target``."""
    loaded = recorded if isinstance(recorded, Trace) else trace.read(recorded)
    return trace.replay(loaded, _factory(target, loaded.level, timeout, loaded.policy), timeout)


def record(
    directory: str | Path,
    level: Level = "manager",
    *,
    runs: int = 40,
    seed: int = 0,
    force: bool = False,
) -> Corpus:
    """Write a corpus of conformance traces of ``level`` into ``directory`` (traces of that level
    already there are replaced only with ``force``)."""
    return record_level(level, Path(directory), runs=runs, seed=seed, force=force)
