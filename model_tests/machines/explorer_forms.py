"""States as the explorer deduplicates them: as they are, or up to renaming of block, sequence
and group ids and of access times (``explorer.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference.kv_model import KVModel
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import NEVER_ACCESSED, BlockId, Device


def exact_form(view: ManagerView) -> tuple[object, ...]:
    """The state as it is, less the hit counters."""
    pools = tuple((sorted(view.pool(d).blocks.items()), view.pool(d).pending_cows) for d in Device)
    return (pools, sorted(view.seqs.items()), sorted(view.groups.items(), key=repr))


def canonical_form(view: ManagerView, kv: KVModel, order: Sequence[int]) -> tuple[object, ...]:
    """The state with sequences taken in ``order`` and every id renamed by first appearance."""
    names: dict[tuple[Device, BlockId], object] = {}

    def name(device: Device, block: BlockId) -> object:
        if device is Device.GPU and block == view.null_block:
            return "null"
        return names.setdefault((device, block), len(names))

    group_names: dict[int, int] = {}
    seqs = []
    for seq_id in order:
        seq = view.seqs[seq_id]
        group = view.groups[seq.group_id]
        group_index = group_names.setdefault(seq.group_id, len(group_names))
        blocks = tuple(name(group.device, b) for b in seq.blocks)
        seqs.append((group_index, seq.tokens, blocks))
    seq_names = {seq_id: index for index, seq_id in enumerate(order)}
    groups = []
    for group_id in sorted(group_names, key=group_names.__getitem__):
        group = view.groups[group_id]
        members = tuple(seq_names[s] for s in group.seq_ids)
        cross = tuple(name(group.device, b) for b in group.cross_blocks)
        groups.append((members, group.device.value, group.extra_key, group.encoder_tokens, cross))
    times = sorted(
        {
            v.last_accessed
            for d in Device
            for v in view.pool(d).blocks.values()
            if v.last_accessed != NEVER_ACCESSED
        }
    )
    rank = {t: i for i, t in enumerate(times)}
    rank[NEVER_ACCESSED] = -1
    pools = []
    for device in Device:
        pool = view.pool(device)
        cached = sorted(
            (b for b in pool.blocks if b not in pool.free and b not in pool.used),
            key=lambda b: pool.blocks[b].content_hash or b"",
        )
        for block in cached:
            name(device, block)
        held = [b for b in pool.blocks if b not in pool.free]
        pools.append(
            sorted(
                (
                    str(name(device, b)),
                    pool.blocks[b].ref_count,
                    pool.blocks[b].tokens,
                    pool.blocks[b].content_hash,
                    pool.blocks[b].computed,
                    rank[pool.blocks[b].last_accessed],
                )
                for b in held
            )
        )
    slots = sorted(
        (repr((device.value, name(device, block), slot)), content)
        for (device, block, slot), content in kv.items()
        if block not in view.pool(device).free
    )
    return (tuple(seqs), tuple(groups), tuple(map(tuple, pools)), tuple(slots))
