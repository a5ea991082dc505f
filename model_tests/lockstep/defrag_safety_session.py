"""The defrag level's safety tier: a target defragmenter held to what every correct one
guarantees, read through its protocol alone (``specs/defragmenter.md``, "The oracle's defrag
level").

The session keeps the tables the caller told the target of (every ``update_state`` that
succeeded) and reads the target's mapping after every call (``defrag_reading.py``). Then:

- placement: ``forward`` and ``backward`` are inverse permutations and reserved ids map to
  themselves (I4, ``invariants.defragmenter_state``); only ``defragment()`` moves anything, and
  ``resolve``, ``resolve_all`` and ``unresolve`` answer the mapping;
- pairs: one ``defragment()`` acts exactly when the trigger fires over the ids the told tables
  use; each pair moves a used id down into a free one, no id twice, as many pairs as
  ``minimum_exchanges``, the used ids ``compacted`` after them, ``backward`` traded pair by pair
  (I8, ``invariants.defragmentation``);
- KV: every block written reads its own KV through the mapping after the exchanges
  (``defrag_kv.py``);
- errors: a call the spec's checks refuse (``specs/validation.py``) must raise a typed error
  and change nothing; one they accept must not raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import Divergence, DivergenceKind, run_call
from pagedkv.model_tests.lockstep.defrag_kv import DefragKV
from pagedkv.model_tests.lockstep.defrag_reading import protocol_view, read_mapping
from pagedkv.model_tests.lockstep.show import show_call, show_error
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.specs import invariants
from pagedkv.specs.defrag_calls import DefragCall
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.types import BlockId, DefragConfig, TableKey
from pagedkv.specs.validation import check_defrag_id, check_defrag_tables, check_table_update

T = TypeVar("T")


@dataclass
class DefragSafetySession:
    target: Any
    config: DefragConfig
    steps: list[Step] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.answers = Answers(self.target, "defrag")
        self.tables: dict[TableKey, tuple[BlockId, ...]] = {}
        self.kv = DefragKV()
        self.mapping = read_mapping(self.target, self.config, "when it was created")
        placement = invariants.defragmenter_state(self._view(), self.tables)
        if placement:
            raise Divergence("the new target: " + "; ".join(placement), "placement")

    def _view(self) -> Any:
        return protocol_view(self.config, self.mapping, self.tables)

    def call(self, call: DefragCall[T]) -> T | PagedKVError:
        shown = show_call(call.name, call.args)
        refusal = self._refusal(call)
        before, before_view = self.mapping, self._view()
        result, error = run_call(self.target, call)
        value = self.answers.take(call, shown, result, error is not None)
        if error is not None:
            if not isinstance(error, PagedKVError):
                raise Divergence(
                    f"{shown}: the target raised an untyped {show_error(error)}", "untyped"
                )
            if refusal is None:
                raise Divergence(
                    f"{shown}: the target refused a valid call with {show_error(error)}", "error"
                )
            after = read_mapping(self.target, self.config, f"after {shown} raised")
            if after != before:
                moved = "; ".join(before.differences(after, "before", "after"))
                raise Divergence(
                    f"{shown} raised {type(error).__name__} and changed the mapping: {moved} (a"
                    " failed call changes nothing)",
                    "atomicity",
                )
            self.steps.append(Step(call.name, call.args, error))
            return error
        if refusal is not None:
            raise Divergence(
                f"{shown}: the target accepted what the spec refuses ({refusal})", "error"
            )
        self.mapping = read_mapping(self.target, self.config, f"after {shown}")
        findings = self._findings(call, value, before, before_view)
        if findings:
            raise Divergence(
                f"{shown}: " + "; ".join(message for _, message in findings),
                parts=[(kind, f"{shown}: {message}") for kind, message in findings],
            )
        self.answers.recheck("after pagedkv read the target's mapping")
        self.steps.append(Step(call.name, call.args, value))
        return cast(T, value)

    def _refusal(self, call: DefragCall[Any]) -> str | None:
        """Why the spec's checks refuse ``call``'s arguments, or None where they accept them."""
        try:
            if call.name == "update_state":
                check_table_update(self.config, call.args[0], call.args[1], self.tables)
            elif call.name == "resolve_all":
                check_defrag_tables(self.config, call.args[0])
            elif call.name in ("resolve", "unresolve"):
                check_defrag_id(self.config, call.args[0])
        except PagedKVError as error:
            return f"{type(error).__name__}: {error}"
        return None

    def _findings(
        self, call: DefragCall[Any], value: Any, before: Any, before_view: Any
    ) -> list[tuple[DivergenceKind, str]]:
        findings: list[tuple[DivergenceKind, str]] = []
        forward = self.mapping.forward
        if call.name == "defragment":
            ids = range(self.config.num_blocks)
            foreign = [pair for pair in value if pair[0] not in ids or pair[1] not in ids]
            if foreign:
                findings.append(("pairs", f"pairs {foreign} name ids out of range"))
            else:
                pairs = invariants.defragmentation(before_view, self._view(), value)
                findings += [("pairs", problem) for problem in pairs]
            self.kv.exchange(value)
        elif self.mapping != before:
            moved = "; ".join(before.differences(self.mapping, "before", "after"))
            findings.append(("placement", f"only defragment() moves blocks, yet {moved}"))
        if call.name == "update_state":
            changed: Mapping[TableKey, Any] = call.args[0]
            tables, finished = check_table_update(self.config, changed, call.args[1], self.tables)
            self.tables.update({key: tuple(table) for key, table in tables.items()})
            for key in finished:
                del self.tables[key]
            self.kv.write_new(tables.values(), forward)
        if call.name == "resolve" and value != forward[call.args[0]]:
            findings.append(
                ("result", f"answered {value}, the mapping says {forward[call.args[0]]}")
            )
        if call.name == "unresolve" and value != self.mapping.backward[call.args[0]]:
            findings.append(
                (
                    "result",
                    f"answered {value}, the mapping says {self.mapping.backward[call.args[0]]}",
                )
            )
        if call.name == "resolve_all":
            wanted = [[forward[b] for b in table] for table in call.args[0]]
            if value != wanted:
                findings.append(("result", f"answered {value}, the mapping says {wanted}"))
        state = invariants.defragmenter_state(self._view(), self.tables)
        findings += [("placement", problem) for problem in state]
        if not state:
            findings += [("kv", problem) for problem in self.kv.problems(forward)]
        return findings

    def problems(self) -> list[str]:
        """Nothing is left to check once every call has been (what a replay asks at its end)."""
        return []
