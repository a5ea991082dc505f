"""Steering (``hypothesis.target``): runs that press on the pool's edges score higher; and the
boundary lookaheads that put a swap-in at the GPU's edge. The swarm of features a run leaves
out is drawn with the configuration (``manager_draws.SWARM``, ``ManagerMachineBase.on``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis import event

from pagedkv.model_tests.lockstep.observation import Observation
from pagedkv.model_tests.machines.manager_base import ManagerMachineBase
from pagedkv.model_tests.machines.manager_invariants import held_references
from pagedkv.specs.accounting import blocks_for
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import Device

T = TypeVar("T")


class Steering(ManagerMachineBase):
    """Scores and edges, for the rules to use."""

    def _free_gpu(self) -> int:
        """The GPU blocks free or evictable, as the model has them or (safety) as last seen."""
        view = self.model_view()
        if view is not None:
            return len(view.gpu.free) + len(view.gpu.evictable)
        seen: Observation = getattr(self.session, "seen")  # noqa: B009 (the safety session's)
        return seen.free[Device.GPU]

    def _steer_scarcity(self, label: str) -> None:
        self._score(1.0 - self._free_gpu() / self.config.num_gpu_blocks, label=label)

    def _steer_sharing(self) -> None:
        """How many GPU blocks several live tables share (copy-on-write and dedup need them)."""
        view = self.model_view()
        if view is None:
            return
        held = held_references(view, Device.GPU)
        self._score(float(sum(1 for count in held.values() if count > 1)), label="shared blocks")

    def _note_window(self, before: ManagerView | None, seq_id: int) -> None:
        after = self.model_view()
        if before is None or after is None or after.null_block is None:
            return
        null = after.null_block
        old = before.seqs[seq_id].blocks
        new = after.seqs[seq_id].blocks
        if any(a != null and b == null for a, b in zip(old, new, strict=False)):
            event("outcome: sliding-window release")
            self.window_releases += 1
            self._score(float(self.window_releases), label="window releases")

    def _edge_lookahead(self, group: int, short: int) -> int:
        """The fewest lookahead slots that bring ``group``'s swap-in to ``short`` blocks under
        the GPU's capacity, counted as a block per distinct block of its tables (as the model
        has them; under the safety tier, a block per ``block_size`` tokens of each sequence),
        plus the new blocks each sequence's slots take past its table."""
        members = self.ledger.members(group)
        if not members:
            return 0
        size, view = self.config.block_size, self.model_view()
        lengths = [len(self.ledger.seqs[s].tokens) for s in members]
        tables: list[Sequence[int]]
        if view is None:
            tables = [range(blocks_for(length, size)) for length in lengths]
            held = sum(len(table) for table in tables)
        else:
            tables = [view.seqs[s].blocks for s in members]
            held = len({b for table in tables for b in table if b != view.null_block})
        capacity = self.config.num_gpu_blocks - (self.config.sliding_window is not None)
        for lookahead in range(capacity * size + 1):
            more = sum(
                max(0, blocks_for(length + lookahead, size) - len(table))
                for length, table in zip(lengths, tables, strict=True)
            )
            if held + more >= capacity - short:
                return lookahead
        return 0
