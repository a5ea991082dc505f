"""The block arithmetic every implementation must agree on: how many blocks a request needs,
the worst case of an append, and the AllocStatus rule with the watermark."""

from __future__ import annotations

from specs.types import AllocStatus


def blocks_for(num_slots: int, block_size: int) -> int:
    return -(-num_slots // block_size)


def blocks_touched_by_append(
    num_tokens: int, num_blocks: int, block_size: int, num_new: int, lookahead: int
) -> int:
    """The worst case of blocks an append takes from the pool: every existing block that
    receives a token may need a copy, and every block past the table's end is new. (Plain
    arithmetic, no min/max calls: a scheduler asks this for every running sequence at every
    step.)"""
    touched = 0  # existing blocks that receive a token
    if num_new:
        end = -(-(num_tokens + num_new) // block_size)  # one past the block of the last new token
        touched = (end if end < num_blocks else num_blocks) - num_tokens // block_size
        touched = touched if touched > 0 else 0
    new_blocks = -(-(num_tokens + num_new + lookahead) // block_size) - num_blocks
    return touched + new_blocks if new_blocks > 0 else touched


def alloc_status(needed: int, free: int, capacity: int, watermark: int) -> AllocStatus:
    """NEVER when even an empty device (``capacity`` free blocks) cannot keep the watermark;
    OK when it fits now with the watermark kept; else LATER."""
    if capacity - needed < watermark:
        return AllocStatus.NEVER
    if free - needed >= watermark:
        return AllocStatus.OK
    return AllocStatus.LATER
