"""What must hold after every step of the manager machine: I1-I4 on the model's view (the
pure checks, which the explorer and the soak use too), the exact sameness of both sides, and
I5 on each side's KV data. (The defragmenters' I4 is with the defragmenter,
``manager_defrag.py``.)"""

from __future__ import annotations

from collections import Counter
from typing import TypeVar

from pagedkv.model_tests.lockstep.calls import assert_same_state
from pagedkv.model_tests.machines.kv_harness import expected_kv, kv_problems
from pagedkv.model_tests.machines.manager_base import ManagerMachineBase
from pagedkv.specs import invariants
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import BlockId, Device

T = TypeVar("T")


def held_references(view: ManagerView, device: Device) -> Counter[BlockId]:
    """What block tables hold on ``device``: one per table entry, one per cross entry, and the
    null block's pin."""
    held: Counter[BlockId] = Counter()
    for seq in view.seqs.values():
        if view.groups[seq.group_id].device is device:
            held.update(b for b in seq.blocks if b != view.null_block)
    for group in view.groups.values():
        if group.cross_device is device:
            held.update(group.cross_blocks)
    if device is Device.GPU and view.null_block is not None:
        held[view.null_block] += 1
    return held


def mapping_problems(view: ManagerView) -> list[str]:
    """I4 (manager §7): tables point only at allocated blocks of their group's device (or the
    null block), each holding the table's tokens for its position; no copy is left pending."""
    problems = []
    size = view.config.block_size
    null_block = view.null_block
    pools = {device: view.pool(device) for device in (Device.GPU, Device.CPU)}
    ids = {device: pool.config.block_ids for device, pool in pools.items()}
    for seq_id, seq in view.seqs.items():
        group = view.groups.get(seq.group_id)
        if group is None or seq_id not in group.seq_ids:
            problems.append(f"sequence {seq_id} is not a member of group {seq.group_id}")
            continue
        pool = pools[group.device]
        placed = [(b, group.device) for b in seq.blocks]
        placed += [(b, group.cross_device) for b in group.cross_blocks]
        for block, device in placed:
            where = pools[device]
            if block == null_block:
                continue
            if block not in ids[device] or where.blocks[block].ref_count == 0:
                problems.append(
                    f"sequence {seq_id} maps to block {block}, not an allocated"
                    f" {device.value} block"
                )
        if len(seq.blocks) * size < len(seq.tokens):
            problems.append(f"sequence {seq_id} has more tokens than slots")
            continue
        for index, block in enumerate(seq.blocks):
            held = pool.blocks.get(block)
            wanted = seq.tokens[index * size : (index + 1) * size]
            if block != null_block and held is not None and held.tokens != wanted:
                problems.append(
                    f"sequence {seq_id}: block {block} at position {index} holds"
                    f" {list(held.tokens)}, the table's tokens there are {list(wanted)}"
                )
    for device in (Device.GPU, Device.CPU):
        if view.pool(device).pending_cows:
            problems.append(f"copy-on-write pairs left pending on the {device.value}")
    return problems


def pair_problems(pairs: list[tuple[int, int]], what: str, *, each_block_once: bool) -> list[str]:
    """I4 for a mapping: no block receives two different sources (safety); under pagedkv's
    policy also no source or destination twice (each distinct block moves once)."""
    sources_of: dict[int, set[int]] = {}
    for source, destination in pairs:
        sources_of.setdefault(destination, set()).add(source)
    if any(len(sources) > 1 for sources in sources_of.values()):
        return [f"{what} mapping sends two sources into one block: {pairs}"]
    if each_block_once and len({s for s, _ in pairs}) != len(pairs):
        return [f"{what} mapping is not injective: {pairs}"]
    return []


class Invariants(ManagerMachineBase):
    """The invariants checked after every step (``ManagerLockstep.after_every_step``)."""

    def same_state(self) -> None:
        if self.model is not None and self.mode == "exact":
            model, target = self.model_view(), self.target_view()
            passed = self.passed_checks.get("same state")
            # both views are the very ones that passed until a call renders them anew
            if passed is None or passed[0] is not model or passed[1] is not target:
                assert_same_state(model, target, "manager state")
                self.passed_checks["same state"] = (model, target)

    def kv_data_intact(self) -> None:
        """I5, on the model and on a target with tensors (the safety session checks its own)."""
        if self.model is None or self.unchanged_since_passed("kv"):
            return
        view = self.views.model()
        self.prefixes.record(view)
        # exact mode: same_state holds the target's tables equal to the model's, so what each
        # slot must hold is computed once, from the model's view
        expected = expected_kv(view, self.prefixes, self.kept_slots)
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            problems = kv_problems(side, expected)
            assert not problems, f"{name} KV: " + "; ".join(problems)

    def invariants_hold(self) -> None:
        if self.model is None or self.unchanged_since_passed("invariants"):
            return
        # exact mode: same_state holds the target's view equal to the model's
        view = self.views.model()
        problems = mapping_problems(view)
        for device in (Device.GPU, Device.CPU):
            pool = view.pool(device)
            problems += invariants.ref_counts(pool, held_references(view, device))
            problems += invariants.pool_invariants(pool)
        assert not problems, "model: " + "; ".join(problems)
