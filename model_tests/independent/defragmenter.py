"""A defragmenter written apart from pagedkv's two, from ``specs/defragmenter.md`` alone: what
the oracle's defrag level must accept (``independent`` at ``--level defrag``).

Its own structure: the mapping is two dicts that hold only the ids that have moved (an id
absent from them maps to itself), the references are a dict of per-id holder counts, the
tables a dict of lists, and each run plans its pairs from two sorted lists built on the spot.
The checks are its own too, in the order of the spec's §3. ``defragmenter_broken.py`` holds
variants with one mistake each, which the oracle must reject.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.errors import (
    ConfigurationError,
    ForeignBlockError,
    InvalidArgumentError,
    UnknownSequenceError,
)
from pagedkv.specs.types import DefragConfig


def _whole(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _listlike(value: object) -> bool:
    """A sequence of items (text is not one)."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


class IndependentDefragmenter:
    """Logical -> physical ids under one device's block tables (``specs/defragmenter.md``)."""

    def __init__(self, config: DefragConfig) -> None:
        self._check_config(config)
        self._config = config
        self.moved_to: dict[int, int] = {}
        """Logical id -> physical id, for the logical ids not at their own id."""
        self.moved_from: dict[int, int] = {}
        """Physical id -> logical id, for the physical ids not holding their own."""
        self.holders: dict[int, int] = {}
        """Physical id -> how many table entries resolve to it (only ids with some)."""
        self.tables: dict[Any, list[int]] = {}

    @property
    def config(self) -> DefragConfig:
        return self._config

    @staticmethod
    def _check_config(config: object) -> None:
        if not isinstance(config, DefragConfig):
            raise ConfigurationError(f"not a DefragConfig: {config!r}")
        if not _whole(config.num_blocks) or config.num_blocks < 1:
            raise ConfigurationError(f"num_blocks must be an int >= 1: {config.num_blocks!r}")
        if not _whole(config.threshold) or config.threshold < 0:
            raise ConfigurationError(f"threshold must be an int >= 0: {config.threshold!r}")
        sizes = config.pad_sizes
        if (
            not isinstance(sizes, tuple)
            or not sizes
            or any(not _whole(size) or size < 1 for size in sizes)
            or any(a >= b for a, b in itertools.pairwise(sizes))
        ):
            raise ConfigurationError(f"pad_sizes must increase strictly from 1 up: {sizes!r}")
        reserved = config.reserved
        if not isinstance(reserved, frozenset) or any(
            not _whole(b) or not 0 <= b < config.num_blocks for b in reserved
        ):
            raise ConfigurationError(f"reserved must be a frozenset of ids in range: {reserved!r}")

    # --- ids ---------------------------------------------------------------------------------

    def _id(self, value: object, what: str) -> int:
        if not _whole(value):
            raise InvalidArgumentError(f"a {what} id must be an int, not {value!r}")
        assert isinstance(value, int)
        if not 0 <= value < self._config.num_blocks:
            raise ForeignBlockError(
                f"{what} id {value} is outside 0..{self._config.num_blocks - 1}"
            )
        return value

    def _table(self, value: object) -> list[int]:
        if not _listlike(value):
            raise InvalidArgumentError(f"a block table must be a sequence of ids, not {value!r}")
        assert isinstance(value, Sequence)
        return [self._id(item, "logical") for item in value]

    def _physical_of(self, logical: int) -> int:
        return self.moved_to.get(logical, logical)

    def _logical_at(self, physical: int) -> int:
        return self.moved_from.get(physical, physical)

    def resolve(self, block: object) -> int:
        return self._physical_of(self._id(block, "logical"))

    def resolve_all(self, tables: object) -> list[list[int]]:
        if not _listlike(tables):
            raise InvalidArgumentError(f"expected a sequence of block tables, not {tables!r}")
        assert isinstance(tables, Sequence)
        checked = [self._table(table) for table in tables]
        return [[self._physical_of(b) for b in table] for table in checked]

    def unresolve(self, physical: object) -> int:
        return self._logical_at(self._id(physical, "physical"))

    # --- tables ------------------------------------------------------------------------------

    def _count(self, table: Iterable[int], step: int) -> None:
        for logical in table:
            physical = self._physical_of(logical)
            left = self.holders.get(physical, 0) + step
            if left:
                self.holders[physical] = left
            else:
                self.holders.pop(physical, None)

    def _finished_keys(self, finished: object, changed: Mapping[Any, Any]) -> list[Any]:
        if not _listlike(finished) and not isinstance(finished, AbstractSet):
            raise InvalidArgumentError(f"finished must be a collection of keys, not {finished!r}")
        assert isinstance(finished, Collection)
        keys: list[Any] = []
        for key in finished:
            if not isinstance(key, Hashable):
                raise InvalidArgumentError(f"a table key must be hashable: {key!r}")
            if key in changed:
                raise InvalidArgumentError(f"table {key!r} is changed and finished at once")
            if key not in self.tables or key in keys:
                raise UnknownSequenceError(f"no table {key!r} to finish")
            keys.append(key)
        return keys

    def update_state(self, changed: object, finished: object) -> None:
        if not isinstance(changed, Mapping):
            raise InvalidArgumentError(f"changed must be a mapping of tables, not {changed!r}")
        new_tables = {key: self._table(table) for key, table in changed.items()}
        done = self._finished_keys(finished, new_tables)
        for key, table in new_tables.items():
            self._count(self.tables.get(key, []), -1)
            self._count(table, +1)
            self.tables[key] = table
        for key in done:
            self._count(self.tables.pop(key), -1)

    # --- defragmentation ---------------------------------------------------------------------

    def _triggered(self) -> bool:
        used = self.holders.keys()
        return bool(used) and max(used) - self._config.threshold > len(used)

    def _movable(self, physical: int) -> bool:
        return physical not in self._config.reserved

    def _plan(self) -> list[tuple[int, int]]:
        """Movable used ids from the top against movable free ids from the bottom."""
        plan: list[tuple[int, int]] = []
        for top, hole in zip(self._tops(), self._holes(), strict=False):
            if self._stops(plan, top, hole):
                break
            plan.append((top, hole))
        return plan

    def _tops(self) -> list[int]:
        return sorted((p for p in self.holders if self._movable(p)), reverse=True)

    def _holes(self) -> list[int]:
        free = (p for p in range(self._config.num_blocks) if p not in self.holders)
        return [p for p in free if self._movable(p)]

    def _stops(self, plan: list[tuple[int, int]], top: int, hole: int) -> bool:
        """The free id passed the used one, or the cap is reached."""
        return hole > top or len(plan) >= self._config.max_pairs

    def _exchange(self, used: int, free: int) -> None:
        """The two physical ids trade their logical blocks and the references."""
        went_up, went_down = self._logical_at(free), self._logical_at(used)
        self._place(went_down, free)
        self._place(went_up, used)
        self.holders[free] = self.holders.pop(used)

    def _place(self, logical: int, physical: int) -> None:
        if logical == physical:
            self.moved_to.pop(logical, None)
            self.moved_from.pop(physical, None)
        else:
            self.moved_to[logical] = physical
            self.moved_from[physical] = logical

    def defragment(self) -> list[tuple[int, int]]:
        if not self._triggered():
            return []
        plan = self._plan()
        for used, free in plan:
            self._exchange(used, free)
        return plan

    def view(self) -> DefragmenterView:
        ids = range(self._config.num_blocks)
        return DefragmenterView(
            config=self._config,
            forward=tuple(self._physical_of(b) for b in ids),
            backward=tuple(self._logical_at(p) for p in ids),
            ref_counts=dict(self.holders),
            tables={key: tuple(table) for key, table in self.tables.items()},
        )
