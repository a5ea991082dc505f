"""The block arithmetic every implementation must agree on: how many blocks a request needs,
the worst case of an append, and the AllocStatus rule with the watermark.

The docstrings carry PEP 316 contracts (``pre:`` / ``post:``), which ``make crosshair`` checks
over all paths with CrossHair.
"""

from __future__ import annotations

from pagedkv.specs.types import AllocStatus


def blocks_for(num_slots: int, block_size: int) -> int:
    """The fewest blocks that hold ``num_slots`` slots.

    pre: num_slots >= 0
    pre: block_size >= 1
    post: _ * block_size >= num_slots
    post: _ == 0 or (_ - 1) * block_size < num_slots
    """
    return -(-num_slots // block_size)


def blocks_touched_by_append(
    num_tokens: int, num_blocks: int, block_size: int, num_new: int, lookahead: int
) -> int:
    """The worst case of blocks an append takes from the pool: every existing block that
    receives a token may need a copy, and every block past the table's end is new. (Plain
    arithmetic, no min/max calls: a scheduler asks this for every running sequence at every
    step.)

    pre: block_size >= 1
    pre: num_tokens >= 0 and num_new >= 0 and lookahead >= 0
    pre: num_tokens <= num_blocks * block_size
    post: _ == _worst_case_slot_by_slot(num_tokens, num_blocks, block_size, num_new, lookahead)
    """
    touched = 0  # existing blocks that receive a token
    if num_new:
        end = -(-(num_tokens + num_new) // block_size)  # one past the block of the last new token
        touched = (end if end < num_blocks else num_blocks) - num_tokens // block_size
        touched = touched if touched > 0 else 0
    new_blocks = -(-(num_tokens + num_new + lookahead) // block_size) - num_blocks
    return touched + new_blocks if new_blocks > 0 else touched


def most_blocks_touched(num_new: int, lookahead: int) -> int:
    """A bound on ``blocks_touched_by_append`` that needs nothing of the table: the new tokens
    and lookahead slots land in at most one block each, and the block holding the first of
    them may be an existing one. A caller with this many free blocks knows any append fits.

    pre: num_new >= 0 and lookahead >= 0
    post: _ == num_new + lookahead + 1
    """
    return num_new + lookahead + 1


def _bounded(
    num_tokens: int, num_blocks: int, block_size: int, num_new: int, lookahead: int
) -> bool:
    """``most_blocks_touched`` bounds ``blocks_touched_by_append``, for every table that holds its
    tokens (checked by CrossHair).

    pre: block_size >= 1
    pre: num_tokens >= 0 and num_new >= 0 and lookahead >= 0
    pre: num_tokens <= num_blocks * block_size
    post: _
    """
    worst = blocks_touched_by_append(num_tokens, num_blocks, block_size, num_new, lookahead)
    return worst <= most_blocks_touched(num_new, lookahead)


def _worst_case_slot_by_slot(
    num_tokens: int, num_blocks: int, block_size: int, num_new: int, lookahead: int
) -> int:
    """The contract of ``blocks_touched_by_append``, counted slot by slot: the table's blocks a
    new token lands in, plus every block past the table's end that a new token or a lookahead
    slot lands in."""
    table = set(range(num_blocks))
    receiving = {p // block_size for p in range(num_tokens, num_tokens + num_new)}
    past_end = {p // block_size for p in range(num_tokens, num_tokens + num_new + lookahead)}
    return len(receiving & table) + len(past_end - table)


def alloc_status(needed: int, free: int, capacity: int, watermark: int) -> AllocStatus:
    """NEVER when even an empty device (``capacity`` free blocks) cannot keep the watermark;
    OK when it fits now with the watermark kept; else LATER. A NEVER is final: any other
    answer would be OK on the empty device.

    pre: 0 <= free <= capacity and needed >= 0 and watermark >= 0
    post: (_ is AllocStatus.NEVER) == (capacity - needed < watermark)
    post: (_ is AllocStatus.OK) == (free - needed >= watermark)
    post: _ is AllocStatus.NEVER or alloc_status(needed, capacity, capacity, watermark).name == "OK"
    """
    if capacity - needed < watermark:
        return AllocStatus.NEVER
    if free - needed >= watermark:
        return AllocStatus.OK
    return AllocStatus.LATER


def token_chunks(num_tokens: int, block_size: int, num_new: int, lookahead: int) -> int:
    """vLLM 0.6.3's worst case of an append, per sequence: the chunks the new tokens and the
    lookahead slots are cut into, the first filling the last block (policy
    ``append_worst_case=token_chunks``). Blocks already in the table count again; a partial
    last block counts even when nothing is appended."""
    first_chunk = block_size - num_tokens % block_size
    return 1 + -(-(num_new + lookahead - first_chunk) // block_size)


def computed_blocks_release_end(num_computed: int, block_size: int, window: int) -> int:
    """vLLM 0.6.3's count of leading blocks a window releases: all but the last
    ``window // block_size + 2`` blocks of the computed tokens (policy
    ``window_release=computed_blocks``)."""
    return max(0, num_computed // block_size - (window // block_size + 2))
