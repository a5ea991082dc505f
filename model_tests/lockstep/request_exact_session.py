"""The request level's sessions: one call on each side, and whether they agree.

``ExactRequestSession`` holds an implementation to the reference call for call (the optimized
manager against the reference): the same answer, of the same types; the same error class; the
same ``view().comparable()`` after every call; and a failed call changes neither side.
``AloneRequestSession`` drives one manager with nothing beside it: what a call answered is all
it records, and the machine's invariants are the whole check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from pagedkv.model_tests.lockstep.calls import Divergence, comparable, run_call, shared_error
from pagedkv.model_tests.lockstep.show import show_call, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.request_calls import RequestCall

T = TypeVar("T")


class RequestSession(Protocol):
    target: Any
    steps: list[Step]

    def call(self, call: RequestCall[T]) -> T | PagedKVError:
        """The call's outcome (the model's, where there is one): its result or its typed
        error. Raises ``Divergence`` where the sides disagree, and lets a target's untyped
        error through as one."""
        ...


def typed(value: object) -> object:
    """``value`` with each part's exact type beside it: an answer equal to the model's but of
    another type (a tuple for a list, a ``bool`` or ``numpy.int64`` for an ``int``) differs."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(typed(item) for item in value))
    return (type(value).__name__, value)


@dataclass
class ExactRequestSession:
    model: RequestKVManager
    target: RequestKVManager
    steps: list[Step] = field(default_factory=list)

    def call(self, call: RequestCall[T]) -> T | PagedKVError:
        before = comparable(self.model)
        model_result, model_error = run_call(self.model, call)
        target_result, target_error = run_call(self.target, call)
        shown = show_call(call.name, call.args)
        if model_error is not None or target_error is not None:
            error = shared_error(shown, (model_result, model_error), (target_result, target_error))
            if comparable(self.model) != before:
                raise Divergence(f"{shown} raised {error!r} but changed the model", "atomicity")
            if comparable(self.target) != before:
                raise Divergence(
                    f"{shown} raised {error!r} and changed the target (a failed call must"
                    " change nothing)",
                    "atomicity",
                )
            self.steps.append(Step(call.name, call.args, error))
            return error
        if typed(model_result) != typed(target_result):
            raise Divergence(
                f"{shown}: model returned {show_value(model_result)},"
                f" target {show_value(target_result)}"
            )
        model_state, target_state = comparable(self.model), comparable(self.target)
        if model_state != target_state:
            raise Divergence(
                f"after {shown} the states differ:\n model:  {model_state!r}\n"
                f" target: {target_state!r}",
                "table",
            )
        self.steps.append(Step(call.name, call.args, model_result))
        return cast(T, model_result)


@dataclass
class AloneRequestSession:
    target: RequestKVManager
    steps: list[Step] = field(default_factory=list)

    def call(self, call: RequestCall[T]) -> T | PagedKVError:
        before = comparable(self.target)
        result, error = run_call(self.target, call)
        shown = show_call(call.name, call.args)
        if error is not None:
            if not isinstance(error, PagedKVError):
                raise Divergence(f"{shown} raised an untyped {error!r}", "untyped")
            if comparable(self.target) != before:
                raise Divergence(f"{shown} raised {error!r} and changed the target", "atomicity")
            self.steps.append(Step(call.name, call.args, error))
            return error
        self.steps.append(Step(call.name, call.args, result))
        return cast(T, result)
