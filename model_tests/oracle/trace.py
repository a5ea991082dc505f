"""Conformance traces: versioned JSON lines, written from a run, read with validation, replayed.

Line 1 is the header, every further line one operation, and the last line a trailer with the
number of operations (so a trace cut short is refused)::

    {"format": "pagedkv-trace", "version": 2, "level": "manager", "config": {...}}
    {"op": "allocate", "args": [1, [2], [3, 1, 4]], "expect": {"result": null}}
    {"op": "free", "args": [99], "expect": {"error": "UnknownSequenceError"}}
    {"end": "pagedkv-trace", "steps": 2}

A header may also carry ``"create": {"error": "ConfigurationError"}``: the configuration must be
refused, and no operation follows. Arguments and results use ``codec``; block ids in them are the
reference's. ``expect`` is what this pagedkv's reference, making its own choices, gives for the
operation (see ``specs/oracle.md`` §4). Version 1 traces (no trailer) are still read.

Reading streams the file line by line, with a limit on a line's length and on the whole file, so
``/dev/zero`` or a runaway file is refused rather than read into memory; unknown fields are refused
on every line.

``replay`` checks two things: that the reference still gives every recorded expectation (else
the trace is *stale*: it came from a pagedkv whose reference behaves differently), and that the
target agrees with the reference through the isomorphic session, step by step.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pagedkv.model_tests.lockstep.calls import Divergence, TargetStopped, run_call
from pagedkv.model_tests.lockstep.capture import RecordedCall, RunRecord
from pagedkv.model_tests.lockstep.defrag_isomorphic_session import IsomorphicDefragSession
from pagedkv.model_tests.lockstep.defrag_safety_session import DefragSafetySession
from pagedkv.model_tests.lockstep.manager_session import IsomorphicManagerSession
from pagedkv.model_tests.lockstep.pool_safety_session import PoolSafetySession
from pagedkv.model_tests.lockstep.pool_session import IsomorphicPoolSession
from pagedkv.model_tests.lockstep.request_isomorphic_session import IsomorphicRequestSession
from pagedkv.model_tests.lockstep.request_safety_session import RequestSafetySession
from pagedkv.model_tests.lockstep.safety_session import SafetySession
from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.codec import JSON, CodecError, Level
from pagedkv.model_tests.oracle.exec_target import close_target
from pagedkv.model_tests.oracle.guard import guard
from pagedkv.model_tests.oracle.known import ALL_KINDS
from pagedkv.model_tests.oracle.watchdog import watched
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.errors import ConfigurationError, PagedKVError
from pagedkv.specs.named_calls import call_named
from pagedkv.specs.operations import required
from pagedkv.specs.policy import PAGEDKV, SAFETY, Policy, policy_from_json, policy_json
from pagedkv.specs.validation import check_config_bounds

FORMAT = "pagedkv-trace"
VERSION = 2
"""Written; versions 1 (no trailer) and 2 are read."""
MAX_LINE_BYTES = 2**20
MAX_TRACE_BYTES = 64 * 2**20
HEADER_FIELDS = frozenset(
    {"format", "version", "level", "config", "create", "policy", "tier", "divergence"}
)
OPERATION_FIELDS = frozenset({"op", "args", "expect"})
TRAILER_FIELDS = frozenset({"end", "steps"})


class TraceError(ValueError):
    """A trace that cannot be read (the message says where and why, in one line)."""


@dataclass(frozen=True)
class TraceOp:
    op: str
    args: tuple[Any, ...]
    expect: JSON
    """``{"result": <json>}`` or ``{"error": "<class name>"}``; None in a safety trace, which
    holds the target to no reference."""


@dataclass
class Trace:
    level: Level
    config: Any
    ops: list[TraceOp] = field(default_factory=list)
    create_error: str | None = None
    """The error class the reference refuses ``config`` with, if it does."""
    policy: Policy = PAGEDKV
    """The reference's policy (``specs/policy.md``); a trace says it when it is not pagedkv's."""
    safety: bool = False
    """A trace of the safety tier: replayed against the target alone, with no expectations."""
    divergence: tuple[str, tuple[str, ...]] | None = None
    """A divergence's trace (``pagedkv check``): the failing call's operation and the kinds of
    divergence it ends on, as a ``--known`` file names them (``specs/oracle.md`` §9)."""

    def operations(self) -> set[str]:
        return {op.op for op in self.ops}

    def errors(self) -> set[str]:
        found = {op.expect["error"] for op in self.ops if op.expect and "error" in op.expect}
        return found | ({self.create_error} if self.create_error else set())


# --- the reference ------------------------------------------------------------------------------


REFERENCE_MAX_BLOCKS = 2**20
"""The most blocks (all devices together) a trace may ask the reference to hold. The reference
is a textbook: its state keeps a view of every block and its queries scan them all
(``specs/oracle.md`` §4). At this bound that is about 100 MiB and up to half a second a query;
at the validation bound (``2**24`` blocks a device) it was 3.4 GB and minutes to build, so such
a trace is refused before anything is built."""


def check_reference_size(config: Any) -> None:
    """A TraceError, in one line, if ``config`` asks for more blocks than the reference holds."""
    counts = [getattr(config, name, 0) for name in ("num_gpu_blocks", "num_cpu_blocks")]
    counts += [getattr(config, "num_blocks", 0)]
    total = sum(count for count in counts if isinstance(count, int))
    if total > REFERENCE_MAX_BLOCKS:
        raise TraceError(
            f"the configuration has {total:,} blocks; the reference replays at most"
            f" {REFERENCE_MAX_BLOCKS:,} (2**20, all devices together: about 100 MiB of state,"
            " and each of its queries scans every block)"
        )


def make_reference(level: Level, config: Any, policy: Policy = PAGEDKV) -> Any:
    check_reference_size(config)
    if level == "manager":
        return ReferenceBlockSpaceManager(config, policy)
    if level == "request":
        return ReferenceRequestKVManager(config, policy)
    if level == "defrag":
        return ReferenceDefragmenter(config)  # a defragmenter has no policy to choose
    return ReferenceBlockPool(config, policy)


def outcome_json(level: Level, op: str, result: Any, error: BaseException | None) -> JSON:
    """An outcome as a trace records it."""
    if error is not None:
        if not isinstance(error, PagedKVError):
            raise TraceError(f"{op}: the reference raised an untyped {error!r}")
        return {"error": type(error).__name__}
    return {"result": codec.encode_result(level, op, result)}


def create_outcome(level: Level, config: Any, policy: Policy = PAGEDKV) -> tuple[Any, str | None]:
    """The reference built for ``config``, or the error class it refuses it with."""
    try:
        return make_reference(level, config, policy), None
    except PagedKVError as error:
        return None, type(error).__name__


def trace_of_calls(
    level: Level,
    config: Any,
    calls: Iterable[RecordedCall],
    policy: Policy = PAGEDKV,
    *,
    safety: bool = False,
) -> Trace:
    """A trace of ``calls`` with the expectations a fresh reference under ``policy`` gives (a
    safety trace has none: nothing but the safety tier holds the target)."""
    reference, refused = create_outcome(level, config, policy)
    trace = Trace(level, config, create_error=refused, policy=policy, safety=safety)
    if reference is None:
        return trace
    for op, args in calls:
        expect = None
        if not safety:
            result, error = run_call(reference, call_named(level, op, args))
            expect = outcome_json(level, op, result, error)
        trace.ops.append(TraceOp(op, tuple(args), expect))
    return trace


def trace_of_run(record: RunRecord) -> Trace:
    """The trace that replays a machine's run (its failing call included)."""
    if record.checking_config is not None:
        return trace_of_calls(record.level, record.checking_config, [], record.policy)
    if record.config is None:
        raise TraceError("the run ended before it drew a configuration: nothing to replay")
    return trace_of_calls(
        record.level, record.config, record.calls, record.policy, safety=record.safety
    )


# --- writing --------------------------------------------------------------------------------------


def header_json(trace: Trace) -> JSON:
    header: dict[str, JSON] = {
        "format": FORMAT,
        "version": VERSION,
        "level": trace.level,
        "config": codec.encode_config(trace.config),
    }
    if trace.create_error is not None:
        header["create"] = {"error": trace.create_error}
    if trace.policy != PAGEDKV:
        header["policy"] = policy_json(trace.policy)
    if trace.safety:
        header["tier"] = SAFETY
    if trace.divergence is not None:
        operation, kinds = trace.divergence
        header["divergence"] = {"operation": operation, "kind": list(kinds)}
    return header


def trailer_json(trace: Trace) -> JSON:
    return {"end": FORMAT, "steps": len(trace.ops)}


def dumps(trace: Trace) -> str:
    lines = [codec.dumps(header_json(trace))]
    for op in trace.ops:
        line: dict[str, JSON] = {
            "op": op.op,
            "args": codec.encode_args(trace.level, op.op, op.args),
        }
        if op.expect is not None:
            line["expect"] = op.expect
        lines.append(codec.dumps(line))
    lines.append(codec.dumps(trailer_json(trace)))
    return "\n".join(lines) + "\n"


def check_writable(path: str | Path) -> Path:
    """``path`` made absolute (a target that changes the working directory moves nothing), once
    a file has been created there and removed again (its folders too, if they had to be made):
    checked before a long search, so that its report is not lost for want of a place to put it.
    Where a folder is missing, it is made when the trace is written."""
    if not str(path).strip():
        raise TraceError(f"{path!r}: an empty path names no file")
    out = _refuse_non_file(Path(os.path.abspath(path)), path)
    made: list[Path] = []
    created = False
    try:
        for folder in reversed([out.parent, *out.parent.parents]):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
        existed = out.exists()
        os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND))  # nothing written
        created = not existed
    except OSError as error:
        raise TraceError(f"{path}: cannot be written ({error.strerror or error})") from None
    finally:
        if created:
            out.unlink()
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return out


def _refuse_non_file(out: Path, path: str | Path) -> Path:
    """``out``, unless something other than a writable regular file is there."""
    if out.is_dir():
        raise TraceError(f"{path}: is a directory, not a file")
    if out.exists() and not out.is_file():
        raise TraceError(f"{path}: not a regular file (a trace goes there, its page beside it)")
    if out.exists() and not os.access(out, os.W_OK):
        raise TraceError(f"{path}: not writable")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise TraceError(f"{path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"{path}: cannot create files in {parent}")
    return out


def write(trace: Trace, path: str | Path) -> Path:
    return write_text(path, dumps(trace))


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``, making its folder if need be (a trace, its page);
    ``path`` as given, to name it in a report."""
    out = _refuse_non_file(Path(path), path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise TraceError(f"cannot write {path}: {error.strerror or error}") from None
    return out


# --- reading --------------------------------------------------------------------------------------


def _object(line: str, number: int) -> dict[str, JSON]:
    try:
        value = codec.parse_json(line)
    except CodecError as error:
        raise TraceError(f"line {number}: {error}") from None
    if not isinstance(value, dict):
        raise TraceError(f"line {number}: expected a JSON object, got {type(value).__name__}")
    return value


def _unknown(value: dict[str, JSON], known: frozenset[str], number: int, what: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise TraceError(f"line {number}: unknown field(s) in {what}: {', '.join(unknown)}")


@dataclass(frozen=True)
class _Header:
    version: int
    level: Level
    config: Any
    create_error: str | None
    policy: Policy
    safety: bool
    divergence: tuple[str, tuple[str, ...]] | None


def _header(value: dict[str, JSON]) -> _Header:
    if value.get("format") != FORMAT:
        raise TraceError(f'line 1: not a pagedkv trace (expected "format": "{FORMAT}")')
    version = value.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TraceError(f"line 1: bad trace version {version!r}")
    if version > VERSION:
        raise TraceError(f"trace version {version} is newer than this pagedkv supports ({VERSION})")
    _unknown(value, HEADER_FIELDS, 1, "the header")
    try:
        level = codec.level_of(value.get("level"))
        config = codec.decode_config(level, value.get("config"))
        check_config_bounds(config)
    except (CodecError, ConfigurationError) as error:
        raise TraceError(f"line 1: config: {error}") from None
    create = value.get("create")
    create_error = None
    if create is not None:
        if not isinstance(create, dict) or set(create) != {"error"}:
            raise TraceError('line 1: "create" must be {"error": "<class name>"}')
        create_error = _error_name(create["error"], 1)
    try:
        policy = policy_from_json(value.get("policy", {}))
    except ValueError as error:
        raise TraceError(f"line 1: {error}") from None
    tier = value.get("tier", "policy")
    if tier not in ("policy", SAFETY):
        raise TraceError(f'line 1: "tier" is "policy" or "safety", got {tier!r}')
    divergence = _divergence(value.get("divergence"), level)
    return _Header(version, level, config, create_error, policy, tier == SAFETY, divergence)


def _divergence(value: JSON, level: Level) -> tuple[str, tuple[str, ...]] | None:
    """The header's ``"divergence"``: ``{"operation": ..., "kind": [...]}``, or absent."""
    if value is None:
        return None
    shape = '"divergence" must be {"operation": "<operation>", "kind": ["<kind>", ...]}'
    if not isinstance(value, dict) or set(value) != {"operation", "kind"}:
        raise TraceError(f"line 1: {shape}")
    operation, kinds = value["operation"], value["kind"]
    if operation not in (*codec.OPS[level], "create"):
        raise TraceError(f"line 1: {shape}; unknown {level} operation {operation!r}")
    if not isinstance(kinds, list) or not kinds or any(k not in ALL_KINDS for k in kinds):
        raise TraceError(f"line 1: {shape}; kinds are {', '.join(ALL_KINDS)}")
    return str(operation), tuple(str(kind) for kind in kinds)


def _error_name(name: JSON, number: int) -> str:
    try:
        return codec.error_class(name).__name__
    except CodecError as error:
        raise TraceError(f"line {number}: {error}") from None


def _operation(level: Level, value: dict[str, JSON], number: int, safety: bool) -> TraceOp:
    wanted = ("op", "args") if safety else ("op", "args", "expect")
    missing = [key for key in wanted if key not in value]
    if missing:
        raise TraceError(f"line {number}: missing {', '.join(missing)}")
    _unknown(value, OPERATION_FIELDS, number, "an operation")
    op = value["op"]
    try:
        args = codec.decode_args(level, op, value["args"])
    except CodecError as error:
        raise TraceError(f"line {number}: {error}") from None
    if safety:
        return TraceOp(op, args, None)
    expect = value["expect"]
    if isinstance(expect, dict) and set(expect) == {"error"}:
        return TraceOp(op, args, {"error": _error_name(expect["error"], number)})
    if isinstance(expect, dict) and set(expect) == {"result"}:
        try:
            codec.decode_result(level, op, expect["result"])
        except CodecError as error:
            raise TraceError(f"line {number}: expect: {error}") from None
        return TraceOp(op, args, {"result": expect["result"]})
    raise TraceError(f'line {number}: expect must be {{"result": ...}} or {{"error": "<class>"}}')


def _trailer(value: dict[str, JSON], number: int, steps: int) -> None:
    _unknown(value, TRAILER_FIELDS, number, "the trailer")
    recorded = value.get("steps")
    if value.get("end") != FORMAT or not isinstance(recorded, int) or isinstance(recorded, bool):
        raise TraceError(f'line {number}: a trailer is {{"end": "{FORMAT}", "steps": <count>}}')
    if recorded != steps:
        raise TraceError(
            f"line {number}: the trailer says {recorded} steps but the trace has {steps}"
            " (lines lost or added?)"
        )


def parse(lines: Iterable[str]) -> Trace:
    """A trace from its lines (numbered from 1), validated line by line."""
    trace: Trace | None = None
    version = VERSION
    ended: int | None = None
    last = 0
    for number, line in enumerate(lines, 1):
        last = number
        if not line.strip():
            continue
        if trace is None:
            if number != 1:
                raise TraceError("line 1: the header must be the first line")
            header = _header(_object(line, 1))
            version = header.version
            trace = Trace(
                header.level,
                header.config,
                create_error=header.create_error,
                policy=header.policy,
                safety=header.safety,
                divergence=header.divergence,
            )
            continue
        value = _object(line, number)
        if ended is not None:
            raise TraceError(f"line {number}: nothing may follow the trailer (line {ended})")
        if version >= 2 and "end" in value:
            _trailer(value, number, len(trace.ops))
            ended = number
            continue
        if trace.create_error is not None:
            raise TraceError(f"line {number}: a trace whose creation fails has no operations")
        trace.ops.append(_operation(trace.level, value, number, trace.safety))
    if trace is None:
        raise TraceError("empty trace: no header line")
    if version >= 2 and ended is None:
        raise TraceError(
            f"truncated after line {last}: a version {version} trace ends with a trailer line"
            f' {{"end": "{FORMAT}", "steps": {len(trace.ops)}}}'
        )
    return trace


def loads(text: str) -> Trace:
    if len(text) > MAX_TRACE_BYTES:
        raise TraceError(f"larger than {MAX_TRACE_BYTES // 2**20} MiB: not read")
    return parse(_limited(text.splitlines()))


def _limited(lines: Iterable[str]) -> Iterator[str]:
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_BYTES:
            raise TraceError(f"line {number} is longer than {MAX_LINE_BYTES // 2**20} MiB")
        yield line


def _stream(path: str | Path) -> Iterator[str]:
    """The file's lines, decoded one at a time, within the size limits."""
    try:
        with open(path, "rb") as file:
            total = 0
            number = 0
            while True:
                raw = file.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                number += 1
                total += len(raw)
                if len(raw) > MAX_LINE_BYTES:
                    raise TraceError(f"line {number} is longer than {MAX_LINE_BYTES // 2**20} MiB")
                if total > MAX_TRACE_BYTES:
                    raise TraceError(f"larger than {MAX_TRACE_BYTES // 2**20} MiB: not read")
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise TraceError(f"line {number}: not UTF-8 text") from None
    except OSError as error:
        raise TraceError(f"cannot read it: {error.strerror or error}") from None


def read(path: str | Path) -> Trace:
    try:
        return parse(_stream(path))
    except TraceError as error:
        raise TraceError(f"{path}: {error}") from None


# --- replaying ------------------------------------------------------------------------------------

Status = Literal["pass", "divergence", "stale"]


@dataclass(frozen=True)
class Verdict:
    status: Status
    steps: int
    """Operations in the trace."""
    step: int | None = None
    """The failing step, numbered from 1 (0: creating the target)."""
    call: str = ""
    expected: str = ""
    """The trace's expectation at the failing step, for display."""
    message: str = ""
    kind: str = ""
    """What a divergence is about: a ``Divergence``'s kind, ``timeout``, ``creation``, or
    ``stopped`` (comparing could not go on)."""
    parts: tuple[tuple[str, str], ...] = ()
    """A ``Divergence``'s findings, each with its kind (several when one call broke several
    rules)."""

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def describe(self) -> str:
        if self.ok:
            return f"pass: {self.steps} steps replayed, the target agrees with the reference"
        head = "stale trace" if self.status == "stale" else "divergence"
        if self.step == 0:
            return f"{head} at creating the target: {self.message}"
        if self.message.startswith(f"{self.call}"):  # the message names the call itself
            return f"{head} at step {self.step}: {self.message}"
        return f"{head} at step {self.step}: {self.call}: {self.message}"


def show_expect(level: Level, op: str, expect: JSON) -> str:
    if expect is None:
        return "(safety tier: no expectation)"
    if "error" in expect:
        return f"raises {expect['error']}"
    return codec.show_value(codec.decode_result(level, op, expect["result"]))


def check_expectations(trace: Trace) -> Verdict | None:
    """None if the reference still gives every recorded outcome; else a stale verdict. A safety
    trace expects nothing of the reference."""
    if trace.safety:
        return None
    reference, refused = create_outcome(trace.level, trace.config, trace.policy)
    if refused != trace.create_error:
        want = f"refused with {trace.create_error}" if trace.create_error else "accepted"
        got = f"refuses it with {refused}" if refused else "accepts it"
        return Verdict(
            "stale",
            len(trace.ops),
            0,
            message=f"the trace expects the configuration {want} but this pagedkv's reference"
            f" {got}",
        )
    for number, op in enumerate(trace.ops, 1):
        result, error = run_call(reference, call_named(trace.level, op.op, op.args))
        got = outcome_json(trace.level, op.op, result, error)
        if got != op.expect:
            expected = show_expect(trace.level, op.op, op.expect)
            return Verdict(
                "stale",
                len(trace.ops),
                number,
                codec.show_call(op.op, op.args),
                expected,
                f"the trace expects {expected} but this pagedkv's reference gives"
                f" {show_expect(trace.level, op.op, got)}",
            )
    return None


StepWatch = Callable[[int, Any, BaseException | None], None]
"""Called after each replayed step with the step's number, the session, and the error that ended
the comparison there (None if the step agreed): how the trace viewer draws both sides."""


@watched
def replay(
    trace: Trace,
    target_factory: Callable[[Any], Any],
    timeout: float | None = None,
    *,
    watch: StepWatch | None = None,
) -> Verdict:
    """Check the trace's expectations, then replay it against ``target_factory``'s target,
    each call within ``timeout`` (None: the environment's, see ``timeout.py``)."""
    stale = check_expectations(trace)
    if stale is not None:
        return stale
    return replay_target(trace, guard(target_factory, timeout), watch)


def replay_target(
    trace: Trace, target_factory: Callable[[Any], Any], watch: StepWatch | None = None
) -> Verdict:
    """The target's half of ``replay``, for a trace this pagedkv's reference just made."""
    total = len(trace.ops)
    model, _ = create_outcome(trace.level, trace.config, trace.policy)
    try:
        target = target_factory(trace.config)
    except PagedKVError as error:
        if type(error).__name__ == trace.create_error:
            return Verdict("pass", total)
        did = f"raised {error!r}"
        return Verdict("divergence", total, 0, message=_creation(trace, did), kind="creation")
    except TargetStopped as error:
        return Verdict("divergence", total, 0, message=str(error), kind="timeout")
    except Exception as error:
        did = f"raised {error!r}"
        return Verdict("divergence", total, 0, message=_creation(trace, did), kind="creation")
    try:
        return _replay_on(trace, model, target, watch)
    finally:
        close_target(target)


def _replay_on(trace: Trace, model: Any, target: Any, watch: StepWatch | None) -> Verdict:
    total = len(trace.ops)
    if trace.create_error is not None:
        did = "accepted it"
        return Verdict("divergence", total, 0, message=_creation(trace, did), kind="creation")
    try:
        session: Any
        session = make_session(trace, model, target)
    except TargetStopped as error:
        return Verdict("divergence", total, 0, message=str(error), kind="timeout")
    except Exception as error:
        message = f"observing the new target: {error}"
        return Verdict("divergence", total, 0, message=message, kind="stopped")
    for number, op in enumerate(trace.ops, 1):
        if getattr(session, "ended", False):
            break  # a call failed midway under a non-atomic policy: nothing follows it
        try:
            session.call(call_named(trace.level, op.op, op.args))
        except (Exception, TargetStopped) as error:
            if watch is not None:
                watch(number, session, error)
            return Verdict(
                "divergence",
                total,
                number,
                codec.show_call(op.op, op.args),
                show_expect(trace.level, op.op, op.expect),
                str(error) if isinstance(error, Divergence | TargetStopped) else _stopped(error),
                _kind(error),
                error.parts if isinstance(error, Divergence) else (),
            )
        if watch is not None:
            watch(number, session, None)
    problems = session.problems()
    if problems:
        return Verdict("divergence", total, total, message="; ".join(problems), kind="table")
    return Verdict("pass", total)


def make_session(trace: Trace, model: Any, target: Any) -> Any:
    """The session that replays ``trace``: its level's, isomorphic or the safety tier's."""
    if trace.level == "request":
        if trace.safety:
            return RequestSafetySession(target, trace.config)
        return IsomorphicRequestSession(model, target)
    if trace.level == "defrag":
        if trace.safety:
            return DefragSafetySession(target, trace.config)
        return IsomorphicDefragSession(model, target)
    if trace.safety and trace.level == "manager":
        return SafetySession(target, trace.config)
    if trace.safety:
        return PoolSafetySession(target, trace.config)
    if trace.level == "manager":
        return IsomorphicManagerSession(model, target)
    return IsomorphicPoolSession(model, target)


def _kind(error: BaseException) -> str:
    if isinstance(error, Divergence):
        return error.kind
    if isinstance(error, TargetStopped):
        return "timeout"
    return f"stopped: {type(error).__name__}"


def _creation(trace: Trace, did: str) -> str:
    want = (
        f"refuses the configuration with {trace.create_error}"
        if trace.create_error
        else "accepts the configuration"
    )
    return f"the reference {want}; the target {did}"


def _stopped(error: BaseException) -> str:
    return f"comparing stopped on {type(error).__name__}: {error}"


def summarize(traces: Sequence[Trace], level: Level) -> tuple[set[str], set[str]]:
    """The operations (optional ones aside) and error types of ``level`` the traces do not
    cover."""
    ops: set[str] = set()
    errors: set[str] = set()
    for trace in traces:
        ops |= trace.operations()
        errors |= trace.errors()
    return set(required(level)) - ops, set(codec.ERRORS[level]) - errors
