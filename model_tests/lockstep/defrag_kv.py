"""The KV a defragmenter moves, modelled: what an engine would find at each physical id
(``specs/defragmenter.md`` §5; invariant I5 through ``resolve``).

When a table first references a logical block, the engine writes that block's KV at the
physical id it resolves to; here the KV is the logical id itself. Every pair a ``defragment()``
returns is run as the true exchange ``swap_blocks_in_place`` makes. Afterwards every logical
block ever written, held by a table or not (an evictable cached block's KV is wanted by a later
hit), must read its own KV at the physical id it resolves to now.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pagedkv.specs.types import BlockId


@dataclass
class DefragKV:
    cells: dict[BlockId, BlockId] = field(default_factory=dict)
    """Physical id -> the logical block whose KV sits there."""
    written: set[BlockId] = field(default_factory=set)
    """The logical blocks whose KV has been written."""

    def write_new(self, tables: Iterable[Sequence[BlockId]], forward: Sequence[BlockId]) -> None:
        """The engine writes the KV of each logical block a table references for the first
        time, through the mapping in force."""
        for table in tables:
            for block in table:
                if block not in self.written and 0 <= block < len(forward):
                    self.cells[forward[block]] = block
                    self.written.add(block)

    def exchange(self, pairs: Iterable[tuple[BlockId, BlockId]]) -> None:
        """``swap_blocks_in_place``: each pair's two blocks trade their KV."""
        for first, second in pairs:
            one, other = self.cells.pop(first, None), self.cells.pop(second, None)
            if other is not None:
                self.cells[first] = other
            if one is not None:
                self.cells[second] = one

    def problems(self, forward: Sequence[BlockId]) -> list[str]:
        """Every written logical block that no longer reads its own KV."""
        found = []
        for block in sorted(self.written):
            physical = forward[block]
            there = self.cells.get(physical)
            if there != block:
                what = "nothing written" if there is None else f"logical block {there}'s KV"
                found.append(
                    f"logical block {block} resolves to physical {physical}, which holds {what}"
                )
        return found
