"""What the protocol lets a driver see of a target, without any view of its state: every live
sequence's block table, every live group's cross-attention table, and the free counts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.show import show_error
from pagedkv.specs.types import BlockId, Device


@dataclass(frozen=True)
class Observation:
    tables: dict[int, list[BlockId]]
    cross: dict[int, list[BlockId]]
    free: dict[Device, int]


def observe(target: Any, seq_ids: Iterable[int], group_ids: Iterable[int]) -> Observation:
    """Read the target through the protocol; a target that cannot answer for a live sequence or
    group diverges."""
    tables: dict[int, list[BlockId]] = {}
    cross: dict[int, list[BlockId]] = {}
    try:
        for seq_id in seq_ids:
            tables[seq_id] = list(target.get_block_table(seq_id))
        for group_id in group_ids:
            cross[group_id] = list(target.get_cross_block_table(group_id))
        free = {
            Device.GPU: target.get_num_free_gpu_blocks(),
            Device.CPU: target.get_num_free_cpu_blocks(),
        }
    except Exception as error:
        raise Divergence(
            f"the target cannot show its tables and free counts: {show_error(error)}", "table"
        ) from error
    return Observation(tables, cross, free)


def differences(before: Observation, after: Observation) -> list[str]:
    """What changed between two observations, in words (a failed call must change nothing)."""
    found = []
    for what, old, new in (
        ("sequence", before.tables, after.tables),
        ("group (cross table)", before.cross, after.cross),
    ):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                found.append(f"{what} {key}'s table {old.get(key)} -> {new.get(key)}")
    for device in Device:
        if before.free[device] != after.free[device]:
            found.append(
                f"free {device.value} blocks {before.free[device]} -> {after.free[device]}"
            )
    return found
