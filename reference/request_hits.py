"""The hit rule (``specs/request_level.md`` §3): the longest prefix, in full blocks, that every
group can serve from the cache, at most ``num_tokens - 1`` tokens.

A full-attention group serves ``k`` blocks when its first ``k`` are cached; a sliding-window
group reads only the window, so it serves ``k`` blocks when the last ``cdiv(W - 1, B)`` of them
are (its earlier blocks are the null block in the answer). ``k = 0`` is always served.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference.request_cache import lookup
from pagedkv.reference.request_state import RequestState
from pagedkv.specs.policy import Policy
from pagedkv.specs.request_types import NULL_BLOCK, GroupBlocks, KVGroup
from pagedkv.specs.request_validation import hit_blocks_needed
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockHash, BlockId


def hit_cap(policy: Policy, num_tokens: int) -> int:
    """The most tokens a hit may cover: all but the last, whose logits must be computed (policy
    ``request_hit_cap``)."""
    return num_tokens - 1 if policy.request_hit_cap == "n_minus_1" else num_tokens


def first_needed(group: KVGroup, num_blocks: int, block_size: int) -> int:
    """The first of a ``num_blocks`` hit's blocks the group reads: 0 for full attention, the
    start of the window's ``cdiv(W - 1, B)`` blocks for a sliding window."""
    if group.sliding_window is None:
        return 0
    return max(0, num_blocks - hit_blocks_needed(group.sliding_window, block_size))


def serves(
    state: RequestState,
    group_index: int,
    hashes: Sequence[BlockHash],
    num_blocks: int,
) -> bool:
    """Whether the group has every block it reads of a ``num_blocks`` hit cached."""
    group = state.config.groups[group_index]
    start = first_needed(group, num_blocks, state.config.block_size)
    return all(
        lookup(state, CachedKey(group_index, hashes[i])) is not None
        for i in range(start, num_blocks)
    )


def hit_length(state: RequestState, hashes: Sequence[BlockHash], max_tokens: int) -> int:
    """The largest ``k`` with ``k * B <= max_tokens`` that every group serves, in blocks."""
    most = min(max(max_tokens, 0) // state.config.block_size, len(hashes))
    for k in range(most, 0, -1):
        if all(serves(state, g, hashes, k) for g in range(len(state.config.groups))):
            return k
    return 0


def hit_blocks(state: RequestState, hashes: Sequence[BlockHash], num_blocks: int) -> GroupBlocks:
    """Per group, the blocks a hit of ``num_blocks`` takes: the cached ones it reads, the null
    block where a window group reads nothing."""
    answer: GroupBlocks = []
    for group_index, group in enumerate(state.config.groups):
        start = first_needed(group, num_blocks, state.config.block_size)
        blocks: list[BlockId] = [NULL_BLOCK] * start
        for i in range(start, num_blocks):
            found = lookup(state, CachedKey(group_index, hashes[i]))
            assert found is not None  # hit_length found every one
            blocks.append(found)
        answer.append(blocks)
    return answer
