"""KV data in the lockstep machine: a stand-in model runner, and the engine's kernel calls.

Each side of the machine gets a ``KVSide``: the reference's abstract KV model, or torch stores
moved by the real kernels. After each manager call the harness does what an engine does: runs
the copy-on-write pairs and swap mappings the manager returned, then writes K and V for every
newly scheduled token whose block is not already computed. K and V are a deterministic function
of the token prefix (and extra key), so DESIGN §3.5 can be checked: every live sequence's KV,
gathered through its block table, and every cached block's KV, must be what a model would have
written. GPU blocks live at storage positions given by a forward/backward table that a
defragmentation step permutes with in-place exchanges (seed 003).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from optimized import kernels
from optimized.kv_store import KVStore
from reference import kv_model
from reference.kv_model import KVModel, SlotContent
from specs.content_hash import ROOT, encode_block
from specs.manager_view import ManagerView
from specs.types import BlockId, Device, ExtraKey, ManagerConfig, Token

NUM_LAYERS = 2
CROSS = "cross-attention"


def kv_values(content: SlotContent) -> tuple[float, float]:
    """What a model writes for ``content``: two floats exactly representable in float32."""
    digest = hashlib.sha256(encode_block(ROOT, content.tokens, content.extra_key)).digest()
    return float(int.from_bytes(digest[:3], "little")), float(int.from_bytes(digest[3:6], "little"))


@dataclass
class StorageMap:
    """Logical GPU block id -> storage position, and back (the defragmenter's tables)."""

    forward: list[int]
    backward: list[int]

    @classmethod
    def identity(cls, size: int) -> StorageMap:
        return cls(list(range(size)), list(range(size)))

    def exchange(self, a: BlockId, b: BlockId) -> tuple[int, int]:
        """Blocks ``a`` and ``b`` trade storage; returns the two storage positions."""
        sa, sb = self.forward[a], self.forward[b]
        self.forward[a], self.forward[b] = sb, sa
        self.backward[sa], self.backward[sb] = b, a
        return sa, sb

    def problems(self) -> list[str]:
        if any(self.backward[s] != b for b, s in enumerate(self.forward)):
            return ["the forward and backward storage tables are not inverse permutations"]
        return []


@dataclass
class KVSide:
    """One side's KV: where its blocks' data lives, and the primitive moves on it."""

    config: ManagerConfig
    storage: StorageMap = field(init=False)

    def __post_init__(self) -> None:
        self.storage = StorageMap.identity(self.config.num_gpu_blocks)

    def where(self, device: Device, block: BlockId) -> int:
        if device is Device.GPU:
            return self.storage.forward[block]
        return block - self.config.num_gpu_blocks

    def run_copies(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        self.copy(Device.GPU, Device.GPU, self._located(pairs, Device.GPU, Device.GPU))

    def run_swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        source = Device.CPU if to is Device.GPU else Device.GPU
        self.copy(source, to, self._located(pairs, source, to))

    def defragment(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        self.exchange([self.storage.exchange(a, b) for a, b in pairs])

    def _located(
        self, pairs: Sequence[tuple[BlockId, BlockId]], source: Device, destination: Device
    ) -> list[tuple[int, int]]:
        return [(self.where(source, s), self.where(destination, d)) for s, d in pairs]

    # primitives, on storage positions
    def copy(self, source: Device, destination: Device, pairs: list[tuple[int, int]]) -> None:
        raise NotImplementedError

    def exchange(self, pairs: list[tuple[int, int]]) -> None:
        raise NotImplementedError

    def write(self, device: Device, position: int, slot: int, content: SlotContent) -> None:
        raise NotImplementedError

    def holds(self, device: Device, position: int, slot: int, content: SlotContent) -> bool:
        raise NotImplementedError


@dataclass
class AbstractKV(KVSide):
    """The reference's side: ``reference.kv_model``, no tensors."""

    kv: KVModel = kv_model.EMPTY

    def copy(self, source: Device, destination: Device, pairs: list[tuple[int, int]]) -> None:
        self.kv = kv_model.copy_blocks(self.kv, pairs, self.config.block_size, source, destination)

    def exchange(self, pairs: list[tuple[int, int]]) -> None:
        self.kv = kv_model.exchange_blocks(self.kv, pairs, self.config.block_size, Device.GPU)

    def write(self, device: Device, position: int, slot: int, content: SlotContent) -> None:
        self.kv = kv_model.write(self.kv, (device, position, slot), content)

    def holds(self, device: Device, position: int, slot: int, content: SlotContent) -> bool:
        return kv_model.read(self.kv, (device, position, slot)) == content


def accelerator() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


@dataclass
class TorchKV(KVSide):
    """The optimized side: float32 stores on the accelerator (or CPU) and the CPU, moved by
    ``optimized.kernels``."""

    stores: dict[Device, KVStore] = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        sizes = {Device.GPU: self.config.num_gpu_blocks, Device.CPU: self.config.num_cpu_blocks}
        places = {Device.GPU: accelerator(), Device.CPU: torch.device("cpu")}
        self.stores = {
            device: KVStore(
                NUM_LAYERS,
                sizes[device],
                self.config.block_size,
                1,
                2,
                torch.float32,
                places[device],
            )
            for device in Device
        }

    def copy(self, source: Device, destination: Device, pairs: list[tuple[int, int]]) -> None:
        if source is destination:
            kernels.copy_blocks(self.stores[source], pairs)
        else:
            kernels.swap_blocks(self.stores[source], self.stores[destination], pairs)

    def exchange(self, pairs: list[tuple[int, int]]) -> None:
        kernels.swap_blocks_in_place(self.stores[Device.GPU], pairs)

    def write(self, device: Device, position: int, slot: int, content: SlotContent) -> None:
        k, v = kv_values(content)
        for layer, (keys, values) in enumerate(self.stores[device].caches):
            keys[position, slot].fill_(k + layer)
            assert values is not None
            values[position, slot].fill_(v + layer)

    def holds(self, device: Device, position: int, slot: int, content: SlotContent) -> bool:
        k, v = kv_values(content)
        for layer, (keys, values) in enumerate(self.stores[device].caches):
            assert values is not None
            if not bool((keys[position, slot] == k + layer).all()):
                return False
            if not bool((values[position, slot] == v + layer).all()):
                return False
        return True


@dataclass
class Writer:
    """The stand-in model runner: writes each newly scheduled token's KV unless its block is
    already computed (a cache hit's KV is there already)."""

    side: KVSide

    def write_tokens(self, view: ManagerView, seq_id: int, positions: range) -> None:
        seq = view.seqs[seq_id]
        group = view.groups[seq.group_id]
        pool = view.pool(group.device)
        size = view.config.block_size
        for position in positions:
            block = seq.blocks[position // size]
            if block == view.null_block or pool.blocks[block].computed:
                continue
            content = SlotContent(seq.tokens[: position + 1], group.extra_key)
            self.side.write(
                group.device, self.side.where(group.device, block), position % size, content
            )

    def write_cross(self, view: ManagerView, group_id: int) -> None:
        group = view.groups[group_id]
        size = view.config.block_size
        for position in range(len(group.encoder_tokens)):
            block = group.cross_blocks[position // size]
            content = SlotContent(group.encoder_tokens[: position + 1], cross_key(group.extra_key))
            self.side.write(
                group.device, self.side.where(group.device, block), position % size, content
            )


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


def kv_problems(side: KVSide, view: ManagerView, prefixes: CachedPrefixes) -> list[str]:
    """DESIGN §3.5 on one side: live sequences, cross tables and evictable cached blocks."""
    problems = side.storage.problems()
    size = view.config.block_size
    for seq_id, seq in view.seqs.items():
        group = view.groups[seq.group_id]
        for position in range(len(seq.tokens)):
            block = seq.blocks[position // size]
            if block == view.null_block:
                continue
            expected = SlotContent(seq.tokens[: position + 1], group.extra_key)
            where = side.where(group.device, block)
            if not side.holds(group.device, where, position % size, expected):
                problems.append(
                    f"sequence {seq_id}: KV of token {position} in {group.device.value} block"
                    f" {block} is not the KV of its prefix"
                )
                break
    for group_id, group in view.groups.items():
        for position in range(len(group.encoder_tokens)):
            block = group.cross_blocks[position // size]
            expected = SlotContent(group.encoder_tokens[: position + 1], cross_key(group.extra_key))
            if not side.holds(
                group.device, side.where(group.device, block), position % size, expected
            ):
                problems.append(f"group {group_id}: cross-attention KV of token {position} lost")
                break
    for device in Device:
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
                expected = SlotContent(tokens[: start + slot + 1], key)
                if not side.holds(device, side.where(device, block), slot, expected):
                    problems.append(f"evictable {device.value} block {block} lost its cached KV")
                    break
    return problems
