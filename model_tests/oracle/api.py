"""The oracle as three functions, for code rather than the command line (``pagedkv`` re-exports
them): ``check`` a target, ``replay`` a trace against one, ``record`` a corpus of traces.

A target is a factory (a callable taking the level's configuration) or a string the command line
accepts: ``package.module:factory``, ``exec:./program [args]``, ``reference`` or ``optimized``.
"""

from __future__ import annotations

from pathlib import Path

from model_tests.oracle import targets, trace
from model_tests.oracle.check import DEFAULT_STEPS, CheckResult, run_check
from model_tests.oracle.codec import Level
from model_tests.oracle.record import Corpus, record_level
from model_tests.oracle.targets import Factory
from model_tests.oracle.trace import Trace, Verdict


def _factory(target: Factory | str, level: Level) -> Factory:
    return targets.check(target, level) if isinstance(target, str) else target


def check(
    target: Factory | str,
    level: Level = "manager",
    *,
    steps: int = DEFAULT_STEPS,
    seed: int | None = None,
    trace_out: str | Path | None = None,
) -> CheckResult:
    """Drive ``target`` and the reference with about ``steps`` calls; ``result.passed``, or the
    shrunk failing run (written to ``trace_out`` when given). A target that cannot be loaded or
    built raises ``targets.TargetError``."""
    return run_check(_factory(target, level), level, steps=steps, seed=seed, trace_out=trace_out)


def replay(recorded: Trace | str | Path, target: Factory | str) -> Verdict:
    """Replay a trace (or the trace file at a path) against ``target``."""
    loaded = recorded if isinstance(recorded, Trace) else trace.read(recorded)
    return trace.replay(loaded, _factory(target, loaded.level))


def record(
    directory: str | Path, level: Level = "manager", *, runs: int = 40, seed: int = 0
) -> Corpus:
    """Write a corpus of conformance traces of ``level`` into ``directory``."""
    return record_level(level, Path(directory), runs=runs, seed=seed)
