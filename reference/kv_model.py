"""KV data, modelled abstractly: for each physical slot, whose KV it holds.

No tensors here. A slot holds the token prefix (and extra key) whose last token's K and V a model
wrote there, or nothing. The kernels become pure functions over this map, so the reference can
say what every slot must hold after any sequence of copies, swaps and exchanges, and the tests
can compare that with the bytes in the torch store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from immutables import Map

from pagedkv.specs.types import Device, ExtraKey, Token


class SlotContent(NamedTuple):
    """The KV of the last token of ``tokens``, computed by a model for a request ``extra_key``.
    A named tuple: the machines' check of the KV data makes one for every slot of every live
    sequence, and compares it with what the slot holds."""

    tokens: tuple[Token, ...]
    extra_key: ExtraKey


Slot = tuple[Device, int, int]
"""(device, block, slot within the block). The block is where the data sits: with a defragmenter
(``reference/defragmenter.py``), a GPU block's physical id, which the caller resolves."""

KVModel = Map[Slot, SlotContent]

EMPTY: KVModel = Map()


def write(kv: KVModel, slot: Slot, content: SlotContent) -> KVModel:
    return kv.set(slot, content)


def read(kv: KVModel, slot: Slot) -> SlotContent | None:
    return kv.get(slot)


def _block(kv: KVModel, device: Device, block: int, block_size: int) -> list[SlotContent | None]:
    return [kv.get((device, block, i)) for i in range(block_size)]


def _put(
    kv: KVModel, device: Device, block: int, contents: Sequence[SlotContent | None]
) -> KVModel:
    for i, content in enumerate(contents):
        slot = (device, block, i)
        if content is not None:
            kv = kv.set(slot, content)
        elif slot in kv:
            kv = kv.delete(slot)
    return kv


def copy_blocks(
    kv: KVModel,
    pairs: Sequence[tuple[int, int]],
    block_size: int,
    source: Device,
    destination: Device,
) -> KVModel:
    """Every destination gets its source's slots as they were before the call (all sources are
    read before any destination is written): the copy kernel and the swap kernel alike."""
    gathered = [_block(kv, source, s, block_size) for s, _ in pairs]
    for (_, d), contents in zip(pairs, gathered, strict=True):
        kv = _put(kv, destination, d, contents)
    return kv


def exchange_blocks(
    kv: KVModel, pairs: Sequence[tuple[int, int]], block_size: int, device: Device
) -> KVModel:
    """The in-place exchange of defragmentation: each pair's two blocks trade their slots."""
    for a, b in pairs:
        first, second = _block(kv, device, a, block_size), _block(kv, device, b, block_size)
        kv = _put(_put(kv, device, a, second), device, b, first)
    return kv
