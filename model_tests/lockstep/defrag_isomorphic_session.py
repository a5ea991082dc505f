"""The defrag level against the reference: every answer the reference's, exactly.

A defragmenter has no choice to make: which ids pair up, in which order, and where every logical
id lands are fixed by ``specs/defragmenter.md`` §3. So the target's results are compared with
the reference's as they are (no bijection), its errors by class, and after every call its
mapping, read through ``resolve`` and ``unresolve`` of every id (``defrag_reading.py``), must be
the reference's. A target that offers ``view()`` (a ``DefragmenterView``) is compared on its
ref counts and held tables too. A failed call must leave the mapping (and the view) as it was. The
KV model (``defrag_kv.py``) reads every written block back through the target's mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import Divergence, run_call, shared_error
from pagedkv.model_tests.lockstep.defrag_kv import DefragKV
from pagedkv.model_tests.lockstep.defrag_reading import DefragReading, read_mapping
from pagedkv.model_tests.lockstep.show import show_call, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import wire
from pagedkv.specs.defrag_calls import DefragCall
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.errors import PagedKVError

T = TypeVar("T")


def offered_view(target: Any) -> DefragmenterView | None:
    """The target's ``view()``, where it offers one of the spec's kind."""
    view = getattr(target, "view", None)
    if not callable(view):
        return None
    found = view()
    return found if isinstance(found, DefragmenterView) else None


@dataclass
class IsomorphicDefragSession:
    model: ReferenceDefragmenter
    target: Any
    steps: list[Step] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.config = self.model.config
        self.answers = Answers(self.target, "defrag")
        self.kv = DefragKV()
        self.mapping = self._compare_mapping("when it was created")

    def call(self, call: DefragCall[T]) -> T | PagedKVError:
        shown = show_call(call.name, call.args)
        model_result, model_error = run_call(self.model, call)
        target_result, target_error = run_call(self.target, call)
        value = self.answers.take(call, shown, target_result, target_error is not None)
        if model_error is not None or target_error is not None:
            error = shared_error(shown, (model_result, model_error), (target_result, target_error))
            # the reference changed nothing: a target's mapping equal to it is as it was
            self._compare_mapping(f"after {shown} raised", failed=True)
            self.steps.append(Step(call.name, call.args, error))
            return error
        expected = wire.exact_result("defrag", call.name, model_result)
        if value != expected:
            raise Divergence(
                f"{shown}: the reference returned {show_value(expected)}, the target"
                f" {show_value(value)}",
                "pairs" if call.name == "defragment" else "result",
            )
        self.mapping = self._compare_mapping(f"after {shown}")
        if call.name == "update_state":
            self.kv.write_new(call.args[0].values(), self.mapping.forward)
        if call.name == "defragment":
            self.kv.exchange(expected)
        lost = self.kv.problems(self.mapping.forward)
        if lost:
            raise Divergence(f"after {shown}: " + "; ".join(lost), "kv")
        self.answers.recheck("after pagedkv read the target's mapping")
        self.steps.append(Step(call.name, call.args, model_result))
        return cast(T, model_result)

    def _compare_mapping(self, when: str, *, failed: bool = False) -> DefragReading:
        """The target's mapping, which must be the reference's (and its view, if it offers
        one); ``failed``: after a call that raised, where a difference is a change."""
        reading = read_mapping(self.target, self.config, when)
        model = self.model.view()
        expected = DefragReading(model.forward, model.backward)
        if reading != expected:
            raise Divergence(
                f"{when}, the target's mapping differs from the reference's:"
                f" {'; '.join(expected.differences(reading, 'in the reference', 'in the target'))}",
                "atomicity" if failed else "table",
            )
        view = offered_view(self.target)
        if view is not None and (dict(view.ref_counts), dict(view.tables)) != (
            dict(model.ref_counts),
            dict(model.tables),
        ):
            raise Divergence(
                f"{when}, the target's view differs from the reference's: ref counts"
                f" {dict(sorted(view.ref_counts.items()))}, the reference's"
                f" {dict(sorted(model.ref_counts.items()))}; tables {dict(view.tables)}, the"
                f" reference's {dict(model.tables)}",
                "atomicity" if failed else "table",
            )
        return reading

    def problems(self) -> list[str]:
        """Nothing is left to check once every call has been (what a replay asks at its end)."""
        return []
