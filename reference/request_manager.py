"""The request-level manager as pure functions (``specs/request_level.md``): each operation
takes a frozen ``RequestState`` and its arguments and answers the new state and its result, or
raises a typed error having changed nothing. Each function cites the clause it implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from immutables import Map

from pagedkv.reference.free_queue import give_back, take_from_front, touch
from pagedkv.reference.request_cache import cache_block, cached_as, lookup
from pagedkv.reference.request_hits import hit_blocks, hit_cap, hit_length
from pagedkv.reference.request_retention import retained, shared_prefix_boundary
from pagedkv.reference.request_state import (
    Progress,
    RequestState,
    is_known,
    ref_count,
    with_event,
    with_table,
)
from pagedkv.specs.errors import UnknownRequestError
from pagedkv.specs.policy import Policy
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    BlockStored,
    GroupBlocks,
    KVEvent,
    KVGroup,
    Request,
    RequestId,
)
from pagedkv.specs.request_validation import (
    AllocateArgs,
    cdiv,
    check_allocate_slots,
    check_request,
    check_request_id,
)
from pagedkv.specs.request_view import CachedKey, RequestTableView
from pagedkv.specs.types import BlockHash, BlockId

# --- §3 hits ------------------------------------------------------------------------------------


def get_computed_blocks(state: RequestState, request: Request) -> tuple[GroupBlocks, int]:
    """§3: the longest cached prefix every group serves, in full blocks, capped at
    ``num_tokens - 1`` tokens; its blocks per group and its length in tokens. Changes nothing."""
    check_request(state.config, request)
    no_hit: GroupBlocks = [[] for _ in state.config.groups]
    if not state.config.enable_caching:
        return no_hit, 0
    hashes = request_block_hashes(request, state.config.block_size)
    k = hit_length(state, hashes, hit_cap(state.policy, request.num_tokens))
    return hit_blocks(state, hashes, k), k * state.config.block_size


# --- §4 allocate_slots --------------------------------------------------------------------------


def skipped_tokens(group: KVGroup, num_computed: int) -> int:
    """§4.2: the tokens before the window of the next token to compute (none without one)."""
    if group.sliding_window is None:
        return 0
    return max(0, num_computed - group.sliding_window + 1)


def release_window(state: RequestState, request_id: RequestId, total: int) -> RequestState:
    """§4.2: per window group of a known request, the blocks wholly before the window become the
    null block, walked from the highest such index down to the first null block met; each
    group's freed blocks are given back in that order (§7)."""
    if not is_known(state, request_id):
        return state
    table = state.requests[request_id]
    tables = list(table.blocks)
    for g, group in enumerate(state.config.groups):
        end = min(skipped_tokens(group, total) // state.config.block_size, len(tables[g]))
        blocks = list(tables[g])
        freed: list[BlockId] = []
        for i in range(end - 1, -1, -1):
            if blocks[i] == NULL_BLOCK:
                break
            freed.append(blocks[i])
            blocks[i] = NULL_BLOCK
        tables[g] = tuple(blocks)
        state = give_back(state, freed)
    return with_table(state, request_id, replace(table, blocks=tuple(tables)))


def blocks_to_allocate(state: RequestState, args: AllocateArgs, total: int, need: int) -> int:
    """§4.3: the blocks the call takes from the free queue, summed over groups: new blocks up to
    ``cdiv(need, B)`` past what the request holds (or its hit and skipped blocks, for a new
    request), plus the hit blocks it reads that sit in the free queue."""
    size = state.config.block_size
    request_id = args.request.request_id
    if is_known(state, request_id):
        table = state.requests[request_id]
        return sum(max(cdiv(need, size) - len(blocks), 0) for blocks in table.blocks)
    count = 0
    for group, hit in zip(state.config.groups, args.hit, strict=True):
        skipped = skipped_tokens(group, total) // size
        count += max(cdiv(need, size) - max(skipped, len(hit)), 0)
        count += sum(1 for b in hit[skipped:] if b != NULL_BLOCK and ref_count(state, b) == 0)
    return count


def adopt_hit(state: RequestState, args: AllocateArgs, total: int) -> RequestState:
    """§4.5: a new request's tables start as its hit (the null block where a window group skips
    them), every block of it touched; all of it counts as cached already. Its shared-prefix
    boundary is fixed now, from the cache as the admission's lookup saw it (§4.7)."""
    size = state.config.block_size
    hashes = request_block_hashes(args.request, size)
    boundary = shared_prefix_boundary(state, args.request, hashes)
    state = replace(state, shared_prefix=state.shared_prefix.set(args.request.request_id, boundary))
    tables: list[tuple[BlockId, ...]] = []
    for group, hit in zip(state.config.groups, args.hit, strict=True):
        skipped = skipped_tokens(group, total) // size
        blocks = tuple(NULL_BLOCK if i < skipped else hit[i] for i in range(max(skipped, len(hit))))
        state = touch(state, blocks)
        tables.append(blocks)
    table = RequestTableView(tuple(tables), tuple(len(blocks) for blocks in tables))
    return with_table(state, args.request.request_id, table)


def allocate_new_blocks(
    state: RequestState, request_id: RequestId, need: int
) -> tuple[RequestState, GroupBlocks]:
    """§4.6: per group in order, blocks from the front of the free queue until the table covers
    ``need`` token slots; they are the answer."""
    table = state.requests[request_id]
    tables: list[tuple[BlockId, ...]] = []
    answer: GroupBlocks = []
    for blocks in table.blocks:
        state, new = take_from_front(
            state, max(cdiv(need, state.config.block_size) - len(blocks), 0)
        )
        tables.append((*blocks, *new))
        answer.append(new)
    return with_table(state, request_id, replace(table, blocks=tuple(tables))), answer


def cache_full_blocks(state: RequestState, request: Request, num_tokens: int) -> RequestState:
    """§4.7: per group, the full blocks of the first ``num_tokens`` committed tokens not cached
    yet are cached under their keys (the null block is skipped, and so is a block a window
    group does not retain: policy ``request_window_retention``); each run of consecutive
    blocks cached is one ``BlockStored`` naming exactly those blocks. A block whose key is
    cached already is cached behind it, or (policy ``request_duplicates=free_at_insert``)
    given back for the cached one, which the table takes in its place."""
    if not state.config.enable_caching:
        return state
    size = state.config.block_size
    hashes = request_block_hashes(request, size)
    full = min(num_tokens, len(hashes) * size) // size
    table = state.requests[request.request_id]
    boundary = state.shared_prefix.get(request.request_id, 0)
    counts = list(table.num_cached_blocks)
    tables = list(table.blocks)
    for g, (group, blocks) in enumerate(zip(state.config.groups, table.blocks, strict=True)):
        start = counts[g]
        if start >= full:
            continue
        kept = retained(state, group, request, boundary, start, full)
        keyed = [i for i in range(start, full) if blocks[i] != NULL_BLOCK and kept[i - start]]
        row = list(blocks)
        stored = []
        for i in keyed:
            key = CachedKey(g, hashes[i])
            found = lookup(state, key)
            if found is not None and state.policy.request_duplicates == "free_at_insert":
                state = give_back(touch(state, [found]), [row[i]])
                row[i] = found
                continue
            parent = hashes[i - 1] if i > 0 else None
            state = cache_block(state, row[i], key, parent)
            stored.append(i)
        for run in consecutive_runs(stored):
            state = with_event(state, stored_event(request, hashes, run, size, g))
        counts[g] = full
        tables[g] = tuple(row)
    done = replace(table, blocks=tuple(tables), num_cached_blocks=tuple(counts))
    return with_table(state, request.request_id, done)


def consecutive_runs(indices: list[int]) -> list[range]:
    """Ascending ``indices`` cut where they skip one: ``[1, 2, 5]`` -> ``[1..2], [5..5]``."""
    runs: list[range] = []
    for i in indices:
        if runs and runs[-1].stop == i:
            runs[-1] = range(runs[-1].start, i + 1)
        else:
            runs.append(range(i, i + 1))
    return runs


def stored_event(
    request: Request, hashes: Sequence[BlockHash], run: range, size: int, group: int
) -> BlockStored:
    """§4.7: the event for one run of consecutive blocks cached: their hashes, the hash before
    the first (``None`` at a request's start) and exactly their tokens."""
    return BlockStored(
        block_hashes=tuple(hashes[i] for i in run),
        parent_hash=hashes[run.start - 1] if run.start > 0 else None,
        token_ids=tuple(request.tokens[run.start * size : run.stop * size]),
        block_size=size,
        lora_id=request.extra_key.lora_id,
        group=group,
    )


def allocate_slots(
    state: RequestState,
    request: Request,
    num_new_tokens: int,
    num_new_computed_tokens: int = 0,
    new_computed_blocks: GroupBlocks | None = None,
    num_lookahead_tokens: int = 0,
) -> tuple[RequestState, GroupBlocks | None]:
    """§4: slots for the new tokens and the lookahead after the computed tokens and a hit just
    found; the new blocks per group, or ``None`` when they do not fit (and then only the
    window's release may have happened, policy ``request_release_before_fit``)."""
    args = check_allocate_slots(
        state.config,
        request,
        num_new_tokens,
        num_new_computed_tokens,
        new_computed_blocks,
        num_lookahead_tokens,
        is_known=partial(is_known, state),
        cached_as=partial(cached_as, state),
    )
    limit = state.config.max_model_len
    total = args.request.num_computed_tokens + args.num_new_computed_tokens  # §4.1
    if limit is not None:
        total = min(total, limit)
    need = total + args.num_new_tokens + args.num_lookahead_tokens
    if limit is not None:
        need = min(need, limit)
    released = release_window(state, args.request.request_id, total)
    if blocks_to_allocate(released, args, total, need) > num_free_blocks(released):  # §4.4
        return (released if state.policy.request_release_before_fit else state), None
    state = released
    request = args.request
    if is_known(state, request.request_id):
        admitted = state.progress[request.request_id].admitted_tokens
    else:
        admitted = request.num_tokens
        state = adopt_hit(state, args, total)
    to_cache = tokens_to_cache(state.policy, request, total, args.num_new_tokens, admitted)
    computed_only = state.policy.request_cache_timing != "at_schedule"
    if computed_only:  # what the engine computed is cached before it schedules more (§4.7)
        state = cache_full_blocks(state, request, to_cache)
    state, answer = allocate_new_blocks(state, request.request_id, need)
    if not computed_only:
        state = cache_full_blocks(state, request, to_cache)
    scheduled_end = min(total + args.num_new_tokens, request.num_tokens)
    progress = Progress(admitted, request, scheduled_end)
    return replace(state, progress=state.progress.set(request.request_id, progress)), answer


def tokens_to_cache(
    policy: Policy, request: Request, total: int, num_new_tokens: int, admitted_tokens: int
) -> int:
    """§4.7: how many leading tokens ``allocate_slots`` caches the full blocks of (policy
    ``request_cache_timing``): the committed tokens up to the end of the ones it schedules; or
    only those computed before it; or those, while the prefill of the ``admitted_tokens``
    lasts, and none once the request decodes (``free`` caches the rest). Draft and lookahead
    tokens never count."""
    if policy.request_cache_timing == "at_schedule":
        return min(total + num_new_tokens, request.num_tokens)
    if policy.request_cache_timing == "after_compute" or total <= admitted_tokens:
        return min(total, request.num_tokens)
    return 0


# --- §5 free ------------------------------------------------------------------------------------


def free(state: RequestState, request_id: RequestId) -> RequestState:
    """§5: per group in order, the request's blocks (its leading null blocks left out) given back
    tail first (policy ``request_free_order``); an unknown request is a no-op. Caching at a
    checkpoint (policy ``request_cache_timing``), its last step's blocks are cached first: a
    finish is SGLang's last checkpoint."""
    check_request_id(request_id)
    if not is_known(state, request_id):
        return state
    if state.policy.request_cache_timing == "at_checkpoint":
        progress = state.progress[request_id]
        state = cache_full_blocks(state, progress.last, progress.scheduled_end)
    return give_back_request(state, request_id)


def preempt(state: RequestState, request_id: RequestId) -> RequestState:
    """§5: a preempted request's blocks given back as ``free`` gives them, with nothing cached
    for it at a checkpoint (SGLang's retract inserts nothing); the same as ``free`` under every
    other policy."""
    check_request_id(request_id)
    if not is_known(state, request_id):
        return state
    return give_back_request(state, request_id)


def give_back_request(state: RequestState, request_id: RequestId) -> RequestState:
    """§5: the known request's blocks given back, group by group, and the request forgotten."""
    for blocks in state.requests[request_id].blocks:
        first = next((i for i, b in enumerate(blocks) if b != NULL_BLOCK), len(blocks))
        held = blocks[first:]
        state = give_back(
            state, held[::-1] if state.policy.request_free_order == "tail_first" else held
        )
    return replace(
        state,
        requests=state.requests.delete(request_id),
        shared_prefix=state.shared_prefix.delete(request_id),
        progress=state.progress.delete(request_id),
    )


# --- §6 queries ---------------------------------------------------------------------------------


def get_block_ids(state: RequestState, request_id: RequestId) -> GroupBlocks:
    """§6: the request's tables per group, null blocks included."""
    check_request_id(request_id)
    if not is_known(state, request_id):
        raise UnknownRequestError(f"request {request_id!r} holds no blocks")
    return [list(blocks) for blocks in state.requests[request_id].blocks]


def num_free_blocks(state: RequestState) -> int:
    """§6: the length of the free queue (cached blocks nobody holds count as free)."""
    return len(state.free_queue)


def usage(state: RequestState) -> float:
    """§6: the share of the pool's blocks (the null block left out) that are held."""
    return 1.0 - num_free_blocks(state) / (state.config.num_blocks - 1)


# --- §9 reset and events ------------------------------------------------------------------------


def reset_prefix_cache(state: RequestState) -> tuple[RequestState, bool]:
    """§9: refused while any block is held; else every key is forgotten, the free queue keeps its
    order, and the event ``AllBlocksCleared`` (with caching, or always: policy
    ``request_clear_event``)."""
    if any(view.ref_count > 0 for view in state.blocks.values()):
        return state, False
    blocks = Map({b: replace(view, cached=None) for b, view in state.blocks.items()})
    state = replace(state, blocks=blocks, cache=Map(), parents=Map())
    if state.config.enable_caching or state.policy.request_clear_event == "always":
        state = with_event(state, AllBlocksCleared())
    return state, True


def take_events(state: RequestState) -> tuple[RequestState, list[KVEvent]]:
    """§9: the events since the last take, oldest first; the queue is emptied."""
    return replace(state, events=()), list(state.events)
