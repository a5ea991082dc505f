"""The frozen state of a request-level manager (``specs/request_level.md`` §1), and the small
lookups every operation shares.

Only what cannot be derived is stored: each block's ref count and key, the free queue in its
order, the cache map in insertion order (and each cached key's parent hash), each request's
tables (and its shared-prefix boundary) and the events not yet taken.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from immutables import Map

from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.request_types import NULL_BLOCK, KVEvent, Request, RequestConfig, RequestId
from pagedkv.specs.request_validation import check_request_config
from pagedkv.specs.request_view import (
    CachedKey,
    RequestBlockView,
    RequestManagerView,
    RequestTableView,
)
from pagedkv.specs.types import BlockHash, BlockId

BLANK = RequestBlockView(ref_count=0, cached=None)
"""A block nobody holds and nothing is cached in."""

NO_BOUNDARIES: Map[RequestId, int] = Map()
NO_PARENTS: Map[CachedKey, BlockHash | None] = Map()


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a known request stands, for caching at a checkpoint (policy
    ``request_cache_timing=at_checkpoint``, ``specs/radix_cache.md`` §3): what SGLang's ``Req``
    carries and vLLM's manager never needs."""

    admitted_tokens: int
    """The request's tokens when it was admitted: its prefill computes them, in chunks."""
    last: Request
    """The request as its last ``allocate_slots`` saw it (its hashes, at ``free``)."""
    scheduled_end: int
    """The committed tokens computed once that call's tokens are: what a finish caches."""


NO_PROGRESS: Map[RequestId, Progress] = Map()


@dataclass(frozen=True, slots=True)
class RequestState:
    config: RequestConfig
    blocks: Map[BlockId, RequestBlockView]
    """Every id but ``NULL_BLOCK``."""
    free_queue: tuple[BlockId, ...]
    """Every block with ref count 0, front first (§1)."""
    cache: Map[CachedKey, tuple[BlockId, ...]]
    """The blocks cached under each key, oldest first; a lookup finds the first (§1)."""
    requests: Map[RequestId, RequestTableView]
    events: tuple[KVEvent, ...] = ()
    """The events since the last ``take_events``, oldest first."""
    policy: Policy = PAGEDKV
    shared_prefix: Map[RequestId, int] = NO_BOUNDARIES
    """Each known request's shared-prefix boundary, fixed when it was admitted (§4.7, policy
    ``request_window_retention``); what a window group's sparse retention keeps besides the
    replay boundary. Not in the view: vLLM keeps it on the scheduler's request."""
    parents: Map[CachedKey, BlockHash | None] = NO_PARENTS
    """Each cached key's parent hash (the hash it is chained on; ``None`` for a request's first
    block): which cached block extends which, for leaf-only eviction (policy
    ``request_eviction``, ``specs/radix_cache.md`` §4). Not in the view: it follows from the
    hashes."""
    progress: Map[RequestId, Progress] = NO_PROGRESS
    """Each known request's ``Progress``. Not in the view: SGLang keeps it on its request."""


def new_request_state(config: RequestConfig, policy: Policy = PAGEDKV) -> RequestState:
    """Every block but the null block blank and free, queued ``1, 2, ..., num_blocks - 1``."""
    check_request_config(config)
    ids = tuple(range(NULL_BLOCK + 1, config.num_blocks))
    return RequestState(config, Map({b: BLANK for b in ids}), ids, Map(), Map(), (), policy)


def with_block(state: RequestState, block: BlockId, view: RequestBlockView) -> RequestState:
    return replace(state, blocks=state.blocks.set(block, view))


def with_table(state: RequestState, request_id: RequestId, table: RequestTableView) -> RequestState:
    return replace(state, requests=state.requests.set(request_id, table))


def with_event(state: RequestState, event: KVEvent) -> RequestState:
    return replace(state, events=(*state.events, event))


def ref_count(state: RequestState, block: BlockId) -> int:
    return state.blocks[block].ref_count


def is_known(state: RequestState, request_id: RequestId) -> bool:
    """Whether the request holds tables: ``allocate_slots`` succeeded for it and it is not freed
    since (§1)."""
    return request_id in state.requests


def to_request_view(state: RequestState) -> RequestManagerView:
    return RequestManagerView(
        state.config, dict(state.blocks), state.free_queue, dict(state.requests)
    )
