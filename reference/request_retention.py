"""Which newly full blocks a sliding-window group caches (``specs/request_level.md`` §4.7,
policy ``request_window_retention``).

Densely, every one. vLLM v1's default keeps only the blocks a later hit can read: a window group
serves a hit of ``k`` blocks from its last ``cdiv(W - 1, B)`` blocks alone (§3), and the hits a
replay of this request can find end at its prompt's replay boundary (``num_prompt_tokens - 1``,
the hit cap) or at its shared-prefix boundary (where the lead group's hit ran past the one every
group agreed on when it was admitted: there a sibling sharing the prefix would resume).
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference.request_hits import hit_cap, hit_length
from pagedkv.reference.request_state import RequestState
from pagedkv.specs.request_types import AttentionKind, KVGroup, Request
from pagedkv.specs.request_validation import hit_blocks_needed
from pagedkv.specs.types import BlockHash


def lead_groups(groups: Sequence[KVGroup]) -> list[int]:
    """The groups vLLM looks a hit up in first: the full-attention ones, or, without any, those
    alike the first group."""
    full = [g for g, group in enumerate(groups) if group.kind is AttentionKind.FULL]
    return full or [g for g, group in enumerate(groups) if group == groups[0]]


def shared_prefix_boundary(
    state: RequestState, request: Request, hashes: Sequence[BlockHash]
) -> int:
    """§4.7: at admission, the lead groups' own hit in tokens when it is longer than the hit
    every group serves, else 0 (vLLM's third answer of ``get_computed_blocks``, which the
    scheduler keeps on the request)."""
    if state.policy.request_window_retention == "dense" or not state.config.enable_caching:
        return 0
    cap = hit_cap(state.policy, request.num_tokens)
    lead = hit_length(state, hashes, cap, lead_groups(state.config.groups))
    agreed = hit_length(state, hashes, cap)
    return lead * state.config.block_size if lead > agreed else 0


def retained(
    state: RequestState,
    group: KVGroup,
    request: Request,
    boundary: int,
    start: int,
    full: int,
) -> list[bool]:
    """§4.7: for each of the blocks ``start .. full - 1`` newly full in ``group``, whether it is
    cached: all of them densely or in a full-attention group; else only the
    ``cdiv(W - 1, B)`` blocks before each reachable boundary (the replay boundary, and the
    shared-prefix boundary when there is one)."""
    if group.sliding_window is None or state.policy.request_window_retention == "dense":
        return [True] * (full - start)
    size = state.config.block_size
    reach = hit_blocks_needed(group.sliding_window, size)
    boundaries = [request.num_prompt_tokens - 1, *([boundary] if boundary else [])]
    ends = [b // size for b in boundaries]
    return [any(end - reach <= i < end for end in ends) for i in range(start, full)]
