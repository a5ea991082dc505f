"""The frozen state of a block space manager, and the lookups every operation shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from immutables import Map

from pagedkv.reference import block_pool as pool_ops
from pagedkv.reference.allocation import Picker, lowest_id
from pagedkv.reference.pool_state import PoolState, to_view
from pagedkv.specs.manager_view import GroupView, ManagerView, SeqView
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import BlockId, Device, ManagerConfig
from pagedkv.specs.validation import (
    check_manager_config,
    check_on_device,
    lookup_group,
    lookup_sequence,
)


@dataclass(frozen=True, slots=True)
class ComputedList:
    """A sequence's computed blocks as a cache of them (policy ``computed_list=
    cached_per_sequence``): only ever extended, and no longer once it stopped short."""

    blocks: tuple[BlockId, ...] = ()
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class ManagerState:
    config: ManagerConfig
    gpu: PoolState
    cpu: PoolState
    seqs: Map[int, SeqView]
    groups: Map[int, GroupView]
    null_block: BlockId | None = None
    policy: Policy = PAGEDKV
    computed_lists: Map[int, ComputedList] = field(default_factory=Map)
    """Per sequence, under ``computed_list=cached_per_sequence`` (absent: not looked at yet)."""
    access_times: Map[int, float] = field(default_factory=Map)
    """Per sequence, the time ``access_all_blocks_in_seq`` recorded (``access_time=at_free``)."""
    cached_at_allocate: Map[int, int] = field(default_factory=Map)
    """Per sequence, the tokens its prompt's leading cache hits covered when it was allocated
    (``cached_tokens=hits_at_allocate``)."""


DevicePicker = Callable[[Device], Picker]
"""The open allocation choices of one manager operation, per device (see ``Picker``)."""


def lowest_ids(_: Device) -> Picker:
    return lowest_id


def new_manager(config: ManagerConfig, policy: Policy = PAGEDKV) -> ManagerState:
    check_manager_config(config)
    gpu = pool_ops.create(config.pool_config(Device.GPU), policy)
    cpu = pool_ops.create(config.pool_config(Device.CPU), policy)
    state = ManagerState(config, gpu, cpu, Map(), Map(), None, policy)
    if policy.null_block == "at_creation":
        state = take_null_block(state)
    return state


def take_null_block(state: ManagerState, pick: Picker = lowest_id) -> ManagerState:
    """With a window, pin the block released table entries will point at (policy
    ``null_block``: at creation, or at the first append)."""
    if state.config.sliding_window is None or state.null_block is not None:
        return state
    gpu, null_block = pool_ops.allocate_mutable(state.gpu, pick(state.gpu))  # pinned for good
    return replace(state, gpu=gpu, null_block=null_block)


def pool(state: ManagerState, device: Device) -> PoolState:
    return state.gpu if device is Device.GPU else state.cpu


def with_pool(state: ManagerState, device: Device, new_pool: PoolState) -> ManagerState:
    """``state`` with one device's pool changed. Written out field by field rather than with
    ``dataclasses.replace``: nearly every operation ends here, and ``replace`` costs several
    times a plain construction (``test_reference_states`` compares the two)."""
    gpu = new_pool if device is Device.GPU else state.gpu
    cpu = new_pool if device is Device.CPU else state.cpu
    return ManagerState(
        config=state.config,
        gpu=gpu,
        cpu=cpu,
        seqs=state.seqs,
        groups=state.groups,
        null_block=state.null_block,
        policy=state.policy,
        computed_lists=state.computed_lists,
        access_times=state.access_times,
        cached_at_allocate=state.cached_at_allocate,
    )


def seq(state: ManagerState, seq_id: object) -> SeqView:
    return lookup_sequence(state.seqs, seq_id)


def group(state: ManagerState, group_id: object) -> GroupView:
    return lookup_group(state.groups, group_id)


def group_on(state: ManagerState, group_id: object, device: Device, action: str) -> GroupView:
    found = group(state, group_id)
    check_on_device(group_id, found.device, device, action)
    return found


def distinct_blocks(state: ManagerState, found: GroupView) -> list[BlockId]:
    """Every block the group holds, once each, in table order; the null block is nobody's."""
    seen: dict[BlockId, None] = {}
    for seq_id in found.seq_ids:
        for block in state.seqs[seq_id].blocks:
            if block != state.null_block:
                seen[block] = None
    if found.cross_device is found.device:
        for block in found.cross_blocks:
            seen[block] = None
    return list(seen)


def empty_gpu_capacity(state: ManagerState) -> int:
    """Free GPU blocks of this manager when nothing is allocated: all but the null block, which
    a window needs (taken already, or to be taken at the first append)."""
    return state.config.num_gpu_blocks - (1 if state.config.sliding_window is not None else 0)


def null_block_pending(state: ManagerState) -> int:
    """1 while a window's null block is still to be taken (policy ``null_block``), else 0."""
    return 1 if state.config.sliding_window is not None and state.null_block is None else 0


def to_manager_view(
    state: ManagerState, pool_view: Callable[[PoolState], PoolView] = to_view
) -> ManagerView:
    """The whole manager as a view, each pool's drawn by ``pool_view`` (a caller that keeps the
    views of pool states it has drawn hands them back: a call changes one pool, or none)."""
    return ManagerView(
        state.config,
        pool_view(state.gpu),
        pool_view(state.cpu),
        dict(state.seqs),
        dict(state.groups),
        state.null_block,
    )
