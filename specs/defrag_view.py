"""The observable state of a defragmenter: what the lockstep tests compare and the invariants
read (``specs/defragmenter.md`` §2). Both implementations render their state into this value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pagedkv.specs.types import BlockId, DefragConfig, TableKey


@dataclass(frozen=True, slots=True)
class DefragmenterView:
    config: DefragConfig
    forward: tuple[BlockId, ...]
    """Logical id (what the block manager and its tables say) -> physical id (where the KV is)."""
    backward: tuple[BlockId, ...]
    """Physical id -> logical id: the inverse of ``forward``."""
    ref_counts: Mapping[BlockId, int]
    """Physical id -> references the known tables hold on it; only ids with at least one."""
    tables: Mapping[TableKey, tuple[BlockId, ...]]
    """Each known table, in logical ids, as last passed to ``update_state``."""

    @property
    def used(self) -> frozenset[BlockId]:
        """The physical ids some known table holds."""
        return frozenset(self.ref_counts)
