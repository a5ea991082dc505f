"""A command's verdict as one JSON object, for CI systems and scripts (``--json FILE`` of ``check``,
``replay`` and ``soak``); its shape is ``specs/verdict.schema.json``, documented in
``specs/oracle.md`` §6.

The object is built from what the printed report was built from, and its ``verdict`` from the
exit code the command returns, never apart from it: a file cannot say ``pass`` for a run whose
exit code says otherwise.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pagedkv.model_tests.oracle.check import CheckResult, Report, budget
from pagedkv.model_tests.oracle.known import kinds_of
from pagedkv.model_tests.oracle.stepping import Stepping
from pagedkv.model_tests.oracle.trace import Trace, Verdict

if TYPE_CHECKING:  # a soak's result, for annotations: the soak loads with its command
    from pagedkv.model_tests.oracle.soak import SoakResult

FORMAT = "pagedkv-verdict"
VERSION = 1
SCHEMA_FILE = "verdict.schema.json"
"""Beside the spec pages: ``specs/verdict.schema.json`` (shipped in the wheel)."""

VERDICTS = {0: "pass", 1: "fail", 2: "stale"}
"""The exit codes a verdict is written for: a stale trace (``replay``) is the only exit 2 that
has one; every other exit 2 is an error of use, reported in one line and written nowhere."""

JSON = dict[str, Any]


@dataclass
class Clock:
    """Which pagedkv ran a command, when it started, and what it has taken since."""

    version: str
    started: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    wall: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)

    def timings(self) -> JSON:
        return {
            "started": self.started.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "seconds": round(time.perf_counter() - self.wall, 3),
            "cpu_seconds": round(time.process_time() - self.cpu, 3),
        }


def _document(command: str, target: str, code: int, summary: str, clock: Clock) -> JSON:
    if code not in VERDICTS:
        raise ValueError(f"no verdict is written for exit code {code}")
    return {
        "format": FORMAT,
        "version": VERSION,
        "pagedkv": clock.version,
        "command": command,
        "target": target,
        "verdict": VERDICTS[code],
        "exit_code": code,
        "summary": summary,
        "level": None,
        "groups": None,
        "mode": None,
        "profile": None,
        "model": None,
        "contract": None,
        "seeds": [],
        "budget": None,
        "runs": 0,
        "calls": 0,
        "found_after": None,
        "divergence": None,
        "known": None,
        "declined": [],
        "traces": [],
        "notes": [],
        "timings": clock.timings(),
    }


def _steps(report: Report) -> list[JSON]:
    return [
        {"number": s.number, "call": s.call, "outcome": s.outcome, "diverges": s.failed}
        for s in report.steps
    ]


def _failed_step(report: Report) -> int | None:
    return next((step.number for step in report.steps if step.failed), None)


def _known(stepped: Stepping | None) -> JSON | None:
    if stepped is None:
        return None
    return {
        "file": stepped.known.source,
        "runs": stepped.total,
        "classes": [
            {
                "name": name,
                "runs": runs,
                "about": stepped.known.about(name),
                "message": stepped.messages.get(name, ""),
                "example": None if name not in stepped.traces else str(stepped.traces[name]),
            }
            for name, runs in sorted(stepped.runs.items(), key=lambda item: (-item[1], item[0]))
        ],
    }


def check_verdict(
    result: CheckResult,
    report: Report,
    *,
    target: str,
    code: int,
    clock: Clock,
    steps: int,
    replay: str | None = None,
    page: Path | None = None,
) -> JSON:
    """``pagedkv check``'s verdict: ``steps`` is the budget asked for, ``replay`` the command the
    report prints, ``page`` the divergence's page where it was written."""
    document = _document("check", target, code, report.verdict, clock)
    runs, per_run = budget(steps)
    document.update(
        level=result.level,
        groups=list(result.layouts) if result.level == "request" else None,
        mode="safety" if result.profile.safety else "isomorphic",
        profile=result.profile.describe(),
        contract=result.contract,
        seeds=list(result.all_seeds),
        budget={"steps": steps, "runs": runs, "steps_per_run": per_run},
        runs=result.runs,
        calls=result.calls,
        found_after=None
        if result.found_after is None
        else {"runs": result.found_after[0], "calls": result.found_after[1]},
        known=_known(result.stepped),
        declined=[note for note in report.notes if note.startswith("not covered:")],
        notes=[note for note in report.notes if note.startswith("note:")],
    )
    if not result.passed and report.detail:
        finding = result.finding
        kinds = [] if finding is None else list(kinds_of(finding))
        document["divergence"] = {
            "kind": ["timeout"] if result.hung else kinds,
            "operation": None if finding is None else finding.operation,
            "hung": result.hung,
            "step": _failed_step(report),
            "message": result.message,
            "detail": report.detail,
            "config": report.config or None,
            "steps": _steps(report),
            "trace": None if result.trace_path is None else str(result.trace_path),
            "replay": replay,
            "page": None if page is None else str(page),
        }
    return document


def soak_verdict(
    result: SoakResult,
    report: Report,
    *,
    target: str,
    code: int,
    clock: Clock,
    level: str,
    groups: Sequence[str] | None,
    exact: bool,
    seed: int,
    steps: int,
    replay: str | None = None,
) -> JSON:
    """``pagedkv soak``'s verdict: its runs are its episodes, its calls the steps made."""
    document = _document("soak", target, code, report.verdict, clock)
    document.update(
        level=level,
        groups=None if groups is None else list(groups),
        mode="exact" if exact else "isomorphic",
        profile="pagedkv",
        model=result.model,
        seeds=[seed],
        budget={"steps": steps, "runs": None, "steps_per_run": None},
        runs=result.episodes,
        calls=result.steps,
        notes=[note for note in report.notes if note.startswith("note:")],
    )
    if not result.passed:
        document["divergence"] = {
            "kind": ["timeout"] if result.hung else [],
            "operation": result.calls[-1][0] if result.calls else None,
            "hung": result.hung,
            "step": _failed_step(report),
            "message": result.failure or "",
            "detail": report.detail,
            "config": report.config or None,
            "steps": _steps(report),
            "trace": None if result.trace_path is None else str(result.trace_path),
            "replay": replay,
            "page": None,
        }
    return document


def replay_verdict(
    replayed: Sequence[tuple[Path, Trace, Verdict]],
    summary: str,
    *,
    target: str,
    code: int,
    clock: Clock,
) -> JSON:
    """``pagedkv replay``'s verdict over every trace it replayed; its divergence is the first
    failing trace's."""
    document = _document("replay", target, code, summary, clock)
    levels = {loaded.level for _, loaded, _ in replayed}
    document.update(
        level=levels.pop() if len(levels) == 1 else None,
        mode="isomorphic",
        runs=len(replayed),
        calls=sum(verdict.steps for _, _, verdict in replayed),
        traces=[
            {
                "path": str(path),
                "level": loaded.level,
                "verdict": verdict.status if verdict.status == "stale" else _word(verdict),
                "steps": verdict.steps,
                "step": verdict.step,
                "message": "" if verdict.ok else verdict.describe(),
            }
            for path, loaded, verdict in replayed
        ],
    )
    failing = next(((p, t, v) for p, t, v in replayed if not v.ok), None)
    if failing is not None:
        path, loaded, verdict = failing
        operation = None
        if verdict.step:
            operation = loaded.ops[verdict.step - 1].op
        document["divergence"] = {
            "kind": list(dict.fromkeys(kind for kind, _ in verdict.parts))
            or ([verdict.kind] if verdict.kind else []),
            "operation": operation,
            "hung": verdict.kind == "timeout",
            "step": verdict.step,
            "message": verdict.message,
            "detail": verdict.describe(),
            "config": None,
            "steps": [],
            "trace": str(path),
            "replay": None,
            "page": None,
        }
    return document


def _word(verdict: Verdict) -> str:
    return "pass" if verdict.ok else "fail"
