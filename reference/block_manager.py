"""The block space manager: what a scheduler asks of the KV cache, as pure functions.

Groups of sequences share a prompt; the manager answers whether they fit (AllocStatus, with the
watermark), allocates and appends their blocks on the GPU, forks sequences, frees them, and swaps
whole groups between GPU and CPU. Every operation that takes blocks checks its worst case up
front (at most one block per block it touches), so it either happens whole or raises
``OutOfBlocksError`` having changed nothing. ``specs/block_manager.md`` is the prose twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from itertools import takewhile
from typing import TypeVar

from immutables import Map

from pagedkv.reference import block_pool as pool_ops
from pagedkv.reference import block_table
from pagedkv.reference.manager_state import (
    ComputedList,
    DevicePicker,
    ManagerState,
    distinct_blocks,
    empty_gpu_capacity,
    group,
    group_on,
    lowest_ids,
    null_block_pending,
    pool,
    seq,
    take_null_block,
    with_pool,
)
from pagedkv.reference.pool_state import PoolState, is_computed
from pagedkv.reference.swap import move_group
from pagedkv.specs.accounting import (
    alloc_status,
    blocks_for,
    blocks_touched_by_append,
    computed_blocks_release_end,
    token_chunks,
)
from pagedkv.specs.errors import DuplicateSequenceError, OutOfBlocksError, UnsupportedError
from pagedkv.specs.manager_view import GroupView, SeqView
from pagedkv.specs.pool_view import BlockView
from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    Token,
)
from pagedkv.specs.validation import (
    check_count,
    check_device,
    check_encoder_support,
    check_extra_key,
    check_id,
    check_seq_ids,
    check_time,
    check_tokens,
)

Kept = TypeVar("Kept")


def _gpu_free(state: ManagerState) -> int:
    return pool_ops.num_free_blocks(state.gpu)


# --- admission --------------------------------------------------------------------------------


def _offered_lookahead(state: ManagerState, lookahead: int) -> int:
    """Policy ``lookahead``: an engine without lookahead slots refuses any."""
    if lookahead and not state.policy.lookahead:
        raise UnsupportedError(f"{lookahead} lookahead slots: this policy offers none")
    return lookahead


def _prompt_blocks(
    state: ManagerState, prompt: object, encoder: object, lookahead: int = 0
) -> tuple[list[Token], list[Token] | None, int]:
    tokens = check_tokens(prompt)
    encoder_tokens = check_encoder_support(state.config, encoder)
    if encoder_tokens is not None and not state.policy.encoder:
        raise UnsupportedError("encoder prompts: this policy offers no cross-attention tables")
    size = state.config.block_size
    needed = blocks_for(len(tokens) + lookahead, size)
    if encoder_tokens is not None:
        needed += blocks_for(len(encoder_tokens), size)
    return tokens, encoder_tokens, needed


def can_allocate(
    state: ManagerState,
    prompt: Sequence[Token],
    num_lookahead_slots: int = 0,
    encoder_prompt: Sequence[Token] | None = None,
) -> AllocStatus:
    """Whether a new group with this prompt fits on the GPU, keeping the watermark free. Cache
    hits are not counted on: the answer must hold whatever gets evicted meanwhile."""
    lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
    _, _, needed = _prompt_blocks(state, prompt, encoder_prompt, lookahead)
    _offered_lookahead(state, lookahead)
    if state.policy.admission == "free_blocks":
        return AllocStatus.OK if needed <= _gpu_free(state) else AllocStatus.LATER
    return alloc_status(
        needed, _gpu_free(state), empty_gpu_capacity(state), state.config.watermark_blocks
    )


def allocate(
    state: ManagerState,
    group_id: int,
    seq_ids: Sequence[int],
    prompt: Sequence[Token],
    extra_key: ExtraKey = NO_EXTRA_KEY,
    encoder_prompt: Sequence[Token] | None = None,
    pick: DevicePicker = lowest_ids,
) -> ManagerState:
    """Give every sequence of a new group the prompt's blocks (shared, not copied), and the group
    its cross-attention table when it has an encoder prompt."""
    gid = check_id("group", group_id)
    if gid in state.groups:
        raise DuplicateSequenceError(f"group {gid} already exists")
    ids = _new_seq_ids(state, seq_ids)
    if len(ids) > 1 and state.policy.groups == "one_sequence":
        raise UnsupportedError(f"{len(ids)} sequences: this policy admits one per request")
    check_extra_key(extra_key)
    tokens, encoder_tokens, needed = _prompt_blocks(state, prompt, encoder_prompt)
    if state.policy.atomic and needed > _gpu_free(state):
        raise OutOfBlocksError(f"the group needs {needed} GPU blocks, only {_gpu_free(state)} free")
    gpu, blocks, hits = block_table.allocate_prompt(state.gpu, tokens, extra_key, pick(Device.GPU))
    for _ in ids[1:]:
        gpu, _ = pool_ops.fork(gpu, blocks)
    cross: tuple[BlockId, ...] = ()
    if encoder_tokens is not None:
        gpu, cross, _ = block_table.allocate_prompt(
            gpu, encoder_tokens, extra_key, pick(Device.GPU)
        )
    seqs, cached_at_allocate = state.seqs, state.cached_at_allocate
    for seq_id in ids:
        seqs = seqs.set(seq_id, SeqView(gid, tuple(tokens), blocks))
        if state.policy.cached_tokens == "hits_at_allocate":
            cached_at_allocate = cached_at_allocate.set(seq_id, hits * state.config.block_size)
    new_group = GroupView(tuple(ids), Device.GPU, extra_key, tuple(encoder_tokens or ()), cross)
    groups = state.groups.set(gid, new_group)
    return replace(state, gpu=gpu, seqs=seqs, groups=groups, cached_at_allocate=cached_at_allocate)


def _new_seq_ids(state: ManagerState, seq_ids: object) -> list[int]:
    ids = check_seq_ids(seq_ids, non_empty=True)
    for seq_id in ids:
        if seq_id in state.seqs or ids.count(seq_id) > 1:
            raise DuplicateSequenceError(f"sequence {seq_id} already exists")
    return ids


# --- decoding ---------------------------------------------------------------------------------


def _touched(state: ManagerState, table: SeqView, num_new: int, lookahead: int) -> int:
    """The blocks one sequence's append may take (policy ``append_worst_case``)."""
    size = state.config.block_size
    if state.policy.append_worst_case == "token_chunks":
        return token_chunks(len(table.tokens), size, num_new, lookahead)
    if state.policy.append_worst_case == "new_blocks":
        return max(0, blocks_for(len(table.tokens) + num_new + lookahead, size) - len(table.blocks))
    return blocks_touched_by_append(len(table.tokens), len(table.blocks), size, num_new, lookahead)


def can_append_slots(
    state: ManagerState, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
) -> bool:
    """Whether every sequence of the group can take ``num_new_tokens`` tokens and
    ``num_lookahead_slots`` lookahead slots, assuming every touched block needs a new one."""
    found = group_on(state, group_id, Device.GPU, "append to")
    num_new = check_count("num_new_tokens", num_new_tokens)
    lookahead = _offered_lookahead(state, check_count("num_lookahead_slots", num_lookahead_slots))
    needed = sum(_touched(state, state.seqs[s], num_new, lookahead) for s in found.seq_ids)
    return needed + null_block_pending(state) <= _gpu_free(state)


def append_slots(
    state: ManagerState,
    seq_id: int,
    tokens: Sequence[Token],
    num_lookahead_slots: int = 0,
    pick: DevicePicker = lowest_ids,
) -> tuple[ManagerState, list[CopyPair]]:
    """Append a sequence's new tokens (and lookahead slots); returns the copy-on-write pairs the
    copy kernel must run before the model writes the new tokens."""
    table = seq(state, seq_id)
    found = group_on(state, table.group_id, Device.GPU, "append to")
    new_tokens = check_tokens(tokens, allow_empty=True)
    lookahead = _offered_lookahead(state, check_count("num_lookahead_slots", num_lookahead_slots))
    needed = _touched(state, table, len(new_tokens), lookahead) + null_block_pending(state)
    if state.policy.atomic and needed > _gpu_free(state):
        raise OutOfBlocksError(
            f"sequence {seq_id} may need {needed} GPU blocks, only {_gpu_free(state)} are free"
        )
    state = take_null_block(state, pick(Device.GPU))
    gpu, blocks = _release_out_of_window(state, table, len(new_tokens))
    if blocks[:1] != table.blocks[:1]:
        state = _released_from_computed_list(state, int(seq_id))
    gpu, blocks = block_table.append(
        gpu, table.tokens, blocks, new_tokens, found.extra_key, lookahead, pick(Device.GPU)
    )
    gpu, pairs = pool_ops.clear_copy_on_writes(gpu)
    new_table = replace(table, tokens=(*table.tokens, *new_tokens), blocks=blocks)
    return replace(state, gpu=gpu, seqs=state.seqs.set(int(seq_id), new_table)), pairs


def _release_out_of_window(
    state: ManagerState, table: SeqView, num_new: int
) -> tuple[PoolState, tuple[BlockId, ...]]:
    """Before an append, point the blocks no future token reads at the null block (policy
    ``window_release``: token-exact and only when tokens come, or vLLM's count of blocks)."""
    window, null_block = state.config.sliding_window, state.null_block
    if window is None or null_block is None:
        return state.gpu, table.blocks
    size = state.config.block_size
    if state.policy.window_release == "computed_blocks":
        end = computed_blocks_release_end(len(table.tokens), size, window)
    elif num_new:
        end = len(block_table.out_of_window(len(table.blocks), len(table.tokens), window, size))
    else:
        return state.gpu, table.blocks
    return block_table.release_blocks(state.gpu, table.blocks, end, null_block)


def _released_from_computed_list(state: ManagerState, seq_id: int) -> ManagerState:
    """A window release took the head of a kept computed list (it starts at the first block):
    what is left of it is no prefix, so it is empty and stops growing."""
    kept = state.computed_lists.get(seq_id)
    if kept is None or not kept.blocks:
        return state
    stopped = ComputedList((), stopped=True)
    return replace(state, computed_lists=state.computed_lists.set(seq_id, stopped))


def fork(state: ManagerState, parent_id: int, child_id: int) -> ManagerState:
    """The child joins the parent's group sharing every block; nothing is allocated."""
    parent = seq(state, parent_id)
    child = check_id("sequence", child_id)
    if child in state.seqs:
        raise DuplicateSequenceError(f"sequence {child} already exists")
    found = state.groups[parent.group_id]
    held = [b for b in parent.blocks if b != state.null_block]
    device_pool, _ = pool_ops.fork(pool(state, found.device), held)
    state = with_pool(state, found.device, device_pool)
    groups = state.groups.set(parent.group_id, replace(found, seq_ids=(*found.seq_ids, child)))
    cached_at_allocate = state.cached_at_allocate
    if int(parent_id) in cached_at_allocate:
        cached_at_allocate = cached_at_allocate.set(child, cached_at_allocate[int(parent_id)])
    return replace(
        state,
        seqs=state.seqs.set(child, parent),
        groups=groups,
        cached_at_allocate=cached_at_allocate,
    )


def free(state: ManagerState, seq_id: int) -> ManagerState:
    """Release a sequence's blocks; the last sequence of a group takes the group (and its
    cross-attention table) with it."""
    table = seq(state, seq_id)
    found = state.groups[table.group_id]
    device_pool = pool(state, found.device)
    recorded = state.access_times.get(int(seq_id))
    if recorded is not None:  # access_time=at_free: the sequence's time reaches its blocks now
        held = [b for b in table.blocks if b != state.null_block]
        device_pool = pool_ops.mark_accessed(device_pool, held, recorded)
    tail_first = state.policy.eviction != "lru"  # so that its tail is evicted first
    for block in reversed(table.blocks) if tail_first else table.blocks:
        if block != state.null_block:
            device_pool = pool_ops.free(device_pool, block)
    remaining = tuple(s for s in found.seq_ids if s != seq_id)
    groups = state.groups.set(table.group_id, replace(found, seq_ids=remaining))
    if not remaining:
        groups = state.groups.delete(table.group_id)
    state = with_pool(state, found.device, device_pool)
    if not remaining:
        cross_pool = pool(state, found.cross_device)
        for block in found.cross_blocks:
            cross_pool = pool_ops.free(cross_pool, block)
        state = with_pool(state, found.cross_device, cross_pool)
    return replace(
        state,
        seqs=state.seqs.delete(seq_id),
        groups=groups,
        computed_lists=_forget(state.computed_lists, seq_id),
        access_times=_forget(state.access_times, seq_id),
        cached_at_allocate=_forget(state.cached_at_allocate, seq_id),
    )


def _forget(per_seq: Map[int, Kept], seq_id: int) -> Map[int, Kept]:
    return per_seq.delete(seq_id) if seq_id in per_seq else per_seq


# --- swapping ---------------------------------------------------------------------------------


def can_swap_out(state: ManagerState, group_id: int) -> AllocStatus:
    """Whether the group's blocks fit on the CPU (no watermark there)."""
    found = group_on(state, group_id, Device.GPU, "swap out")
    status = _swap_status(state, found, Device.CPU, 0)
    if status is AllocStatus.NEVER and state.policy.swap_out_answer == "ok_or_later":
        return AllocStatus.LATER
    return status


def can_swap_in(state: ManagerState, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
    """Whether the group's blocks, plus the blocks its lookahead slots will need, fit on the GPU
    with the watermark kept."""
    found = group_on(state, group_id, Device.CPU, "swap in")
    lookahead = _offered_lookahead(state, check_count("num_lookahead_slots", num_lookahead_slots))
    return _swap_status(state, found, Device.GPU, lookahead)


def _swap_status(state: ManagerState, found: GroupView, to: Device, lookahead: int) -> AllocStatus:
    needed = _swap_worst_case(state, found, to, lookahead)
    free = pool_ops.num_free_blocks(pool(state, to))
    if to is Device.GPU:
        capacity, watermark = empty_gpu_capacity(state), state.config.watermark_blocks
    else:
        capacity, watermark = state.config.num_cpu_blocks, 0
    if state.policy.swap_never == "without_watermark" and capacity >= needed:
        return AllocStatus.OK if free - needed >= watermark else AllocStatus.LATER
    return alloc_status(needed, free, capacity, watermark)


def _swap_worst_case(state: ManagerState, found: GroupView, to: Device, lookahead: int) -> int:
    """The blocks a swap of ``found`` to ``to``, then its lookahead, may take (policy
    ``swap_worst_case``)."""
    tables = [state.seqs[s] for s in found.seq_ids]
    if state.policy.swap_worst_case == "distinct_blocks":
        needed = len(distinct_blocks(state, found))
        return needed + sum(_touched(state, t, 0, lookahead) for t in tables)
    size, destination, source = state.config.block_size, pool(state, to), pool(state, found.device)
    needed = sum(token_chunks(len(t.tokens), size, 0, lookahead) for t in tables)
    entries = [b for t in tables for b in t.blocks if b != state.null_block]
    moving_cross = found.cross_blocks if state.policy.swap_cross_tables == "moved" else ()
    for block in [*entries, *moving_cross]:
        needed += _entry_cost(source.blocks[block], destination)
    return needed


def _entry_cost(view: BlockView, destination: PoolState) -> int:
    """What one table entry takes on the destination, beyond the token chunks: a full block
    nothing there holds (cached but evictable costs one), or an empty lookahead block (the count
    vLLM's #8824 leaves out); a partial block is its table's last, counted by its chunks."""
    if 0 < len(view.tokens) < destination.config.block_size:
        return 0
    held = destination.cached.get(view.content_hash) if view.content_hash else None
    return 0 if held is not None and destination.blocks[held].ref_count > 0 else 1


def swap_out(
    state: ManagerState, group_id: int, pick: DevicePicker = lowest_ids
) -> tuple[ManagerState, list[CopyPair]]:
    """Move the group to the CPU; returns the (GPU id, CPU id) copies for the swap kernel."""
    found = group_on(state, group_id, Device.GPU, "swap out")
    moved, pairs = move_group(
        _forget_computed_lists(state, found), group_id, Device.CPU, pick(Device.CPU)
    )
    return _carried_computed_lists(state, moved, found), pairs


def swap_in(
    state: ManagerState, group_id: int, pick: DevicePicker = lowest_ids
) -> tuple[ManagerState, list[CopyPair]]:
    """Move the group back to the GPU; returns the (CPU id, GPU id) copies for the swap kernel."""
    found = group_on(state, group_id, Device.CPU, "swap in")
    moved, pairs = move_group(
        _forget_computed_lists(state, found), group_id, Device.GPU, pick(Device.GPU)
    )
    return _carried_computed_lists(state, moved, found), pairs


def _forget_computed_lists(state: ManagerState, found: GroupView) -> ManagerState:
    """A swap renames every block: a sequence's kept computed list starts over."""
    lists = state.computed_lists
    for seq_id in found.seq_ids:
        lists = _forget(lists, seq_id)
    return replace(state, computed_lists=lists)


def _carried_computed_lists(
    before: ManagerState, after: ManagerState, found: GroupView
) -> ManagerState:
    """Policy ``computed_list_swap=kept``: each sequence's kept list outlives the swap, as long
    as it was and stopped if it had, over the blocks its entries now hold."""
    if before.policy.computed_list_swap == "starts_over":
        return after
    lists = after.computed_lists
    for seq_id in found.seq_ids:
        kept = before.computed_lists.get(seq_id)
        if kept is not None:
            renamed = after.seqs[seq_id].blocks[: len(kept.blocks)]
            lists = lists.set(seq_id, ComputedList(renamed, kept.stopped))
    return replace(after, computed_lists=lists)


# --- queries and marks ------------------------------------------------------------------------


def get_block_table(state: ManagerState, seq_id: int) -> list[BlockId]:
    return list(seq(state, seq_id).blocks)


def get_cross_block_table(state: ManagerState, group_id: int) -> list[BlockId]:
    return list(group(state, group_id).cross_blocks)


def num_free_blocks(state: ManagerState, device: Device) -> int:
    return pool_ops.num_free_blocks(pool(state, check_device(device)))


def access_all_blocks_in_seq(state: ManagerState, seq_id: int, now: float) -> ManagerState:
    """Record ``now`` as the last access of the sequence's blocks: at once, or (policy
    ``access_time=at_free``, caching only) when the sequence is freed."""
    table = seq(state, seq_id)
    time = check_time(now)
    if state.policy.access_time == "at_free":
        if not state.config.enable_caching:
            return state
        return replace(state, access_times=state.access_times.set(int(seq_id), time))
    device = state.groups[table.group_id].device
    held = [b for b in table.blocks if b != state.null_block]
    return with_pool(state, device, pool_ops.mark_accessed(pool(state, device), held, now))


def mark_blocks_as_computed(state: ManagerState, group_id: int) -> ManagerState:
    """After the model ran: every full block of the group's sequences holds its KV now. Under
    ``computed_marks=promoted_batch`` the mark names no block: the GPU pool marks what it promoted
    since the last mark, wherever the group is (vLLM 0.6.3 marks only on the GPU)."""
    found = group(state, group_id)
    if state.policy.computed_marks == "promoted_batch":
        return with_pool(state, Device.GPU, pool_ops.mark_computed(state.gpu, []))
    device_pool = pool_ops.mark_computed(pool(state, found.device), distinct_blocks(state, found))
    return with_pool(state, found.device, device_pool)


def get_common_computed_block_ids(
    state: ManagerState, seq_ids: Sequence[int]
) -> tuple[ManagerState, list[BlockId]]:
    """The computed prefix every listed sequence shares: prefill it may skip. Under
    ``computed_list=cached_per_sequence`` each sequence's list is kept (and may grow)."""
    ids = check_seq_ids(seq_ids)
    tables = [seq(state, s) for s in ids]
    for table in tables:
        group_on(state, table.group_id, Device.GPU, "read the computed blocks of")
    if state.policy.computed_list == "recomputed":
        return state, pool_ops.common_computed_prefix(state.gpu, [t.blocks for t in tables])
    lists = []
    for seq_id, table in zip(ids, tables, strict=True):
        kept = extend_computed_list(state, state.computed_lists.get(seq_id, ComputedList()), table)
        state = replace(state, computed_lists=state.computed_lists.set(seq_id, kept))
        lists.append(list(kept.blocks))
    return state, common_of_kept_lists(state, lists)


def extend_computed_list(state: ManagerState, kept: ComputedList, table: SeqView) -> ComputedList:
    """vLLM's computed-block tracker, its gap fixed: grow the kept leading run of computed
    blocks (the last block never counts); stop for good at the first block that is not."""
    limit = len(table.blocks) - 1
    if kept.stopped or len(kept.blocks) >= limit:
        return kept
    more = takewhile(partial(is_computed, state.gpu), table.blocks[len(kept.blocks) : limit])
    grown = (*kept.blocks, *more)
    return ComputedList(grown, stopped=len(grown) < limit)


def common_of_kept_lists(state: ManagerState, lists: list[list[BlockId]]) -> list[BlockId]:
    """One sequence's list is the answer; of several, the common prefix (policy
    ``common_prefix`` says whether empty lists count)."""
    if not state.config.enable_caching or not lists:
        return []
    if len(lists) == 1:
        return lists[0]
    if state.policy.common_prefix == "nonempty_runs":
        lists = [found for found in lists if found] or [[]]
    common: list[BlockId] = []
    for column in zip(*lists, strict=False):
        if any(b != column[0] for b in column):
            break
        common.append(column[0])
    return common


def get_num_cached_tokens(state: ManagerState, seq_id: int) -> int:
    table = seq(state, seq_id)
    if state.policy.cached_tokens == "hits_at_allocate":
        return state.cached_at_allocate.get(int(seq_id), 0)
    device = state.groups[table.group_id].device
    return block_table.num_cached_tokens(pool(state, device), table.blocks)


def get_prefix_cache_hit_rate(state: ManagerState, device: Device) -> float:
    return pool_ops.hit_rate(pool(state, check_device(device)))


def reset_prefix_cache(
    state: ManagerState, device: Device | None = None
) -> tuple[ManagerState, bool]:
    """Reset each pool (or just ``device``'s) that has no block in use; True when all did."""
    devices = [Device.GPU, Device.CPU] if device is None else [check_device(device)]
    done = True
    for each in devices:
        device_pool, reset = _reset_pool(state, each)
        state = with_pool(state, each, device_pool)
        done = done and reset
    return state, done


def _reset_pool(state: ManagerState, device: Device) -> tuple[PoolState, bool]:
    """The null block's pin is not a use: it is let go and taken again (it is the lowest id)."""
    device_pool = pool(state, device)
    if device is not Device.GPU or state.null_block is None:
        return pool_ops.reset_prefix_cache(device_pool)
    released = pool_ops.free(device_pool, state.null_block)
    reset_pool, reset = pool_ops.reset_prefix_cache(released)
    if not reset:
        return device_pool, False
    reset_pool, null_block = pool_ops.allocate_mutable(reset_pool)
    assert null_block == state.null_block
    return reset_pool, True
