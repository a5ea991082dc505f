"""Deliberately broken variants of ``IndependentDefragmenter``: fixtures the defrag level must
reject (``specs/corpus.md``).

Each class changes one method of its parent and has exactly one bug, named by the class and
stated in its docstring. None is an allowed reading of ``specs/defragmenter.md``, so the
isomorphic check must report each; the safety tier reports those that break what every correct
defragmenter guarantees (all but the pairs' order).
"""

from __future__ import annotations

from typing import Any

from pagedkv.model_tests.independent.defragmenter import IndependentDefragmenter


class DefragTriggerAtThreshold(IndependentDefragmenter):
    """The trigger reads ``>=`` where the spec says ``>``: it acts one used block early."""

    def _triggered(self) -> bool:
        used = self.holders.keys()
        return bool(used) and max(used) - self._config.threshold >= len(used)


class DefragPairsPastTheMiddle(IndependentDefragmenter):
    """Pairing goes on after the free id passes the used one: used blocks move up."""

    def _stops(self, plan: list[tuple[int, int]], top: int, hole: int) -> bool:
        return len(plan) >= self._config.max_pairs


class DefragCapIgnored(IndependentDefragmenter):
    """One run moves every misplaced block, past ``max_pairs`` (the largest pad size)."""

    def _stops(self, plan: list[tuple[int, int]], top: int, hole: int) -> bool:
        return hole > top


class DefragCapOffByOne(IndependentDefragmenter):
    """The cap is checked after a pair is added: one pair more than ``max_pairs``."""

    def _stops(self, plan: list[tuple[int, int]], top: int, hole: int) -> bool:
        return hole > top or len(plan) > self._config.max_pairs


class DefragPairsOutOfOrder(IndependentDefragmenter):
    """The pairs come back lowest used id first (the same exchanges, not the spec's order)."""

    def defragment(self) -> list[tuple[int, int]]:
        return super().defragment()[::-1]


class DefragMovesReservedHoles(IndependentDefragmenter):
    """A free reserved id is taken as a hole: a used block moves into the null block."""

    def _holes(self) -> list[int]:
        return [p for p in range(self._config.num_blocks) if p not in self.holders]


class DefragExchangeForgetsFreeSide(IndependentDefragmenter):
    """An exchange remaps the used block's logical id but not the free one's: the evictable
    block that sat at the free id is lost (its logical id resolves where the other went)."""

    def _exchange(self, used: int, free: int) -> None:
        self._place(self._logical_at(used), free)
        self.holders[free] = self.holders.pop(used)


class DefragFinishedKeepsReferences(IndependentDefragmenter):
    """A finished table is forgotten, but its references are not given back."""

    def update_state(self, changed: object, finished: object) -> None:
        kept = dict(self.holders)
        before = set(self.tables)
        super().update_state(changed, finished)
        gone = before - set(self.tables)
        if gone:
            for physical, count in kept.items():
                self.holders[physical] = max(count, self.holders.get(physical, 0))


class DefragTableIdsUnchecked(IndependentDefragmenter):
    """``update_state`` takes ids past the pool (no ``ForeignBlockError``)."""

    def _table(self, value: object) -> list[int]:
        if isinstance(value, list | tuple) and all(
            isinstance(b, int) and not isinstance(b, bool) and b >= self._config.num_blocks
            for b in value
        ):
            return list(value)
        return super()._table(value)


class DefragUpdateNotAtomic(IndependentDefragmenter):
    """The changed tables are counted before ``finished`` is checked: a refused update leaves
    their references behind."""

    def update_state(self, changed: object, finished: object) -> None:
        if isinstance(changed, dict):
            for key, table in changed.items():
                checked = self._table(table)
                self._count(self.tables.get(key, []), -1)
                self._count(checked, +1)
                self.tables[key] = checked
            super().update_state({}, finished)
            return
        super().update_state(changed, finished)


class DefragResolveAllUnmapped(IndependentDefragmenter):
    """``resolve_all`` checks the tables and hands them back unresolved."""

    def resolve_all(self, tables: object) -> list[list[int]]:
        super().resolve_all(tables)
        assert isinstance(tables, list | tuple)
        return [list(table) for table in tables]


class DefragResolveUnmapped(IndependentDefragmenter):
    """``resolve`` answers the logical id itself once blocks have moved."""

    def resolve(self, block: object) -> int:
        return self._id(block, "logical")


class DefragUnresolveThroughForward(IndependentDefragmenter):
    """``unresolve`` looks the id up in the forward table (right only while every move is a
    single exchange)."""

    def unresolve(self, physical: object) -> int:
        return self._physical_of(self._id(physical, "physical"))


BROKEN: tuple[type[Any], ...] = (
    DefragTriggerAtThreshold,
    DefragPairsPastTheMiddle,
    DefragCapIgnored,
    DefragCapOffByOne,
    DefragPairsOutOfOrder,
    DefragMovesReservedHoles,
    DefragExchangeForgetsFreeSide,
    DefragFinishedKeepsReferences,
    DefragTableIdsUnchecked,
    DefragUpdateNotAtomic,
    DefragResolveAllUnmapped,
    DefragResolveUnmapped,
    DefragUnresolveThroughForward,
)
"""Every variant, in the corpus's order."""
