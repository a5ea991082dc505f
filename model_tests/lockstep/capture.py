"""What a lockstep machine leaves behind when a run ends: its configuration and its calls.

Each machine calls ``finish`` from ``teardown``; the record goes to the machine class's
``last_run`` and to its ``on_run_end`` hook, if one is set, and the target to its
``release_target`` hook (the oracle uses it to hand an ``exec:`` program back to its pool; the
machines know nothing of processes). Hypothesis runs the shrunk failing example last, so after a
failure ``last_run`` is the minimal run: that is what becomes a trace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import reject
from hypothesis.errors import HypothesisException

from pagedkv.model_tests.lockstep.calls import TargetStopped
from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.operations import Level
from pagedkv.specs.policy import PAGEDKV, Policy

RecordedCall = tuple[str, tuple[Any, ...]]
"""A call as a run records it: the operation's name and its arguments."""


@dataclass(frozen=True)
class RunRecord:
    level: Level
    config: Any
    """The run's configuration (None if the run ended before one was drawn)."""
    calls: tuple[RecordedCall, ...]
    """Every protocol call in order: the completed steps, then the call that failed, if any."""
    failed_call: bool
    """The last of ``calls`` did not complete (it diverged, or the target raised)."""
    outcomes: tuple[Any, ...] = ()
    """The model's outcome (result or error) of each completed call, as the session saw it."""
    checking_config: Any = None
    """A configuration the run was comparing the two sides' acceptance of when it ended."""
    policy: Policy = PAGEDKV
    """The reference's policy in the run (under the safety tier: only what the target lacks)."""
    safety: bool = False
    """The run held the target to the safety tier alone; ``outcomes`` are then the target's."""
    error: BaseException | None = field(default=None, compare=False)
    """The failure the run ended on (a divergence, a machine's own check, a crash, a hang): what
    Hypothesis raises at the end if this run is the one it reports."""

    @property
    def failed(self) -> bool:
        return self.error is not None


RunHook = Callable[[RunRecord], None]
ReleaseHook = Callable[[Any], None]
DeclineHook = Callable[[Any, str], None]
UncheckedHook = Callable[[str, str], None]
"""Hears of an operation the target offers that the run does not send, and why."""
"""Told of each configuration a target declined (its factory raised ``UnsupportedError``)."""


def build_target(machine: Any, config: Any) -> Any:
    """The machine's target for ``config``; a factory that declines the configuration
    (``UnsupportedError``: a declared limit, not a finding) makes the run draw another, and the
    machine class's ``on_declined`` hook hears of it."""
    try:
        return type(machine).make_target(config)
    except UnsupportedError as error:
        hook: DeclineHook | None = getattr(type(machine), "on_declined", None)
        if hook is not None:
            hook(config, str(error))
        reject()


def report_unchecked(machine: Any, operation: str, why: str) -> None:
    """Tell the machine class's ``on_unchecked`` hook that the target offers ``operation`` and
    the run does not send it: a verdict must not vouch for it."""
    hook: UncheckedHook | None = getattr(type(machine), "on_unchecked", None)
    if hook is not None:
        hook(operation, why)


def _failure() -> BaseException | None:
    """The failure teardown runs for, if it does: Hypothesis calls it in a ``finally``, where
    the exception on its way out is visible. Its own control flow (a rejected example, the end
    of the data) is no failure."""
    error = sys.exc_info()[1]
    if error is None or isinstance(error, HypothesisException):
        return None
    return error if isinstance(error, Exception | TargetStopped) else None


def finish(machine: Any, level: Level, *, safety: bool | None = None) -> RunRecord:
    """The run's record, handed to the machine class's hooks. ``safety``: whether the run held
    the target to the safety tier alone (by default: the machine's ``mode`` says so)."""
    model = getattr(machine, "model", None)
    session = getattr(machine, "session", None)
    steps = list(getattr(session, "steps", []) or [])
    calls: list[RecordedCall] = [(step.method, tuple(step.args)) for step in steps]
    pending: RecordedCall | None = getattr(machine, "pending", None)
    if pending is not None:
        calls.append(pending)
    config = getattr(machine, "config", None) or getattr(model, "config", None)
    record = RunRecord(
        level=level,
        config=config,
        calls=tuple(calls),
        failed_call=pending is not None,
        outcomes=tuple(step.outcome for step in steps),
        checking_config=getattr(machine, "checking_config", None),
        policy=getattr(machine, "policy", PAGEDKV),
        safety=getattr(machine, "mode", None) == "safety" if safety is None else safety,
        error=_failure(),
    )
    cls = type(machine)
    release: ReleaseHook | None = getattr(cls, "release_target", None)
    if release is not None and hasattr(machine, "target"):
        release(machine.target)
    cls.last_run = record
    hook: RunHook | None = getattr(cls, "on_run_end", None)
    if hook is not None:
        hook(record)
    return record


def let_go(machine: Any) -> None:
    """Drop everything a machine holds, once its run's record is made (``finish``). Hypothesis
    keeps a finished machine in reference cycles (its rule strategy, the run's data) that only
    Python's collector breaks, and all the machine holds (both sides, the session's steps, every
    state and view of the run) would wait for that too, counting towards the collector's next
    pass: dropped here, they are freed at once."""
    machine.__dict__.clear()
