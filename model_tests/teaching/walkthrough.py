"""A trace, step by step, as the page of ``pagedkv show`` draws it.

Without a target the reference alone replays the trace: each step's call, the outcome the
reference gives (a step where that is not what the trace recorded is marked stale) and its state
after the step. With a target, the trace is replayed through the oracle's isomorphic session
(``trace.replay``, the same comparison as ``pagedkv replay``) and each step also shows what the
protocol lets us see of the target (``specs/oracle.md`` §1): its result, its block tables in its
own ids beside the reference's translated into them, and its free counts. The step where it
diverges carries the verdict's message and the rule it broke.

With a target, the reference's state is the session's model: where the spec leaves a choice open
(which free block, which of the cached blocks that rank first) it has taken the target's, so that
both sides' ids correspond.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pagedkv.model_tests.lockstep.calls import run_call
from pagedkv.model_tests.lockstep.defrag_isomorphic_session import IsomorphicDefragSession
from pagedkv.model_tests.lockstep.manager_session import IsomorphicManagerSession
from pagedkv.model_tests.lockstep.request_isomorphic_session import IsomorphicRequestSession
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.check import show_config
from pagedkv.model_tests.oracle.exec_target import close_target
from pagedkv.model_tests.oracle.trace import Trace, Verdict
from pagedkv.model_tests.teaching.frames import (
    Finding,
    Frame,
    FreeCount,
    TargetRow,
    TargetSide,
    Walk,
    copies_of,
)
from pagedkv.model_tests.teaching.pictures import picture_of
from pagedkv.model_tests.teaching.rules import CREATE, STALE, rule_of
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.named_calls import call_named
from pagedkv.specs.types import Device

Factory = Callable[[Any], Any]


class Recorder:
    """The target as the session calls it, keeping what each call returned or raised."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.log: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.target, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attribute(*args, **kwargs)
            except Exception as error:
                self.log.append((name, f"raises {type(error).__name__}: {error}"))
                raise
            self.log.append((name, codec.show_value(result)))
            return result

        return call


def outcome_text(outcome: Any) -> str:
    if isinstance(outcome, PagedKVError):
        return f"raises {type(outcome).__name__}"
    return codec.show_value(outcome)


def _creation(loaded: Trace) -> str:
    return f"refused: {loaded.create_error}" if loaded.create_error else "created"


# --- the reference alone ----------------------------------------------------------------------


def reference_frames(loaded: Trace, stale: Verdict | None) -> list[Frame]:
    reference, refused = trace.create_outcome(loaded.level, loaded.config, loaded.policy)
    start = f"refused: {refused}" if refused else "created"
    frames = [
        Frame(0, "create", start, None if reference is None else picture_of(reference.view()))
    ]
    if reference is not None:
        for number, op in enumerate(loaded.ops, 1):
            result, error = run_call(reference, call_named(loaded.level, op.op, op.args))
            frames.append(
                Frame(
                    number,
                    codec.show_call(op.op, op.args),
                    outcome_text(error if error is not None else result),
                    picture_of(reference.view()),
                    copies=copies_of(loaded.level, op.op, None if error else result),
                )
            )
    if stale is not None and stale.step is not None and stale.step < len(frames):
        finding = Finding("stale", STALE, stale.message)
        frames[stale.step] = replace(frames[stale.step], finding=finding)
    return frames


# --- the reference and a target ---------------------------------------------------------------


def _tables(
    session: IsomorphicManagerSession, view: ManagerView, observed: dict[int, Any]
) -> tuple[TargetRow, ...]:
    rows = []
    for seq_id in sorted(set(view.seqs) | set(observed)):
        label = f"seq {seq_id}"
        seq = view.seqs.get(seq_id)
        expected: tuple[int | None, ...] = ()
        if seq is not None:
            ids = session.maps[view.groups[seq.group_id].device].to_target
            expected = tuple(ids.get(b) for b in seq.blocks)
        theirs = observed.get(seq_id)
        if isinstance(theirs, str):
            rows.append(TargetRow(label, None, expected, theirs))
        else:
            rows.append(TargetRow(label, None if theirs is None else tuple(theirs), expected))
    return tuple(rows)


def _ask(method: Callable[[], Callable[..., Any]], *args: Any) -> Any:
    """A protocol query on the target (``_ask(lambda: target.free, 3)``); its error as text (a
    target that diverged may well fail)."""
    try:
        return method()(*args)
    except Exception as error:
        return f"raises {type(error).__name__}"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def target_side(session: Any, target: Any, outcome: str, before: ManagerView | None) -> TargetSide:
    """What the protocol shows of the target now: asked afresh, so that after a divergence the
    page shows the target as it really is."""
    if isinstance(session, IsomorphicRequestSession):
        return _request_side(session, target, outcome)
    if isinstance(session, IsomorphicDefragSession):
        mapping = session.model.view()
        return TargetSide(outcome, (), _mapping_rows(target, mapping.forward, mapping.backward))
    if not isinstance(session, IsomorphicManagerSession):
        count = _count(_ask(lambda: target.num_free_blocks))
        return TargetSide(outcome, (FreeCount("pool", count, _free(session, None)),))
    view = session.model.view()
    seq_ids = set(view.seqs) | (set() if before is None else set(before.seqs))
    observed = {seq_id: _ask(lambda: target.get_block_table, seq_id) for seq_id in sorted(seq_ids)}
    observed = {k: v for k, v in observed.items() if k in view.seqs or isinstance(v, list)}
    free = tuple(
        FreeCount(device.name, _count(_ask(query)), _free(session, device))
        for device, query in (
            (Device.GPU, lambda: target.get_num_free_gpu_blocks),
            (Device.CPU, lambda: target.get_num_free_cpu_blocks),
        )
    )
    return TargetSide(outcome, free, _tables(session, view, observed))


def _request_rows(
    target: Any,
    request_ids: list[str],
    expected: Callable[[str, int], tuple[int | None, ...] | None],
) -> tuple[TargetRow, ...]:
    """Each request's tables in the target's own ids, a row per group, beside ``expected``."""
    rows = []
    for request_id in request_ids:
        tables = _ask(lambda: target.get_block_ids, request_id)
        if not isinstance(tables, list):
            rows.append(TargetRow(f"request {request_id!r}", None, None, str(tables)))
            continue
        for group, blocks in enumerate(tables):
            label = f"request {request_id!r} group {group}"
            rows.append(TargetRow(label, tuple(blocks), expected(request_id, group)))
    return tuple(rows)


def _request_side(session: IsomorphicRequestSession, target: Any, outcome: str) -> TargetSide:
    view = session.model.view()
    ids = session.ids.to_target

    def expected(request_id: str, group: int) -> tuple[int | None, ...]:
        table = view.requests.get(request_id)
        blocks = () if table is None or group >= len(table.blocks) else table.blocks[group]
        return tuple(ids.get(b) for b in blocks)

    rows = _request_rows(target, sorted(view.requests), expected)
    count = _count(_ask(lambda: target.num_free_blocks))
    return TargetSide(outcome, (FreeCount("pool", count, len(view.free_queue)),), rows)


def _mapping_rows(
    target: Any, forward: tuple[int, ...] | None, backward: tuple[int, ...] | None
) -> tuple[TargetRow, ...]:
    """A defragmenter's forward and backward tables as its ``resolve`` and ``unresolve`` answer
    them, beside the reference's (None under the safety tier)."""
    size = target.config.num_blocks
    rows = []
    for label, ask, expected in (
        ("forward (resolve)", lambda: target.resolve, forward),
        ("backward (unresolve)", lambda: target.unresolve, backward),
    ):
        answers = [_ask(ask, b) for b in range(size)]
        if all(_count(a) is not None for a in answers):
            rows.append(TargetRow(label, tuple(answers), expected))
        else:
            rows.append(TargetRow(label, None, expected, "some ids do not resolve"))
    return tuple(rows)


def _free(session: Any, device: Device | None) -> int:
    view = session.model.view()
    pool = view if device is None else view.pool(device)
    return len(pool.free) + len(pool.evictable)


class SideBySide:
    """Replays a trace against a target and draws one frame per step: ``factory`` wraps each
    target the replay builds in a ``Recorder``; ``watch`` is called after each step."""

    def __init__(self, loaded: Trace, factory: Factory) -> None:
        self.loaded = loaded
        self.make = factory
        self.targets: list[Any] = []
        self.recorder = Recorder(None)
        self.logged = 0
        reference, _ = trace.create_outcome(loaded.level, loaded.config, loaded.policy)
        first = None if reference is None else picture_of(reference.view())
        self.frames = [Frame(0, "create", _creation(loaded), first)]
        self.state_before: Any = None if reference is None else reference.state
        self.view_before: ManagerView | None = None

    def factory(self, config: Any) -> Recorder:
        self.targets.append(self.make(config))
        self.recorder = Recorder(self.targets[-1])
        self.logged = 0
        return self.recorder

    def watch(self, number: int, session: Any, error: BaseException | None) -> None:
        op = self.loaded.ops[number - 1]
        calls = self.recorder.log[self.logged :]
        theirs = next((text for name, text in calls if name == op.op), "not called")
        self.logged = len(self.recorder.log)
        if error is None:
            mine: Any = session.steps[-1].outcome
        else:  # the reference's own outcome, from the state before the step
            clone = copy.copy(session.model)
            clone.state = self.state_before
            result, raised = run_call(clone, call_named(self.loaded.level, op.op, op.args))
            mine = raised if raised is not None else result
        side = target_side(session, self.targets[-1], theirs, self.view_before)
        view = session.model.view()
        self.frames.append(
            Frame(
                number,
                codec.show_call(op.op, op.args),
                outcome_text(mine),
                picture_of(view),
                copies=copies_of(self.loaded.level, op.op, mine),
                target=side,
            )
        )
        self.state_before = session.model.state
        self.view_before = view if isinstance(view, ManagerView) else None

    def run(self) -> Verdict:
        try:
            verdict = trace.replay(self.loaded, self.factory, watch=self.watch)
        finally:
            for target in self.targets:
                close_target(target)
        step = verdict.step
        if not verdict.ok and step is not None and step < len(self.frames):
            op = self.loaded.ops[step - 1].op if step else ""
            rule = CREATE if step == 0 else rule_of(verdict.message, op)
            finding = Finding("divergence", rule, verdict.message)
            self.frames[step] = replace(self.frames[step], finding=finding)
        return verdict


# --- a safety-tier trace: the target alone ------------------------------------------------------


def calls_only(loaded: Trace) -> list[Frame]:
    """A safety trace without a target: the calls, nothing expected of them but the tier."""
    frames = [Frame(0, "create", "created", None)]
    for number, op in enumerate(loaded.ops, 1):
        frames.append(Frame(number, codec.show_call(op.op, op.args), "(no expectation)", None))
    return frames


class TargetAlone:
    """Replays a safety-tier trace against a target (``trace.replay``, the safety session) and
    draws what the protocol shows of the target after each step; there is no reference side."""

    def __init__(self, loaded: Trace, factory: Factory) -> None:
        self.loaded = loaded
        self.make = factory
        self.targets: list[Any] = []
        self.recorder = Recorder(None)
        self.logged = 0
        self.frames = [Frame(0, "create", "created", None)]

    def factory(self, config: Any) -> Recorder:
        self.targets.append(self.make(config))
        self.recorder = Recorder(self.targets[-1])
        self.logged = 0
        return self.recorder

    def watch(self, number: int, session: Any, _: BaseException | None) -> None:
        op = self.loaded.ops[number - 1]
        calls = self.recorder.log[self.logged :]
        theirs = next((text for name, text in calls if name == op.op), "not called")
        self.logged = len(self.recorder.log)
        target = self.targets[-1]
        if self.loaded.level == "defrag":
            side = TargetSide(theirs, (), _mapping_rows(target, None, None))
        elif self.loaded.level == "request":
            tables = _request_rows(target, sorted(session.requests), lambda _, __: None)
            count = _count(_ask(lambda: target.num_free_blocks))
            side = TargetSide(theirs, (FreeCount("pool", count, None),), tables)
        elif self.loaded.level == "pool":
            free: tuple[FreeCount, ...] = (
                FreeCount("pool", _count(_ask(lambda: target.num_free_blocks)), None),
            )
            side = TargetSide(theirs, free)
        else:
            ledger = session.ledger
            rows = []
            for seq_id in sorted(ledger.seqs):
                table = _ask(lambda: target.get_block_table, seq_id)
                if isinstance(table, list):
                    rows.append(TargetRow(f"seq {seq_id}", tuple(table), None))
                else:
                    rows.append(TargetRow(f"seq {seq_id}", None, None, str(table)))
            free = tuple(
                FreeCount(device.name, _count(_ask(query)), None)
                for device, query in (
                    (Device.GPU, lambda: target.get_num_free_gpu_blocks),
                    (Device.CPU, lambda: target.get_num_free_cpu_blocks),
                )
            )
            side = TargetSide(theirs, free, tuple(rows))
        self.frames.append(
            Frame(number, codec.show_call(op.op, op.args), theirs, None, target=side)
        )

    def run(self) -> Verdict:
        try:
            verdict = trace.replay(self.loaded, self.factory, watch=self.watch)
        finally:
            for target in self.targets:
                close_target(target)
        step = verdict.step
        if not verdict.ok and step is not None and step < len(self.frames):
            op = self.loaded.ops[step - 1].op if step else ""
            rule = CREATE if step == 0 else rule_of(verdict.message, op, safety=True)
            finding = Finding("divergence", rule, verdict.message)
            self.frames[step] = replace(self.frames[step], finding=finding)
        return verdict


# --- a walk ---------------------------------------------------------------------------------------


def walk_trace(
    loaded: Trace,
    source: str,
    factory: Factory | None = None,
    target_name: str | None = None,
) -> Walk:
    """Every step of ``loaded`` (read from ``source``), with ``factory``'s target beside the
    reference if given."""
    stale = trace.check_expectations(loaded)
    walk = Walk(
        f"pagedkv show {source}",
        loaded.level,
        show_config(loaded.config),
        target=target_name if factory is not None else None,
        safety=loaded.safety,
    )
    if loaded.safety:
        return _safety_walk(walk, loaded, factory)
    if factory is None or stale is not None:
        walk.frames = reference_frames(loaded, stale)
        if stale is not None:
            walk.verdict = stale.describe()
        else:
            walk.verdict = f"{len(loaded.ops)} steps, as this pagedkv's reference gives them"
            walk.notes.append(
                "Replayed by the reference alone: pass --target to see a target beside it."
            )
        return walk
    both = SideBySide(loaded, factory)
    walk.verdict = both.run().describe()
    walk.frames = both.frames
    seen = (
        "results, tables and free counts"
        if loaded.level in ("manager", "request")
        else "results and free counts"
    )
    walk.notes.append(
        "Block ids on the left are the reference's; where the spec leaves a choice open (which"
        " free block, which of the cached blocks that rank first) the reference took the"
        " target's, so that the ids correspond. The target is seen only through the protocol:"
        f" its {seen}."
    )
    return walk


def _safety_walk(walk: Walk, loaded: Trace, factory: Factory | None) -> Walk:
    if factory is None:
        walk.frames = calls_only(loaded)
        walk.verdict = f"{len(loaded.ops)} steps of a safety-tier trace"
        walk.notes.append(
            "A safety-tier trace expects nothing of any step but what every correct allocator"
            " guarantees (specs/safety.md): pass --target to replay it against a target."
        )
        return walk
    alone = TargetAlone(loaded, factory)
    walk.verdict = alone.run().describe()
    walk.frames = alone.frames
    walk.notes.append(
        "Held to the safety tier: there is no reference side, only what the protocol shows of"
        " the target after each step (block ids are the target's own)."
    )
    return walk
