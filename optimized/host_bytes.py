"""Block moves on a host store as plain byte copies: the kernels' path when torch runs one thread.

A host store is one contiguous allocation (``KVStore.blocks``): block ``b`` of cache tensor ``t``
is the ``slab`` bytes at ``t * tensor_bytes + b * slab``, and a run of consecutive blocks is one
longer slab. Assigning one ``memoryview`` slice to another is a ``memcpy`` of those bytes with no
tensor view to build and no kernel to dispatch. That per-call cost, not bandwidth, is what held
the torch path back on small blocks: 64 scattered 16-token blocks (a slab of 32 KiB at 8 KV heads
of 128, fp16) moved at 0.64-0.77 of a contiguous ``copy_``, while the slab copies themselves run at
``memcpy`` speed. Torch splits one large ``copy_`` over its intra-op threads and this loop does
not, which is why ``kernels`` takes this path only when torch has a single thread.

The exchange needs no padding here (padding serves compiled or graphed accelerator kernels): each
pair trades its slabs through a copy of one side, at most ``EXCHANGE_PIECE_BYTES`` at a time, so
that the copy is read back from cache; the bytes written are those just read, already in cache,
which is why an exchange can outrun a ``copy_`` of as many bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple
from weakref import WeakKeyDictionary

from pagedkv.optimized.kv_store import KVStore

EXCHANGE_PIECE_BYTES = 256 * 2**10
"""The most one exchange step holds aside (a run of consecutive pairs is split into pieces of at
most this, never less than one block): small enough to stay in a core's cache."""


Span = tuple[int, int, int]
"""(first source block, first destination block, blocks): a ``kernels.Run``."""


class HostBlocks(NamedTuple):
    """A host store's allocation as bytes, with what locates a block's slab in it."""

    memory: memoryview
    slab: int
    """Bytes of one block of one cache tensor."""
    tensor_bytes: int
    """Bytes of one cache tensor: from a block of one tensor to the same block of the next."""
    tensors: int

    @classmethod
    def of(cls, store: KVStore) -> HostBlocks:
        """The store's layout, worked out once per store (for a small batch, working it out
        again cost a tenth of the call)."""
        found = _LAYOUTS.get(store)
        if found is None:
            tensors = store.blocks.shape[0]
            slab = store.block_bytes // tensors
            found = cls(store.host_bytes(), slab, slab * store.num_blocks, tensors)
            _LAYOUTS[store] = found
        return found


_LAYOUTS: WeakKeyDictionary[KVStore, HostBlocks] = WeakKeyDictionary()


def copy_runs(
    src: HostBlocks, dst: HostBlocks, direct: Sequence[Span], staged: Sequence[Span]
) -> None:
    """Every run of ``src`` onto ``dst``, in every tensor. ``staged`` runs have a source that this
    call also writes (``src`` and ``dst`` are one store): per tensor their bytes are read aside
    before any destination of that tensor is written. Tensors never share bytes."""
    slab = src.slab
    direct_spans = [(s * slab, d * slab, n * slab) for s, d, n in direct]
    staged_spans = [(s * slab, d * slab, n * slab) for s, d, n in staged]
    source, destination = src.memory, dst.memory
    for tensor in range(src.tensors):
        s0, d0 = tensor * src.tensor_bytes, tensor * dst.tensor_bytes
        held = [source[s0 + s : s0 + s + n].tobytes() for s, _, n in staged_spans]
        for s, d, n in direct_spans:
            s += s0
            d += d0
            destination[d : d + n] = source[s : s + n]
        for (_, d, n), data in zip(staged_spans, held, strict=True):
            d += d0
            destination[d : d + n] = data


def exchange_runs(blocks: HostBlocks, runs: Sequence[Span]) -> None:
    """Trade the contents of every run's two sides, in every tensor (the sides are disjoint)."""
    slab = blocks.slab
    per_piece = max(1, EXCHANGE_PIECE_BYTES // slab)
    if all(length <= per_piece for _, _, length in runs):  # every run one piece: most batches
        spans = [(a * slab, b * slab, length * slab) for a, b, length in runs]
    else:
        spans = [
            ((a + start) * slab, (b + start) * slab, min(per_piece, length - start) * slab)
            for a, b, length in runs
            for start in range(0, length, per_piece)
        ]
    widest = max(n for _, _, n in spans)
    scratch = memoryview(bytearray(widest))
    memory = blocks.memory
    for base in range(0, blocks.tensors * blocks.tensor_bytes, blocks.tensor_bytes):
        for a, b, n in spans:
            a += base
            b += base
            first = memory[a : a + n]
            held = scratch if n == widest else scratch[:n]
            held[:] = first
            first[:] = memory[b : b + n]
            memory[b : b + n] = held
