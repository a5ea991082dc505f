"""A sequence group of the optimized manager: the sequences that share a prompt and move between
devices together (``specs/block_manager.md`` §3, "Group")."""

from __future__ import annotations

from dataclasses import dataclass, field

from specs.content_hash import BlockHasher
from specs.types import BlockId, Device, ExtraKey, Token


@dataclass(slots=True)
class SequenceGroup:
    """An encoder-decoder group also owns its cross-attention table. ``hasher`` hashes the
    group's full blocks under its extra key (every table of the group shares the key)."""

    group_id: int
    seq_ids: list[int]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...] = ()
    cross_blocks: list[BlockId] = field(default_factory=list)
    hasher: BlockHasher = field(init=False)

    def __post_init__(self) -> None:
        self.hasher = BlockHasher(self.extra_key)
