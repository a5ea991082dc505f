"""A sequence group of the optimized manager: the sequences that share a prompt and move between
devices together (``specs/block_manager.md`` §3, "Group")."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from pagedkv.optimized.block_ids import BlockIds
from pagedkv.specs.content_hash import BlockHasher
from pagedkv.specs.types import BlockId, Device, ExtraKey, Token

if TYPE_CHECKING:
    from pagedkv.optimized.block_table import BlockTable


@dataclass(slots=True)
class SequenceGroup:
    """``members`` maps each live sequence id to its table, in the group's order (``allocate``'s
    ids, then forked children). An encoder-decoder group also owns its cross-attention table.
    ``hasher`` hashes the group's full blocks under its extra key (every group with that key
    shares it, as an empty ``cross_blocks`` is shared: a manager may hold tens of thousands of
    groups, and the garbage collector walks every object each of them keeps).
    ``common_ids``: see its note."""

    group_id: int
    members: dict[int, BlockTable]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...] = ()
    cross_blocks: tuple[BlockId, ...] = ()
    hasher: BlockHasher = field(init=False)
    common_ids: tuple[list[BlockIds], BlockIds] | None = None
    """The last ``get_common_computed_block_ids`` of several sequences, the first of them in this
    group: the computed prefixes it was asked about, and their common prefix. The prefixes are
    read-only and replaced whenever they change, so the same prefixes have the same answer."""

    def __post_init__(self) -> None:
        self.hasher = hasher_for(self.extra_key)


@lru_cache(maxsize=1024)
def hasher_for(extra_key: ExtraKey) -> BlockHasher:
    return BlockHasher(extra_key)
