"""The torch side of the KV harness: stores on the accelerator (or the CPU) and the CPU, moved by
``optimized.kernels`` and written through ``KVStore.write``, with GPU blocks placed by an
``OptimizedDefragmenter`` (seed 003) whose exchanges ``swap_blocks_in_place`` runs.

Only a machine whose target has tensors (exact mode against ``optimized/``) uses this file; it
is the one place of the machines that imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from model_tests.machines.kv_harness import KVSide, kv_values
from optimized import kernels
from optimized.defragmenter import OptimizedDefragmenter
from optimized.kv_store import KVStore
from reference.kv_model import SlotContent
from specs.types import BlockId, Device

NUM_LAYERS = 2
HEADS, HEAD_DIM = 1, 2


def accelerator() -> torch.device:
    """The device the GPU pool's KV lives on: an accelerator where there is one."""
    found = torch.accelerator.current_accelerator()
    return torch.device("cpu") if found is None else found


@dataclass
class TorchKV(KVSide):
    """float32 stores; K of layer ``l`` is ``k + l`` and V is ``v + l`` for ``kv_values``."""

    stores: dict[Device, KVStore] = field(init=False)

    def __post_init__(self) -> None:
        sizes = {Device.GPU: self.config.num_gpu_blocks, Device.CPU: self.config.num_cpu_blocks}
        places = {Device.GPU: accelerator(), Device.CPU: torch.device("cpu")}
        self.stores = {
            device: KVStore(
                NUM_LAYERS,
                sizes[device],
                self.config.block_size,
                HEADS,
                HEAD_DIM,
                torch.float32,
                places[device],
            )
            for device in Device
        }
        if self.defrag is not None:
            self.placement = OptimizedDefragmenter(self.defrag)

    def position(self, device: Device, block: BlockId) -> int:
        if device is Device.CPU:
            return block - self.config.num_gpu_blocks
        return self.gpu_position(block)

    def run_copies(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        located = self.located(pairs, Device.GPU, Device.GPU)
        kernels.copy_blocks(self.stores[Device.GPU], located)

    def run_swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        source = Device.CPU if to is Device.GPU else Device.GPU
        located = self.located(pairs, source, to)
        kernels.swap_blocks(self.stores[source], self.stores[to], located)

    def run_exchanges(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        assert self.defrag is not None
        kernels.swap_blocks_in_place(self.stores[Device.GPU], pairs, self.defrag.pad_sizes)

    def _layers(self, content: SlotContent) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        k, v = kv_values(content)
        shape = (1, HEADS, HEAD_DIM)
        keys = [torch.full(shape, k + layer) for layer in range(NUM_LAYERS)]
        values = [torch.full(shape, v + layer) for layer in range(NUM_LAYERS)]
        return keys, values

    def write(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> None:
        keys, values = self._layers(content)
        self.stores[device].write([(self.position(device, block), slot)], keys, list(values))

    def holds(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> bool:
        keys, values = self._layers(content)
        read = self.stores[device].read([(self.position(device, block), slot)])
        for (k, v), want_k, want_v in zip(read, keys, values, strict=True):
            if v is None or not torch.equal(k, want_k) or not torch.equal(v, want_v):
                return False
        return True
