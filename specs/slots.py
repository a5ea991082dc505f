"""Where a token's KV lives: from a position in a sequence to a block and a slot in it.

Logical block ``i`` of a sequence holds positions ``i * block_size .. (i + 1) * block_size - 1``;
its block table names the physical block. A model runner writes the K and V of position ``p`` into
slot ``p % block_size`` of block ``table[p // block_size]`` (vLLM calls the flat index
``block * block_size + slot`` the *slot mapping*). See ``specs/invariants.md`` §5.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pagedkv.specs.types import BlockId


class Slot(NamedTuple):
    """One token's place in the KV cache: a physical block and the slot within it."""

    block: BlockId
    offset: int


def logical_slot(position: int, block_size: int) -> tuple[int, int]:
    """(logical block index, slot within it) of a position in a sequence.

    pre: position >= 0 and block_size >= 1
    post: _[0] * block_size + _[1] == position and 0 <= _[1] < block_size
    """
    return divmod(position, block_size)


def slot_of(table: Sequence[BlockId], position: int, block_size: int) -> Slot:
    """The physical slot of ``position`` through a block table.

    pre: block_size >= 1 and 0 <= position < len(table) * block_size
    post: _.block == table[position // block_size] and _.offset == position % block_size
    """
    index, offset = logical_slot(position, block_size)
    return Slot(table[index], offset)


def slot_mapping(table: Sequence[BlockId], positions: Iterable[int], block_size: int) -> list[Slot]:
    """The slots of ``positions`` through ``table``, in order."""
    return [slot_of(table, position, block_size) for position in positions]


def flat_slot(slot: Slot, block_size: int) -> int:
    """vLLM's flat slot index: ``block * block_size + offset``. Distinct slots never share one.

    pre: slot.block >= 0 and block_size >= 1 and 0 <= slot.offset < block_size
    post: divmod(_, block_size) == (slot.block, slot.offset)
    """
    return slot.block * block_size + slot.offset
