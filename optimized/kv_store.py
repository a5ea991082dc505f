"""The KV tensors of one device: per layer a K and a V cache indexed by block.

Each cache tensor is ``[num_blocks, block_size, num_kv_heads, head_dim]``, blocks first, and all of
them are views of one allocation (``blocks``) laid out **block by block**: ``[num_blocks, tensors,
block_size, ...]``. Block ``b`` of every layer, K and V, is one contiguous slab, and so is a run of
consecutive blocks: that is what lets ``pagedkv.optimized.kernels`` move a run of all layers with a
single copy. A cache tensor's own block is contiguous too, but its blocks are a whole block's slab
apart (``stride(0)``): a kernel that reads a cache tensor through its strides sees no difference.
(The layout was layer by layer before: a scattered block then took one copy per cache tensor, a
``memcpy`` of 32 KiB at 16 tokens of 8 KV heads of 128 in fp16, and ``copy_blocks`` of 64 scattered
blocks ran at 0.74-0.81 of a contiguous ``copy_`` of as many bytes; one copy of each block's 256 KiB
over 8 tensors runs at 1.23-1.40, ``specs/defragmenter.md`` §4.) On the host (unless pinned for a
GPU) the allocation is private memory advised for huge pages (``optimized/host_memory.py``), which
scattered block copies need to run at ``memcpy`` speed. Indices here are 0-based positions in this
store; a pool whose ids start at ``first_id`` subtracts it before calling in.

The model runner's side is ``KVStore.write`` (each token's K and V into its slot, as vLLM's
``reshape_and_cache`` does; ``specs/slots.py`` says which slot) and ``KVStore.read``. A store
knows only positions: with a defragmenter (``optimized/defragmenter.py``) a block manager's id is
resolved to its position before it reaches the store.
"""

from __future__ import annotations

import ctypes
import math
import mmap
from collections.abc import Sequence

import torch

from pagedkv.optimized.host_memory import zeroed_host_memory
from pagedkv.specs.errors import ConfigurationError, ForeignBlockError, InvalidArgumentError

LayerCache = tuple[torch.Tensor, torch.Tensor | None]
"""One layer's (K, V); V is None for MLA, whose single latent cache plays both roles."""

StorageSlot = tuple[int, int]
"""(position of a block in the store, slot within the block)."""


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _float_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigurationError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    return dtype


def _as_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as exc:
            raise ConfigurationError(f"device {device!r} is not a torch device: {exc}") from exc
    raise ConfigurationError(f"device must be a torch.device or str, got {device!r}")


class KVStore:
    """Every layer's KV blocks on one device, allocated once and never resized."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        mla: bool = False,
    ) -> None:
        self._num_layers = _positive_int("num_layers", num_layers)
        self._num_blocks = _positive_int("num_blocks", num_blocks)
        self._block_size = _positive_int("block_size", block_size)
        self._num_kv_heads = _positive_int("num_kv_heads", num_kv_heads)
        self._head_dim = _positive_int("head_dim", head_dim)
        self._dtype = _float_dtype(dtype)
        if not isinstance(mla, bool):
            raise ConfigurationError(f"mla must be a bool, got {mla!r}")
        self._mla = mla
        requested = _as_device(device)
        # Pinned host memory is what lets a host<->GPU swap run asynchronously (and at full PCIe
        # speed); without a GPU pinning only costs locked pages, so it is skipped.
        pin = requested.type == "cpu" and torch.cuda.is_available()
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        num_tensors = num_layers * (1 if mla else 2)
        self._host_memory: mmap.mmap | None = None
        try:
            if requested.type == "cpu" and not pin:
                self._host_memory = zeroed_host_memory(
                    num_tensors * math.prod(shape) * dtype.itemsize
                )
                self._blocks = torch.frombuffer(self._host_memory, dtype=dtype).view(
                    num_blocks, num_tensors, *shape[1:]
                )
                # Written now, as torch.zeros would: a page first *read* would map the shared
                # zero page, and a later write would then get a small page, not a huge one.
                self._blocks.zero_()
            else:
                self._blocks = torch.zeros(
                    (num_blocks, num_tensors, *shape[1:]),
                    dtype=dtype,
                    device=requested,
                    pin_memory=pin,
                )
        except (RuntimeError, AssertionError, OSError) as exc:
            # Torch reports an unusable device (no such backend, no such index, out of memory) as
            # one of these; to the caller it is a configuration that cannot work.
            raise ConfigurationError(
                f"cannot allocate {num_layers} layers of {shape} {dtype} on device "
                f"{requested}: {exc}"
            ) from exc
        tensors = self._blocks.unbind(1)
        caches: list[LayerCache]
        if mla:
            caches = [(k, None) for k in tensors]
        else:
            caches = [(tensors[2 * layer], tensors[2 * layer + 1]) for layer in range(num_layers)]
        self._caches: tuple[LayerCache, ...] = tuple(caches)
        self._device = self._blocks.device
        self._host_bytes: memoryview | None = None

    @property
    def caches(self) -> list[LayerCache]:
        """Per layer (K, V | None). The tensors are the store's own: writing them writes it."""
        return list(self._caches)

    @property
    def num_layers(self) -> int:
        return self._num_layers

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_kv_heads(self) -> int:
        return self._num_kv_heads

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        """The device the tensors live on (``cuda`` resolved to ``cuda:0`` and so on)."""
        return self._device

    @property
    def is_mla(self) -> bool:
        return self._mla

    @property
    def block_bytes(self) -> int:
        """Bytes one block occupies over all layers, K and V: what a copy of one block moves."""
        per_tensor = self._block_size * self._num_kv_heads * self._head_dim * self._dtype.itemsize
        return per_tensor * self._num_layers * (1 if self._mla else 2)

    @property
    def blocks(self) -> torch.Tensor:
        """Every cache tensor as one, ``[num_blocks, tensors, block_size, heads, head_dim]``, the
        tensors in the order of ``tensors()``: ``blocks[b]`` is block ``b`` of every layer, K and
        V, one contiguous slab of ``block_bytes``."""
        return self._blocks

    def host_bytes(self) -> memoryview:
        """The single allocation of a host store as writable bytes, in the order of ``blocks``
        (block ``b`` at ``b * block_bytes``): what the host kernels (``optimized/host_bytes.py``)
        copy slices of. Made on first use; it stays valid as long as the store, which never
        frees or moves its allocation."""
        if self._host_bytes is None:
            if self._device.type != "cpu":
                raise InvalidArgumentError(f"a store on {self._device} has no host bytes")
            if self._host_memory is not None:
                self._host_bytes = memoryview(self._host_memory)
            else:  # pinned: torch's allocation
                size = self._blocks.numel() * self._blocks.element_size()
                raw = (ctypes.c_char * size).from_address(self._blocks.data_ptr())
                self._host_bytes = memoryview(raw).cast("B")
        return self._host_bytes

    def tensors(self) -> list[torch.Tensor]:
        """Every cache tensor (K then V per layer): the kernels treat them all alike."""
        out: list[torch.Tensor] = []
        for k, v in self._caches:
            out.append(k)
            if v is not None:
                out.append(v)
        return out

    def same_layout(self, other: KVStore) -> str | None:
        """The first attribute in which ``other`` differs (so blocks cannot move), else None."""
        for name in ("num_layers", "block_size", "num_kv_heads", "head_dim", "dtype", "is_mla"):
            if getattr(self, name) != getattr(other, name):
                return f"{name} {getattr(self, name)!r} != {getattr(other, name)!r}"
        return None

    def _check_slots(self, slots: Sequence[StorageSlot]) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(slots, str | bytes) or not isinstance(slots, Sequence):
            raise InvalidArgumentError(f"expected a sequence of (block, slot), got {slots!r}")
        blocks, offsets = [], []
        for slot in slots:
            if (
                not isinstance(slot, tuple)
                or len(slot) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in slot)
            ):
                raise InvalidArgumentError(f"a slot is (block, offset) ints, got {slot!r}")
            block, offset = slot
            if not 0 <= block < self._num_blocks:
                raise ForeignBlockError(
                    f"block {block} is not in this store (0..{self._num_blocks - 1})"
                )
            if not 0 <= offset < self._block_size:
                raise InvalidArgumentError(f"slot {offset} is not in a block of {self._block_size}")
            blocks.append(block)
            offsets.append(offset)
        return (
            torch.tensor(blocks, dtype=torch.int64, device=self._device),
            torch.tensor(offsets, dtype=torch.int64, device=self._device),
        )

    def write(
        self,
        slots: Sequence[StorageSlot],
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor | None],
    ) -> None:
        """Store token ``i``'s K (and V) of every layer in ``slots[i]``: the model runner's write.

        ``keys[layer]`` and ``values[layer]`` are ``[len(slots), num_kv_heads, head_dim]``
        (``values`` entries are None for MLA). Slots are checked before anything is written.
        """
        blocks, offsets = self._check_slots(slots)
        shape = (len(slots), self._num_kv_heads, self._head_dim)
        if len(keys) != self._num_layers or len(values) != self._num_layers:
            raise InvalidArgumentError(
                f"expected K and V for {self._num_layers} layers, got {len(keys)} and {len(values)}"
            )
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            if tuple(k.shape) != shape or (v is None) != self._mla:
                raise InvalidArgumentError(f"layer {layer}: K/V must be {shape} (V None for MLA)")
            if v is not None and tuple(v.shape) != shape:
                raise InvalidArgumentError(f"layer {layer}: V must be {shape}")
        for (k_cache, v_cache), k, v in zip(self._caches, keys, values, strict=True):
            k_cache[blocks, offsets] = k.to(k_cache)
            if v_cache is not None and v is not None:
                v_cache[blocks, offsets] = v.to(v_cache)

    def read(self, slots: Sequence[StorageSlot]) -> list[LayerCache]:
        """Per layer the K (and V) of ``slots``, ``[len(slots), num_kv_heads, head_dim]``: what
        attention reads through a block table. The result is a copy."""
        blocks, offsets = self._check_slots(slots)
        return [
            (k[blocks, offsets], None if v is None else v[blocks, offsets]) for k, v in self._caches
        ]

    def gather(self, block_ids: Sequence[int]) -> list[LayerCache]:
        """A sequence's KV read through its block table: per layer the named blocks, in order,
        concatenated along the token axis to ``[len(block_ids) * block_size, heads, head_dim]``.
        The result is a copy."""
        if isinstance(block_ids, str | bytes) or not isinstance(block_ids, Sequence):
            raise InvalidArgumentError(f"expected a sequence of block ids, got {block_ids!r}")
        for block in block_ids:
            if not isinstance(block, int) or isinstance(block, bool):
                raise InvalidArgumentError(f"block id must be an int, got {block!r}")
            if not 0 <= block < self._num_blocks:
                raise ForeignBlockError(
                    f"block {block} is not in this store (0..{self._num_blocks - 1})"
                )
        index = torch.tensor(list(block_ids), dtype=torch.int64, device=self._device)
        tokens = (-1, self._num_kv_heads, self._head_dim)
        out: list[LayerCache] = []
        for k, v in self._caches:
            gk = k.index_select(0, index).reshape(tokens)
            gv = None if v is None else v.index_select(0, index).reshape(tokens)
            out.append((gk, gv))
        return out

    def __repr__(self) -> str:
        return (
            f"KVStore(num_layers={self._num_layers}, num_blocks={self._num_blocks}, "
            f"block_size={self._block_size}, num_kv_heads={self._num_kv_heads}, "
            f"head_dim={self._head_dim}, dtype={self._dtype}, device={self._device}, "
            f"mla={self._mla})"
        )
