"""The torch side of the KV harness: stores on the accelerator (or the CPU) and the CPU, moved by
``pagedkv.optimized.kernels`` and written through ``KVStore.write``, with GPU blocks placed by an
``OptimizedDefragmenter`` (seed 003) whose exchanges ``swap_blocks_in_place`` runs.

Only a machine whose target has tensors (exact mode against ``optimized/``) uses this file; it
is the one place of the machines that imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from pagedkv.model_tests.machines.kv_harness import Batch, KVSide, Place, kv_values
from pagedkv.optimized import kernels
from pagedkv.optimized.defragmenter import OptimizedDefragmenter
from pagedkv.optimized.kv_store import KVStore
from pagedkv.reference.kv_model import SlotContent
from pagedkv.specs.types import BlockId, Device

NUM_LAYERS = 2
HEADS, HEAD_DIM = 1, 2


def accelerator() -> torch.device:
    """The device the GPU pool's KV lives on: an accelerator where there is one."""
    found = torch.accelerator.current_accelerator(check_available=True)
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

    def _copy(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        located = self.located(pairs, Device.GPU, Device.GPU)
        kernels.copy_blocks(self.stores[Device.GPU], located)

    def _swap(self, pairs: Sequence[tuple[BlockId, BlockId]], to: Device) -> None:
        source = Device.CPU if to is Device.GPU else Device.GPU
        located = self.located(pairs, source, to)
        kernels.swap_blocks(self.stores[source], self.stores[to], located)

    def _exchange(self, pairs: Sequence[tuple[BlockId, BlockId]]) -> None:
        assert self.defrag is not None
        kernels.swap_blocks_in_place(self.stores[Device.GPU], pairs, self.defrag.pad_sizes)

    def _values(self, values: Sequence[tuple[float, float]], device: torch.device) -> torch.Tensor:
        """``[n, 2]``: K and V of layer 0 for each place (layer ``l`` adds ``l``)."""
        return torch.tensor(values, dtype=torch.float32, device=device)

    def _write(
        self, device: Device, places: Sequence[Place], contents: Sequence[SlotContent]
    ) -> None:
        if not places:
            return
        store = self.stores[device]
        values = self._values([kv_values(content) for content in contents], store.device)
        shape = (len(places), HEADS, HEAD_DIM)
        keys = [(values[:, 0] + layer)[:, None, None].expand(shape) for layer in range(NUM_LAYERS)]
        vals = [(values[:, 1] + layer)[:, None, None].expand(shape) for layer in range(NUM_LAYERS)]
        store.write(self.positions(device, places), keys, list(vals))

    def mismatches(self, device: Device, batch: Batch) -> list[int]:
        """One gather of every place from every cache tensor of the store, and one comparison
        with what each must hold (layer ``l``'s K is ``k + l``, its V ``v + l``)."""
        store = self.stores[device]
        size = store.block_size
        slots = [block * size + slot for block, slot in self.positions(device, batch.places)]
        index = torch.tensor(slots, dtype=torch.int64, device=store.device)
        caches = torch.stack(store.tensors()).flatten(1, 2).flatten(2)  # [2L, blocks*size, h*d]
        gathered = caches.index_select(1, index)  # [2L, n, h*d]
        values = self._values(batch.values(), store.device).T  # [2, n]: k, v
        expected = (values[None, :, :] + self._layers(store.device)).reshape(2 * NUM_LAYERS, -1)
        wrong = (gathered != expected[:, :, None]).any(dim=2).any(dim=0)
        return [int(i) for i in wrong.nonzero().flatten().tolist()]

    def _layers(self, device: torch.device) -> torch.Tensor:
        """``[L, 1, 1]``: what each layer adds."""
        return torch.arange(NUM_LAYERS, dtype=torch.float32, device=device)[:, None, None]
