"""Call the same operation on the model and on an implementation, and insist they agree.

Used by every lockstep machine and session, at every layer: same result, or the same error
type; after an error both sides must be exactly as they were before it (invariant I6 of
``specs/invariants.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar, cast, get_args

from hypothesis import currently_in_test_context, event

from pagedkv.model_tests.lockstep.show import Shown, show_error, show_value, text
from pagedkv.specs import wire
from pagedkv.specs.call import Call
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.operations import Level

T = TypeVar("T")


class Viewable(Protocol):
    def view(self) -> Any: ...


DivergenceKind = Literal[
    "result",
    "error",
    "untyped",
    "atomicity",
    "block",
    "table",
    "choice",
    "count",
    "promise",
    "aliasing",
    "accounting",
    "placement",
    "pairs",
    "kv",
    "type",
    "answer",
    "events",
]
"""What a divergence is about. Against the reference: a result that differs; an error on one
side only (or another class); an error that is not of ``pagedkv.specs.errors``; a failed call that
changed state; a pool block or lookup, read through the optional ``block()`` / ``lookup()``,
that differs after a call; block tables that disagree (or cannot be read); a choice the spec
does not allow; a free count; a ``can_*`` answer that a call acting on it broke. Under the
safety tier (``specs/safety.md``), the rule broken: S1 aliasing, S2 accounting, S3 placement, S4
copy and swap pairs, S5 KV data (S6 is ``untyped`` or ``atomicity``, S7 ``promise``). Under
every mode (``answers.py``): an answer that is not the protocol's exact value (``type``: a float, a
numpy scalar, a mock where an ``int`` is due), and one that later turned into another answer
(``answer``: a list reused for the next one), or a call that changed what it was handed
(``answer`` too: the caller's prompt or ids, ``run_call``). At the request level: KV events
that are not the model's (``events``, under a profile) or that mislead a router (under the
safety tier)."""

KINDS: tuple[DivergenceKind, ...] = get_args(DivergenceKind)


class Divergence(AssertionError):
    """The implementation did something the model did not. One call may break several rules at
    once (the safety tier checks them all after each call): ``parts`` are then each finding
    with its own kind, and ``kind`` is the first's."""

    def __init__(
        self,
        message: str,
        kind: DivergenceKind = "result",
        parts: Sequence[tuple[DivergenceKind, str]] = (),
    ) -> None:
        super().__init__(message)
        self.kind: DivergenceKind = parts[0][0] if parts else kind
        self.parts: tuple[tuple[DivergenceKind, str], ...] = tuple(parts) or ((kind, message),)


class TargetStopped(BaseException):
    """The target can no longer be called (it hung): the search stops at once, without the
    shrinking that would call it again. A ``BaseException`` so that no handler meant for the
    target's own errors, nor Hypothesis, takes it for an ordinary failure."""


def comparable(side: Viewable) -> object:
    return side.view().comparable()


def exact_answer(
    level: Level,
    method: str,
    shown: Shown,
    answer: object,
    read: Callable[[object], Any] | None = None,
) -> Any:
    """A target's ``answer`` to ``method`` as the protocol's exact value (``specs/wire.py``: what
    an ``exec:`` target's answer would be, in builtin types, a copy of it); a value that only
    compares like one (a float, ``numpy.int64``, ``unittest.mock.ANY``, an ``int`` subclass) is a
    divergence of kind ``type`` that names its type. ``shown`` is the call as a report writes
    it (or the way to write it, for a divergence only). ``read``: ``wire.exact_reader(level,
    method)``, where the caller keeps it (a session reads every call's answer)."""
    try:
        return wire.exact_result(level, method, answer) if read is None else read(answer)
    except wire.NotExact as error:
        raise Divergence(f"{text(shown)}: the target returned {error.phrase}", "type") from None


def call_both(
    model: Viewable, impl: Viewable, call: Call[Any, T], level: Level
) -> T | PagedKVError:
    """Run ``call`` on both; return the model's result, or the (shared) error it raised.

    Exact mode: the two sides are in the same state when a call starts (the machines check it
    after every step), so after an error it is enough that the implementation's state still
    equals the model's, and that the model kept its frozen state (the reference replaces it
    only when an operation succeeds). No state is copied on the way in. Both results are
    compared as the protocol's exact values (``exact_answer``): the reference's must be one."""
    method = call.name
    model_before = getattr(model, "state", None)
    model_result, model_error = run_call(model, call)
    impl_result, impl_error = run_call(impl, call)
    if model_error is not None or impl_error is not None:
        model_error = shared_error(
            method, (model_result, model_error), (impl_result, impl_error), "implementation"
        )
        if model_before is not None and getattr(model, "state", None) is not model_before:
            raise Divergence(
                f"{method} raised {model_error!r} but changed the model's state", "atomicity"
            )
        if comparable(impl) != comparable(model):
            raise Divergence(
                f"{method} raised {model_error!r}, and then the implementation's state differs"
                " from the model's (a failed call must change nothing)",
                "atomicity",
            )
        if currently_in_test_context():  # the explorer calls it outside Hypothesis
            event(f"error: {type(model_error).__name__} from {method}")
        return model_error
    model_value = wire.exact_result(level, method, model_result)
    impl_value = exact_answer(level, method, method, impl_result)
    if model_value != impl_value:
        raise Divergence(f"{method}: model returned {model_value!r}, implementation {impl_value!r}")
    return cast(T, model_result)


def shared_error(
    method: Shown,
    model: tuple[Any, BaseException | None],
    target: tuple[Any, BaseException | None],
    target_name: str = "target",
) -> PagedKVError:
    """When either side raised: both must have raised the same typed error; return it
    (``method``: the call as a report writes it, written only for a divergence)."""
    (model_result, model_error), (target_result, target_error) = model, target
    untyped = target_error is not None and not isinstance(target_error, PagedKVError)
    if type(model_error) is not type(target_error):
        raise Divergence(
            f"{text(method)}: model {_describe(model_result, model_error)},"
            f" {target_name} {_describe(target_result, target_error)}",
            "untyped" if untyped else "error",
        )
    if not isinstance(model_error, PagedKVError):
        raise Divergence(
            f"{text(method)}: both raised an untyped error: model {_describe(None, model_error)},"
            f" {target_name} {_describe(None, target_error)}",
            "untyped",
        )
    return model_error


_CONTAINERS = (list, tuple, dict, set)
"""What ``detached`` copies (a tuple of types, not a union: ``isinstance`` reads it at C speed)."""
_INTS = frozenset({int})


def detached(value: Any) -> Any:
    """``value`` with every list, dict and set in it copied (tuples rebuilt around them): what
    a side is handed is its own. A target that changed a prompt it was passed in place would
    otherwise change what the reference is then given, and what the trace records, and the two
    would agree on the wrong input. (An int, most items of all, is taken as it is at once:
    every call's arguments are detached, for each side; a list of ints alone, a prompt, is
    copied in C.)"""
    if type(value) is list and _INTS.issuperset(map(type, value)):
        return value.copy()
    if isinstance(value, list):
        return [item if type(item) is int else detached(item) for item in value]
    if isinstance(value, tuple):
        for item in value:
            if isinstance(item, _CONTAINERS):
                return tuple([item if type(item) is int else detached(item) for item in value])
        return value
    if isinstance(value, dict):
        return {key: detached(item) for key, item in value.items()}
    if isinstance(value, set):
        return set(value)
    return value


def run_call(
    side: object, call: Call[Any, T], *, detach: bool = True, **extra: Any
) -> tuple[T | None, BaseException | None]:
    """``call`` on ``side``, with its own copy of the arguments (``detached``; not with
    ``detach=False``, for a side of pagedkv's own that changes no argument it is handed,
    called before any other): the result, or the exception it raised. ``extra`` are
    keyword arguments only the reference takes (the pool's ``choice``)."""
    args = detached(call.args) if detach else call.args
    outcome: tuple[T | None, BaseException | None]
    try:
        outcome = call.method(side)(*args, **extra), None
    except (KeyboardInterrupt, TargetStopped):
        raise
    except BaseException as error:  # SystemExit, GeneratorExit ... too: a finding, not a crash
        if isinstance(error, PagedKVError):
            # A typed error is shown by its class and message alone (``show_error``); its
            # traceback would tie every frame of the call back to the caller that keeps the
            # error (a cycle through the frames' ``f_back``), and a check raises thousands:
            # cyclic garbage that only the collector frees, a fifth of a check's time.
            error.__traceback__ = None
        outcome = None, error
    if args is not call.args and args != call.args:
        raise Divergence(
            f"{call.name}: the target changed the arguments it was handed, from"
            f" {show_value(call.args)} to {show_value(args)}: a caller's lists are its own"
            " (specs/oracle.md §1)",
            "answer",
        )
    return outcome


def _describe(result: Any, error: BaseException | None) -> str:
    return f"raised {show_error(error)}" if error is not None else f"returned {show_value(result)}"


def construction_outcome(factory: Any, config: object) -> str:
    """'accepted', or the name of the typed error a factory refuses ``config`` with."""
    try:
        factory(config)
    except PagedKVError as error:
        return type(error).__name__
    return "accepted"


def assert_same_state(model_view: Any, impl_view: Any, what: str) -> None:
    """Exact mode: the two views must be equal in everything observable."""
    model, impl = model_view.comparable(), impl_view.comparable()
    if model != impl:
        raise Divergence(f"{what} differs:\n model: {model!r}\n impl:  {impl!r}", "table")
