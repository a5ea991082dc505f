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

What a batch of one or a few pairs costs beyond its copies is Python's: a defragmenter's batch
of one pair (4 tensors of 16 KiB slabs) is twelve copies that alone run at 0.97 of a ``copy_`` of
its 128 KiB, while checking the pairs, planning the spans and slicing the views take about as
long again, so the whole call stays near half a ``copy_``. That overhead is per pair and tensor,
so it fades as batches grow (13 pairs near 0.8, 181 pairs above 1).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Sequence

from pagedkv.optimized.kv_store import KVStore

EXCHANGE_PIECE_BYTES = 256 * 2**10
"""The most one exchange step holds aside (a run of consecutive pairs is split into pieces of at
most this, never less than one block): small enough to stay in a core's cache."""


Span = tuple[int, int, int]
"""(first source block, first destination block, blocks): a ``kernels.Run``."""


class HostBlocks:
    """A host store's allocation as bytes, with what locates a block's slab in it, worked out
    once per store: for a batch of one pair, working it out again cost as much as the copies.

    ``tensors`` holds one ``memoryview`` per cache tensor, so that a slab is one slice of it.
    An exchange holds one side aside in a scratch buffer that is kept (``take_scratch``), because
    allocating and zeroing it per call cost a batch of one pair a tenth of its time.
    """

    __slots__ = ("_spare", "memory", "slab", "tensor_bytes", "tensors", "written")

    def __init__(self, store: KVStore) -> None:
        self.memory = store.host_bytes()
        count = store.blocks.shape[0]
        self.slab = store.block_bytes // count
        """Bytes of one block of one cache tensor."""
        self.tensor_bytes = self.slab * store.num_blocks
        """Bytes of one cache tensor: from a block of one tensor to the same block of the next."""
        self.tensors = tuple(
            self.memory[start : start + self.tensor_bytes]
            for start in range(0, count * self.tensor_bytes, self.tensor_bytes)
        )
        self._spare: deque[memoryview] = deque()
        self.written = (store.blocks,)
        """What to tell torch was written (``kernels`` bumps its version counter)."""

    @classmethod
    def of(cls, store: KVStore) -> HostBlocks:
        """The store's layout, made on first use and kept while the store lives."""
        found = _LAYOUTS.get(id(store))
        if found is None:
            found = _LAYOUTS[id(store)] = cls(store)
            weakref.finalize(store, _LAYOUTS.pop, id(store), None)
        return found

    @staticmethod
    def known(store: KVStore) -> HostBlocks | None:
        """The layout ``of`` made for this store, if it made one (a dictionary look-up)."""
        return _LAYOUTS.get(id(store))

    def take_scratch(self, nbytes: int) -> memoryview:
        """A scratch of at least ``nbytes`` that no other call uses until ``give_back``.

        Two threads may exchange disjoint blocks of one store at once (torch's kernels allow
        it, and the byte loop lets the other thread run between two copies), so a scratch is
        taken from a pool rather than shared: a ``deque``'s ``pop`` and ``append`` are atomic.
        """
        try:
            scratch = self._spare.pop()
        except IndexError:  # none spare: this call is the first, or runs beside another
            return memoryview(bytearray(nbytes))
        return scratch if len(scratch) >= nbytes else memoryview(bytearray(nbytes))

    def give_back(self, scratch: memoryview) -> None:
        self._spare.append(scratch)


_LAYOUTS: dict[int, HostBlocks] = {}
"""Per live store (by ``id``; an entry is dropped when its store is collected)."""


def _byte_slices(spans: Sequence[Span], slab: int) -> list[tuple[slice, slice]]:
    """Each span's (source, destination) bytes in one tensor, as slices made once per call: a
    slice object per copy and tensor was a tenth of the Python work of a batch of small blocks."""
    return [(slice(s * slab, (s + n) * slab), slice(d * slab, (d + n) * slab)) for s, d, n in spans]


def copy_runs(
    src: HostBlocks, dst: HostBlocks, direct: Sequence[Span], staged: Sequence[Span]
) -> None:
    """Every run of ``src`` onto ``dst``, in every tensor. ``staged`` runs have a source that this
    call also writes (``src`` and ``dst`` are one store): per tensor their bytes are read aside
    before any destination of that tensor is written. Tensors never share bytes."""
    direct_slices = _byte_slices(direct, src.slab)
    staged_slices = _byte_slices(staged, src.slab)
    for source, destination in zip(src.tensors, dst.tensors, strict=True):
        held = [source[read].tobytes() for read, _ in staged_slices]
        for read, write in direct_slices:
            destination[write] = source[read]
        for (_, write), data in zip(staged_slices, held, strict=True):
            destination[write] = data


def exchange_runs(blocks: HostBlocks, runs: Sequence[Span]) -> None:
    """Trade the contents of every run's two sides, in every tensor (the sides are disjoint)."""
    slab = blocks.slab
    per_piece = max(1, EXCHANGE_PIECE_BYTES // slab)
    scratch = blocks.take_scratch(per_piece * slab)
    one = scratch[:slab]
    # Each piece with its own slice of the scratch, made once here rather than once per tensor.
    pieces: list[tuple[slice, slice, memoryview]] = []
    for a, b, length in runs:
        if length == 1:  # nearly every pair of a defragmenter's batch
            pieces.append((slice(a * slab, (a + 1) * slab), slice(b * slab, (b + 1) * slab), one))
            continue
        for start in range(0, length, per_piece):
            n = min(per_piece, length - start) * slab
            a_start, b_start = (a + start) * slab, (b + start) * slab
            pieces.append((slice(a_start, a_start + n), slice(b_start, b_start + n), scratch[:n]))
    for memory in blocks.tensors:
        for first, second, held in pieces:
            held[:] = memory[first]
            memory[first] = memory[second]
            memory[second] = held
    blocks.give_back(scratch)
