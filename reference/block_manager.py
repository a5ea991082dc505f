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

from reference import block_pool as pool_ops
from reference import block_table
from reference.manager_state import (
    DevicePicker,
    ManagerState,
    distinct_blocks,
    empty_gpu_capacity,
    group,
    group_on,
    lowest_ids,
    new_manager,
    null_block_pending,
    pool,
    seq,
    take_null_block,
    with_pool,
)
from reference.pool_state import PoolState
from reference.swap import move_group
from specs.accounting import (
    alloc_status,
    blocks_for,
    blocks_touched_by_append,
    computed_blocks_release_end,
    token_chunks,
    token_exact_release_end,
)
from specs.errors import DuplicateSequenceError, OutOfBlocksError
from specs.manager_view import GroupView, SeqView
from specs.types import NO_EXTRA_KEY, AllocStatus, BlockId, CopyPair, Device, ExtraKey, Token
from specs.validation import (
    check_count,
    check_device,
    check_encoder_support,
    check_extra_key,
    check_id,
    check_seq_ids,
    check_time,
    check_tokens,
)

create = new_manager


def _gpu_free(state: ManagerState) -> int:
    return pool_ops.num_free_blocks(state.gpu)


# --- admission --------------------------------------------------------------------------------


def _prompt_blocks(
    state: ManagerState, prompt: object, encoder: object, lookahead: int = 0
) -> tuple[list[Token], list[Token] | None, int]:
    tokens = check_tokens(prompt)
    encoder_tokens = check_encoder_support(state.config, encoder)
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
    check_extra_key(extra_key)
    tokens, encoder_tokens, needed = _prompt_blocks(state, prompt, encoder_prompt)
    if needed > _gpu_free(state):
        raise OutOfBlocksError(f"the group needs {needed} GPU blocks, only {_gpu_free(state)} free")
    gpu, blocks = block_table.allocate_prompt(state.gpu, tokens, extra_key, pick(Device.GPU))
    for _ in ids[1:]:
        gpu, _ = pool_ops.fork(gpu, blocks)
    cross: tuple[BlockId, ...] = ()
    if encoder_tokens is not None:
        gpu, cross = block_table.allocate_prompt(gpu, encoder_tokens, extra_key, pick(Device.GPU))
    seqs = state.seqs
    for seq_id in ids:
        seqs = seqs.set(seq_id, SeqView(gid, tuple(tokens), blocks))
    new_group = GroupView(tuple(ids), Device.GPU, extra_key, tuple(encoder_tokens or ()), cross)
    return replace(state, gpu=gpu, seqs=seqs, groups=state.groups.set(gid, new_group))


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
    return blocks_touched_by_append(len(table.tokens), len(table.blocks), size, num_new, lookahead)


def can_append_slots(
    state: ManagerState, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
) -> bool:
    """Whether every sequence of the group can take ``num_new_tokens`` tokens and
    ``num_lookahead_slots`` lookahead slots, assuming every touched block needs a new one."""
    found = group_on(state, group_id, Device.GPU, "append to")
    num_new = check_count("num_new_tokens", num_new_tokens)
    lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
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
    lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
    needed = _touched(state, table, len(new_tokens), lookahead) + null_block_pending(state)
    if state.policy.atomic and needed > _gpu_free(state):
        raise OutOfBlocksError(
            f"sequence {seq_id} may need {needed} GPU blocks, only {_gpu_free(state)} are free"
        )
    state = take_null_block(state, pick(Device.GPU))
    gpu, blocks = _release_out_of_window(state, table, len(new_tokens))
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
        end = token_exact_release_end(len(table.tokens), size, window)
    else:
        return state.gpu, table.blocks
    return block_table.release_blocks(state.gpu, table.blocks, end, null_block)


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
    return replace(state, seqs=state.seqs.set(child, parent), groups=groups)


def free(state: ManagerState, seq_id: int) -> ManagerState:
    """Release a sequence's blocks; the last sequence of a group takes the group (and its
    cross-attention table) with it."""
    table = seq(state, seq_id)
    found = state.groups[table.group_id]
    device_pool = pool(state, found.device)
    for block in table.blocks:
        if block != state.null_block:
            device_pool = pool_ops.free(device_pool, block)
    remaining = tuple(s for s in found.seq_ids if s != seq_id)
    groups = state.groups.set(table.group_id, replace(found, seq_ids=remaining))
    if not remaining:
        for block in found.cross_blocks:
            device_pool = pool_ops.free(device_pool, block)
        groups = state.groups.delete(table.group_id)
    state = with_pool(state, found.device, device_pool)
    return replace(state, seqs=state.seqs.delete(seq_id), groups=groups)


# --- swapping ---------------------------------------------------------------------------------


def can_swap_out(state: ManagerState, group_id: int) -> AllocStatus:
    found = group_on(state, group_id, Device.GPU, "swap out")
    needed = len(distinct_blocks(state, found))
    free_cpu = pool_ops.num_free_blocks(state.cpu)
    return alloc_status(needed, free_cpu, state.config.num_cpu_blocks, 0)


def can_swap_in(state: ManagerState, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
    """Whether the group's blocks, plus the blocks its lookahead slots will need, fit on the GPU
    with the watermark kept."""
    found = group_on(state, group_id, Device.CPU, "swap in")
    lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
    needed = len(distinct_blocks(state, found))
    needed += sum(_touched(state, state.seqs[s], 0, lookahead) for s in found.seq_ids)
    return alloc_status(
        needed, _gpu_free(state), empty_gpu_capacity(state), state.config.watermark_blocks
    )


def swap_out(
    state: ManagerState, group_id: int, pick: DevicePicker = lowest_ids
) -> tuple[ManagerState, list[CopyPair]]:
    """Move the group to the CPU; returns the (GPU id, CPU id) copies for the swap kernel."""
    group_on(state, group_id, Device.GPU, "swap out")
    return move_group(state, group_id, Device.CPU, pick(Device.CPU))


def swap_in(
    state: ManagerState, group_id: int, pick: DevicePicker = lowest_ids
) -> tuple[ManagerState, list[CopyPair]]:
    """Move the group back to the GPU; returns the (CPU id, GPU id) copies for the swap kernel."""
    group_on(state, group_id, Device.CPU, "swap in")
    return move_group(state, group_id, Device.GPU, pick(Device.GPU))


# --- queries and marks ------------------------------------------------------------------------


def get_block_table(state: ManagerState, seq_id: int) -> list[BlockId]:
    return list(seq(state, seq_id).blocks)


def get_cross_block_table(state: ManagerState, group_id: int) -> list[BlockId]:
    return list(group(state, group_id).cross_blocks)


def num_free_blocks(state: ManagerState, device: Device) -> int:
    return pool_ops.num_free_blocks(pool(state, check_device(device)))


def access_all_blocks_in_seq(state: ManagerState, seq_id: int, now: float) -> ManagerState:
    table = seq(state, seq_id)
    check_time(now)
    device = state.groups[table.group_id].device
    held = [b for b in table.blocks if b != state.null_block]
    return with_pool(state, device, pool_ops.mark_accessed(pool(state, device), held, now))


def mark_blocks_as_computed(state: ManagerState, group_id: int) -> ManagerState:
    """After the model ran: every full block of the group's sequences holds its KV now."""
    found = group(state, group_id)
    device_pool = pool_ops.mark_computed(pool(state, found.device), distinct_blocks(state, found))
    return with_pool(state, found.device, device_pool)


def get_common_computed_block_ids(state: ManagerState, seq_ids: Sequence[int]) -> list[BlockId]:
    """The computed prefix every listed sequence shares: prefill it may skip."""
    tables = [seq(state, s) for s in check_seq_ids(seq_ids)]
    for table in tables:
        group_on(state, table.group_id, Device.GPU, "read the computed blocks of")
    return pool_ops.common_computed_prefix(state.gpu, [t.blocks for t in tables])


def get_num_cached_tokens(state: ManagerState, seq_id: int) -> int:
    table = seq(state, seq_id)
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
