"""What a driver knows from the calls it made and their outcomes, whatever the implementation:
which sequences and groups are live, their tokens, extra keys and devices.

None of this depends on a policy: a successful ``allocate`` makes a group on the GPU, ``fork``
copies a sequence's tokens, ``append_slots`` appends, ``free`` removes, a swap moves the group.
Every session keeps one, so a machine can choose its next call from it in any mode, including the
safety tier where no model runs beside the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pagedkv.specs.types import NO_EXTRA_KEY, Device, ExtraKey, ManagerConfig, Token


@dataclass(frozen=True, slots=True)
class SeqRecord:
    group_id: int
    tokens: tuple[Token, ...]


@dataclass(frozen=True, slots=True)
class GroupRecord:
    seq_ids: tuple[int, ...]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...] = ()


@dataclass
class Ledger:
    config: ManagerConfig
    seqs: dict[int, SeqRecord] = field(default_factory=dict)
    groups: dict[int, GroupRecord] = field(default_factory=dict)

    def members(self, group_id: int) -> list[int]:
        group = self.groups.get(group_id)
        return list(group.seq_ids) if group else []

    def device_of(self, group_id: int) -> Device | None:
        group = self.groups.get(group_id)
        return group.device if group else None

    def group_of(self, seq_id: int) -> GroupRecord:
        return self.groups[self.seqs[seq_id].group_id]

    def record(self, method: str, args: Sequence[Any]) -> None:
        """Apply a call that succeeded (the queries change nothing)."""
        if method == "allocate":
            self._allocate(*args)
        elif method == "append_slots":
            self._append_slots(*args)
        elif method == "fork":
            self._fork(*args)
        elif method == "free":
            self._free(*args)
        elif method == "swap_out":
            self._swap_out(*args)
        elif method == "swap_in":
            self._swap_in(*args)

    def _allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        ids = tuple(seq_ids)
        for seq_id in ids:
            self.seqs[seq_id] = SeqRecord(group_id, tuple(prompt))
        self.groups[group_id] = GroupRecord(ids, Device.GPU, extra_key, tuple(encoder_prompt or ()))

    def _append_slots(self, seq_id: int, tokens: Sequence[Token], lookahead: int = 0) -> None:
        seq = self.seqs[seq_id]
        self.seqs[seq_id] = replace(seq, tokens=(*seq.tokens, *tokens))

    def _fork(self, parent_id: int, child_id: int) -> None:
        parent = self.seqs[parent_id]
        self.seqs[child_id] = parent
        group = self.groups[parent.group_id]
        self.groups[parent.group_id] = replace(group, seq_ids=(*group.seq_ids, child_id))

    def _free(self, seq_id: int) -> None:
        seq = self.seqs.pop(seq_id)
        group = self.groups[seq.group_id]
        remaining = tuple(s for s in group.seq_ids if s != seq_id)
        if remaining:
            self.groups[seq.group_id] = replace(group, seq_ids=remaining)
        else:
            del self.groups[seq.group_id]

    def _swap_out(self, group_id: int) -> None:
        self.groups[group_id] = replace(self.groups[group_id], device=Device.CPU)

    def _swap_in(self, group_id: int) -> None:
        self.groups[group_id] = replace(self.groups[group_id], device=Device.GPU)
