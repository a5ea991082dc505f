"""KV data in the lockstep machine: a stand-in model runner, the engine's kernel calls, and the
check of invariant I5 (``specs/invariants.md`` §5).

Each side of the machine gets a ``KVSide``: the reference's abstract KV model (``AbstractKV``, this
file) or torch stores moved by the real kernels (``torch_kv.TorchKV``, for targets with tensors).
After each manager call the harness does what an engine does: runs the copy-on-write pairs and
swap mappings the manager returned, then has the stand-in model write K and V for every newly
scheduled token whose block is not already computed, through the slot mapping of
``specs/slots.py``. K and V are a deterministic function of the token prefix (and extra key), so
the check can say what every slot must hold: every live sequence's KV, read through its block
table, and every evictable cached block's KV. Writes and checks go to a side in batches (one per
device per step), so that a side with tensors gathers and compares them in one go. With a
defragmenter, every GPU id is resolved through it first, on both sides. This file imports no
torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from pagedkv.reference import kv_model
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.reference.kv_model import KVModel, SlotContent
from pagedkv.specs.content_hash import ROOT, encode_block
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.interface import Defragmenter
from pagedkv.specs.manager_view import ManagerView, SeqView
from pagedkv.specs.slots import slot_of
from pagedkv.specs.types import (
    BlockId,
    DefragConfig,
    Device,
    ExtraKey,
    ManagerConfig,
    TableKey,
    Token,
)

CROSS = "cross-attention"

DEVICES = (Device.GPU, Device.CPU)

Place = tuple[BlockId, int]
"""(block id, slot within it)."""


@lru_cache(maxsize=1 << 16)
def kv_values(content: SlotContent) -> tuple[float, float]:
    """What the stand-in model writes for ``content``: two floats exact in float32. (Remembered:
    a live sequence's slots are checked again at every step.)"""
    digest = hashlib.sha256(encode_block(ROOT, content.tokens, content.extra_key)).digest()
    return float(int.from_bytes(digest[:3], "little")), float(int.from_bytes(digest[3:6], "little"))


@dataclass
class KVSide:
    """One side's KV. Blocks are named by the manager's ids; ``run_*`` are the engine's kernel
    calls, ``write`` the model's, ``mismatches`` the check's question. With a ``defrag``
    configuration the side keeps a defragmenter (``placement``) under the GPU ids, and every GPU
    id is resolved through it before a kernel or the model touches it
    (``specs/defragmenter.md`` §5)."""

    config: ManagerConfig
    defrag: DefragConfig | None = None
    placement: Defragmenter | None = field(init=False, default=None)
    version: int = field(init=False, default=0)
    """Rises with every change to the side's data or placement: a check of a side whose version
    and expected contents are those of a check that passed would pass again."""

    def gpu_position(self, block: BlockId) -> int:
        """Where GPU block ``block``'s data sits: its physical id."""
        return block if self.placement is None else self.placement.resolve(block)

    def position(self, device: Device, block: BlockId) -> int:
        """Where block ``block`` of ``device`` sits in that device's storage."""
        raise NotImplementedError

    def located(
        self, pairs: Sequence[tuple[BlockId, BlockId]], source: Device, destination: Device
    ) -> list[tuple[int, int]]:
        """A manager's block pairs as the storage positions a kernel moves."""
        return [(self.position(source, s), self.position(destination, d)) for s, d in pairs]

    def positions(self, device: Device, places: Sequence[Place]) -> list[tuple[int, int]]:
        """Places named by block ids, as (storage position, slot)."""
        return [(self.position(device, block), slot) for block, slot in places]

    def update_tables(
        self, changed: Mapping[TableKey, Sequence[BlockId]], finished: Sequence[TableKey]
    ) -> None:
        """The engine tells the defragmenter which GPU tables changed and which are gone."""
        assert self.placement is not None
        self.version += 1
        self.placement.update_state(changed, finished)

    def defragment(self) -> list[tuple[BlockId, BlockId]]:
        """The engine's ``defragment()`` and the exchange of its pairs; returns the pairs."""
        assert self.placement is not None
        self.version += 1
        pairs = self.placement.defragment()
        self._exchange(pairs)
        return pairs

    def defrag_view(self) -> DefragmenterView | None:
        return None if self.placement is None else self.placement.view()

    def run_copies(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        self.version += 1
        self._copy(pairs)

    def run_swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        self.version += 1
        self._swap(pairs, to)

    def write(
        self, device: Device, places: Sequence[Place], contents: Sequence[SlotContent]
    ) -> None:
        """The model writes the KV of ``contents[i]`` into ``places[i]``."""
        self.version += 1
        self._write(device, places, contents)

    # --- what each kind of side implements ----------------------------------------------------

    def _copy(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        raise NotImplementedError

    def _swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        raise NotImplementedError

    def _exchange(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        """A defragmentation's exchanges, in physical ids."""
        raise NotImplementedError

    def _write(
        self, device: Device, places: Sequence[Place], contents: Sequence[SlotContent]
    ) -> None:
        raise NotImplementedError

    def mismatches(self, device: Device, batch: Batch) -> list[int]:
        """The indices ``i`` whose place does not hold the KV of ``batch.contents[i]``."""
        raise NotImplementedError


@dataclass
class AbstractKV(KVSide):
    """The reference's side: ``pagedkv.reference.kv_model`` keyed by where the data sits, placed by
    the reference defragmenter when there is one, so the model's KV is checked through it too."""

    kv: KVModel = kv_model.EMPTY

    def __post_init__(self) -> None:
        if self.defrag is not None:
            self.placement = ReferenceDefragmenter(self.defrag)

    def position(self, device: Device, block: BlockId) -> int:
        return self.gpu_position(block) if device is Device.GPU else block

    def _copy(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        located = self.located(pairs, Device.GPU, Device.GPU)
        size = self.config.block_size
        self.kv = kv_model.copy_blocks(self.kv, located, size, Device.GPU, Device.GPU)

    def _swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        source = Device.CPU if to is Device.GPU else Device.GPU
        located = self.located(pairs, source, to)
        self.kv = kv_model.copy_blocks(self.kv, located, self.config.block_size, source, to)

    def _exchange(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        self.kv = kv_model.exchange_blocks(self.kv, pairs, self.config.block_size, Device.GPU)

    def _write(
        self, device: Device, places: Sequence[Place], contents: Sequence[SlotContent]
    ) -> None:
        for (block, slot), content in zip(self.positions(device, places), contents, strict=True):
            self.kv = kv_model.write(self.kv, (device, block, slot), content)

    def mismatches(self, device: Device, batch: Batch) -> list[int]:
        kv, contents = self.kv, batch.contents
        where: dict[BlockId, int] = {}  # each block's position, found once for its slots
        found = []
        for i, (block, slot) in enumerate(batch.places):
            position = where.get(block)
            if position is None:
                position = where[block] = self.position(device, block)
            if kv_model.read(kv, (device, position, slot)) != contents[i]:
                found.append(i)
        return found


Label = tuple[str, int, int]
"""What a checked place belongs to: ("sequence", id, position), ("cross", group id, position)
or ("evictable", block, slot); formatted only when the place is wrong."""


@dataclass
class Batch:
    """Places and what each must hold, for one device, with what they belong to."""

    places: list[Place] = field(default_factory=list)
    contents: list[SlotContent] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    _values: list[tuple[float, float]] = field(default_factory=list)

    def add(self, place: Place, content: SlotContent, label: Label = ("", 0, 0)) -> None:
        self.places.append(place)
        self.contents.append(content)
        self.labels.append(label)

    def values(self) -> list[tuple[float, float]]:
        """``kv_values`` of every content (computed once, for every side that asks)."""
        if len(self._values) != len(self.contents):
            self._values = [kv_values(content) for content in self.contents]
        return self._values


@dataclass
class Writer:
    """The stand-in model runner: writes each newly scheduled token's KV into its slot, unless
    its block is already computed (a cache hit's KV is there already)."""

    side: KVSide

    def write_tokens(self, view: ManagerView, seq_id: int, positions: range) -> None:
        seq = view.seqs[seq_id]
        group = view.groups[seq.group_id]
        pool = view.pool(group.device)
        size = view.config.block_size
        batch = Batch()
        for position in positions:
            block, slot = slot_of(seq.blocks, position, size)
            if block == view.null_block or pool.blocks[block].computed:
                continue
            batch.add((block, slot), SlotContent(seq.tokens[: position + 1], group.extra_key))
        self.side.write(group.device, batch.places, batch.contents)

    def write_cross(self, view: ManagerView, group_id: int) -> None:
        group = view.groups[group_id]
        size = view.config.block_size
        batch = Batch()
        for position in range(len(group.encoder_tokens)):
            place = slot_of(group.cross_blocks, position, size)
            content = SlotContent(group.encoder_tokens[: position + 1], cross_key(group.extra_key))
            batch.add((place.block, place.offset), content)
        self.side.write(group.cross_device, batch.places, batch.contents)


def cross_key(key: ExtraKey) -> ExtraKey:
    return ExtraKey(key.lora_id, CROSS)


@dataclass
class CachedPrefixes:
    """Which token prefix each content hash stands for, as seen in live sequences: what an
    evictable block's KV must hold."""

    by_hash: dict[bytes, tuple[tuple[Token, ...], ExtraKey]] = field(default_factory=dict)

    def record(self, view: ManagerView) -> None:
        size = view.config.block_size
        for seq in view.seqs.values():
            group = view.groups[seq.group_id]
            pool = view.pool(group.device)
            for index, block in enumerate(seq.blocks):
                block_view = pool.blocks.get(block)
                if block == view.null_block or block_view is None:
                    continue
                if block_view.content_hash is not None:
                    tokens = seq.tokens[: (index + 1) * size]
                    self.by_hash.setdefault(block_view.content_hash, (tokens, group.extra_key))


SequenceSlots = tuple[
    SeqView, ExtraKey, BlockId | None, list[Place], list[SlotContent], list[Label]
]
"""A sequence's expected slots (``expected_kv``), with what they were worked out from."""


def expected_kv(
    view: ManagerView, prefixes: CachedPrefixes, kept: dict[int, SequenceSlots] | None = None
) -> dict[Device, Batch]:
    """What I5 says every slot must hold, per device: live sequences' tokens through their
    tables, cross-attention tables, and evictable cached blocks whose prefix is known. With
    ``kept``, each sequence's slots are kept there and taken again while its view (a frozen
    value: the same object, the same tokens and table), extra key and the null block are the
    same: most steps change a few sequences of many."""
    batches = {device: Batch() for device in DEVICES}
    size = view.config.block_size
    null_block = view.null_block
    for seq_id, seq in view.seqs.items():
        group = view.groups[seq.group_id]
        batch = batches[group.device]
        tokens, key, blocks = seq.tokens, group.extra_key, seq.blocks
        found = None if kept is None else kept.get(seq_id)
        if found is None or found[0] is not seq or found[1] != key or found[2] != null_block:
            found = (seq, key, null_block, *_sequence_slots(seq_id, tokens, key, blocks, view))
            if kept is not None:
                kept[seq_id] = found
        batch.places += found[3]
        batch.contents += found[4]
        batch.labels += found[5]
    for group_id, group in view.groups.items():
        batch = batches[group.cross_device]
        for position in range(len(group.encoder_tokens)):
            block, slot = slot_of(group.cross_blocks, position, size)
            content = SlotContent(group.encoder_tokens[: position + 1], cross_key(group.extra_key))
            batch.add((block, slot), content, ("cross", group_id, position))
    for device in DEVICES:
        pool = view.pool(device)
        for block in sorted(pool.evictable):
            block_view = pool.blocks[block]
            assert block_view.content_hash is not None
            known = prefixes.by_hash.get(block_view.content_hash)
            if known is None:
                continue
            tokens, key = known
            start = len(tokens) - size
            for slot in range(size):
                content = SlotContent(tokens[: start + slot + 1], key)
                batches[device].add((block, slot), content, ("evictable", block, slot))
    return batches


def _sequence_slots(
    seq_id: int,
    tokens: tuple[Token, ...],
    key: ExtraKey,
    blocks: tuple[BlockId, ...],
    view: ManagerView,
) -> tuple[list[Place], list[SlotContent], list[Label]]:
    """One live sequence's slots, what each must hold, and what it belongs to."""
    size = view.config.block_size
    if len(tokens) > len(blocks) * size:
        slot_of(blocks, len(tokens) - 1, size)  # a table too short: the IndexError
    places: list[Place] = []
    contents: list[SlotContent] = []
    labels: list[Label] = []
    # block by block: the slots of position p are (blocks[p // size], p % size)
    for index, block in enumerate(blocks):
        start = index * size
        if block == view.null_block or start >= len(tokens):
            continue
        for slot in range(min(size, len(tokens) - start)):
            position = start + slot
            places.append((block, slot))
            contents.append(SlotContent(tokens[: position + 1], key))
            labels.append(("sequence", seq_id, position))
    return places, contents, labels


def kv_problems(side: KVSide, expected: dict[Device, Batch]) -> list[str]:
    """Invariant I5 on one side (``expected`` from ``expected_kv``), one batched check per
    device; each broken sequence, cross table or evictable block is reported once, at its first
    bad slot."""
    problems: list[str] = []
    for device, batch in expected.items():
        if not batch.places:
            continue
        reported: set[tuple[str, int]] = set()
        for index in side.mismatches(device, batch):
            kind, owner, position = batch.labels[index]
            if (kind, owner) in reported:
                continue
            reported.add((kind, owner))
            block = batch.places[index][0]
            problems.append(_describe(kind, owner, position, device, block))
    return problems


def _describe(kind: str, owner: int, position: int, device: Device, block: BlockId) -> str:
    if kind == "sequence":
        return (
            f"sequence {owner}: KV of token {position} in {device.value} block {block} is not"
            " the KV of its prefix"
        )
    if kind == "cross":
        return f"group {owner}: cross-attention KV of token {position} lost"
    return f"evictable {device.value} block {block} lost its cached KV"


def gpu_tables(view: ManagerView) -> dict[TableKey, tuple[BlockId, ...]]:
    """The tables an engine hands the model for groups on the GPU, as the defragmenter is told
    of them: each sequence's (null and lookahead entries included) and each cross table."""
    tables: dict[TableKey, tuple[BlockId, ...]] = {}
    for seq_id, seq in view.seqs.items():
        if view.groups[seq.group_id].device is Device.GPU:
            tables[("seq", seq_id)] = seq.blocks
    for group_id, group in view.groups.items():
        if group.device is Device.GPU and group.cross_blocks:
            tables[("cross", group_id)] = group.cross_blocks
    return tables


def table_changes(
    held: Mapping[TableKey, Sequence[BlockId]], tables: Mapping[TableKey, Sequence[BlockId]]
) -> tuple[dict[TableKey, tuple[BlockId, ...]], list[TableKey]]:
    """``update_state``'s arguments that bring a defragmenter holding ``held`` to ``tables``:
    what an engine passes after a scheduler step (new or changed tables; finished or swapped-out
    ones)."""
    changed = {
        key: tuple(table)
        for key, table in tables.items()
        if key not in held or tuple(held[key]) != tuple(table)
    }
    finished = [key for key in held if key not in tables]
    return changed, finished
