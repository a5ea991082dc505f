"""The defrag level's machine: an engine over a defragmenter (``specs/defragmenter.md`` §5).

Per run it draws a small configuration, then plays what an engine tells a defragmenter: block
tables per key (a request or a sequence: integer and string keys both) that appear, grow, change
in place (copy-on-write, a window's release to the null block), share ids with each other (a
fork, a prefix hit) and finish; ``defragment()`` at any point; the queries (``resolve``,
``resolve_all``, ``unresolve``); and the misuses a defragmenter must refuse. The session holds
the target to the reference exactly (``lockstep/defrag_isomorphic_session.py``) or to the safety
tier alone (``lockstep/defrag_safety_session.py``); both run the KV model after every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.defrag_isomorphic_session import IsomorphicDefragSession
from pagedkv.model_tests.lockstep.defrag_safety_session import DefragSafetySession
from pagedkv.model_tests.machines.defrag_draws import MISUSES, defrag_configs
from pagedkv.model_tests.machines.draws import BOOLEANS, integers, sampled
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.lockstep_machine import LockstepMachine
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import defrag_calls as calls
from pagedkv.specs.defrag_calls import DefragCall
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.types import BlockId, DefragConfig, TableKey

T = TypeVar("T")

Tier = Literal["isomorphic", "safety"]

EDITS = ("grow", "grow", "in place", "share", "shrink")
"""How a known table changes: it grows (a decode step), one entry changes (copy-on-write, a
window's release to the null block), it takes another table's prefix (a fork, a hit), or it
loses its tail (a rolled-back draft)."""


class DefragLockstep(LockstepMachine):
    """Subclass and set ``make_target``, or call ``defrag_case``."""

    make_target: ClassVar[Callable[[DefragConfig], Any]]
    tier: ClassVar[Tier] = "isomorphic"
    contract: ClassVar[str] = "any"
    """``scheduler``: no calls meant to fail (``specs/oracle.md`` §1)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: capture.RecordedCall | None = None
        self.tables: dict[TableKey, list[BlockId]] = {}
        self.keys_made = 0
        self.model: ReferenceDefragmenter | None = None

    @initialize(config=defrag_configs())
    def create(self, config: DefragConfig) -> None:
        self.config = config
        self.target = capture.build_target(self, config)
        self.session: IsomorphicDefragSession | DefragSafetySession
        if type(self).tier == "safety":
            self.session = DefragSafetySession(self.target, config)
        else:
            self.model = ReferenceDefragmenter(config)
            self.session = IsomorphicDefragSession(self.model, self.target)
        event(f"config: {config.num_blocks} blocks, threshold {config.threshold}")

    def both(self, call: DefragCall[T]) -> T | PagedKVError:
        """One call through the session."""
        event(f"rule: {call.name}")
        self.pending = (call.name, call.args)
        outcome = self.session.call(call)
        self.pending = None
        return outcome

    def succeeded(self, call: DefragCall[T]) -> T:
        """A call an engine makes with valid arguments: it must not raise."""
        outcome = self.both(call)
        if isinstance(outcome, PagedKVError):
            raise Divergence(f"{call!r} refused an engine's valid call: {outcome!r}", "error")
        return outcome

    # --- drawing ----------------------------------------------------------------------------

    def _id(self, data: st.DataObject, label: str) -> BlockId:
        return data.draw(integers(0, self.config.num_blocks - 1), label=label)

    def _ids(self, data: st.DataObject, count: int) -> list[BlockId]:
        return [self._id(data, "logical id") for _ in range(count)]

    def _new_key(self, data: st.DataObject) -> TableKey:
        self.keys_made += 1
        as_text = data.draw(BOOLEANS, label="a string key")
        return f"r{self.keys_made}" if as_text else self.keys_made

    def _edited(self, data: st.DataObject, table: list[BlockId]) -> list[BlockId]:
        edit = data.draw(sampled(EDITS), label="edit")
        if edit == "in place" and table:
            at = data.draw(integers(0, len(table) - 1), label="entry")
            return [*table[:at], self._id(data, "new id"), *table[at + 1 :]]
        if edit == "share" and self.tables:
            others = list(self.tables.values())
            other = others[data.draw(integers(0, len(others) - 1), label="shared with")]
            cut = data.draw(integers(0, len(other)), label="shared prefix")
            return [*other[:cut], *self._ids(data, data.draw(integers(0, 2)))]
        if edit == "shrink" and table:
            return table[: data.draw(integers(0, len(table) - 1), label="kept")]
        return [*table, *self._ids(data, data.draw(integers(1, 3), label="grown by"))]

    # --- the engine's calls -----------------------------------------------------------------

    @rule(data=DATA)
    def update(self, data: st.DataObject) -> None:
        """``update_state`` with the tables that changed this step and those that finished."""
        changed: dict[TableKey, list[BlockId]] = {}
        for _ in range(data.draw(integers(0, 3), label="tables changed")):
            known = [key for key in self.tables if key not in changed]
            if bool(known) and data.draw(BOOLEANS, label="a known table"):
                key = data.draw(sampled(tuple(known)), label="table")
                changed[key] = self._edited(data, self.tables[key])
            else:
                changed[self._new_key(data)] = self._edited(data, [])
        done = [key for key in self.tables if key not in changed]
        finished = [
            key for key in done if data.draw(sampled((False, False, True)), label="finishes")
        ]
        self.succeeded(calls.update_state(changed, finished))
        self.tables.update(changed)
        for key in finished:
            del self.tables[key]

    @rule()
    def defragment(self) -> None:
        pairs = self.succeeded(calls.defragment())
        event(f"outcome: {'some' if pairs else 'no'} exchanges")

    @rule(data=DATA)
    def query(self, data: st.DataObject) -> None:
        """What an engine asks before the model runs: a table resolved, an id either way."""
        which = data.draw(sampled(("resolve", "unresolve", "resolve_all")), label="query")
        if which == "resolve":
            self.succeeded(calls.resolve(self._id(data, "logical id")))
        elif which == "unresolve":
            self.succeeded(calls.unresolve(self._id(data, "physical id")))
        else:
            self.succeeded(calls.resolve_all([list(t) for t in self.tables.values()]))

    @precondition(lambda self: type(self).contract == "any")
    @rule(kind=sampled(MISUSES), data=DATA)
    def misuse(self, kind: str, data: st.DataObject) -> None:
        """A call the spec refuses: the session holds the target to a typed error and to no
        change. Keys in a malformed ``changed`` are strings, so that a trace can write it."""
        outcome = self.both(self._misused(kind, data))
        if not isinstance(outcome, PagedKVError):
            raise Divergence(f"{kind}: accepted, the spec refuses it", "error")

    def _misused(self, kind: str, data: st.DataObject) -> DefragCall[Any]:
        n = self.config.num_blocks
        known = tuple(self.tables)
        key = data.draw(sampled(known), label="key") if known else None
        bad: Any
        if kind == "changed not a mapping":
            bad = [[0]]
            return calls.update_state(bad, [])
        if kind == "table not a sequence":
            bad = {"m": 0}
            return calls.update_state(bad, [])
        if kind == "id not an int":
            bad = {"m": [data.draw(sampled(("0", 0.0, True)), label="not an int")]}
            return calls.update_state(bad, [])
        if kind == "foreign id":
            return calls.update_state({"m": [data.draw(sampled((n, -1)), label="foreign")]}, [])
        if kind == "finished not a collection":
            bad = data.draw(sampled((0, "ab")), label="finished")
            return calls.update_state({}, bad)
        if kind == "unhashable finished key":
            bad = [[0]]
            return calls.update_state({}, bad)
        if kind == "changed and finished" and key is not None:
            return calls.update_state({key: list(self.tables[key])}, [key])
        if kind == "finished twice" and key is not None:
            return calls.update_state({}, [key, key])
        if kind == "resolve not an int":
            bad = data.draw(sampled(("0", 0.5, True)), label="not an int")
            return calls.resolve(bad)
        if kind == "resolve foreign id":
            return calls.resolve(data.draw(sampled((n, -1)), label="foreign"))
        if kind == "unresolve foreign id":
            return calls.unresolve(data.draw(sampled((n, -1)), label="foreign"))
        if kind == "resolve_all foreign id":
            return calls.resolve_all([[0 if n > 1 else n, n]])
        if kind == "resolve_all not tables":
            bad = 0
            return calls.resolve_all(bad)
        return calls.update_state({}, ["nobody"])  # an unknown key (or no key to misuse)

    def teardown(self) -> None:
        self.hand_over_scores()
        capture.finish(self, "defrag", safety=type(self).tier == "safety")


def defrag_case(
    factory: Callable[[DefragConfig], Any], *, tier: Tier = "isomorphic", contract: str = "any"
) -> type[DefragLockstep]:
    """A machine class checking ``factory``'s defragmenters: against the reference exactly, or
    alone against the safety tier, making the calls ``contract`` allows."""
    return type(
        f"DefragLockstep_{getattr(factory, '__name__', 'target')}",
        (DefragLockstep,),
        {"make_target": staticmethod(factory), "tier": tier, "contract": contract},
    )
