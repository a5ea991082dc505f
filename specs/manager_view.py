"""The observable state of a block space manager: both pools, every sequence, every group."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import BlockId, Device, ExtraKey, ManagerConfig, Token


@dataclass(frozen=True, slots=True)
class SeqView:
    """A sequence's block table: logical block i lives in physical block ``blocks[i]`` (the null
    block once it slid out of the window). Blocks past the last token are lookahead slots."""

    group_id: int
    tokens: tuple[Token, ...]
    blocks: tuple[BlockId, ...]

    def num_tokens(self) -> int:
        """As a live table answers it (``OptimizedBlockSpaceManager.live``), whose tokens are
        packed: what a driver reading either reads."""
        return len(self.tokens)


@dataclass(frozen=True, slots=True)
class GroupView:
    """Sequences that share a prompt (parallel sampling, beam search) and move together."""

    seq_ids: tuple[int, ...]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...] = ()
    cross_blocks: tuple[BlockId, ...] = ()
    cross_device: Device = Device.GPU
    """Where the cross blocks live: the group's device, unless a swap left them on the GPU
    (policy ``swap_cross_tables=kept_on_gpu``)."""


@dataclass(frozen=True, slots=True)
class ManagerView:
    config: ManagerConfig
    gpu: PoolView
    cpu: PoolView
    seqs: Mapping[int, SeqView]
    groups: Mapping[int, GroupView]
    null_block: BlockId | None

    def comparable(self) -> tuple[object, ...]:
        return (
            self.config,
            self.gpu.comparable(),
            self.cpu.comparable(),
            dict(self.seqs),
            dict(self.groups),
            self.null_block,
        )

    def pool(self, device: Device) -> PoolView:
        return self.gpu if device is Device.GPU else self.cpu
