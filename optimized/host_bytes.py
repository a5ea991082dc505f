"""Block moves on a host store as plain byte copies: the kernels' path when torch runs one thread.

A host store is one contiguous allocation laid out block by block (``KVStore.blocks``): block
``b`` of every cache tensor is the ``slab`` bytes at ``b * slab``, and a run of consecutive blocks
is one longer slab. Assigning one ``memoryview`` slice to another is a ``memcpy`` of those bytes
with no tensor view to build and no kernel to dispatch: one copy per run moves every layer, K and
V. That per-call cost, not bandwidth, is what held the torch path back on small blocks. Torch
splits one large ``copy_`` over its intra-op threads and this loop does not, which is why
``kernels`` takes this path only when torch has a single thread.

The exchange needs no padding here (padding serves compiled or graphed accelerator kernels): each
pair trades its slabs through a copy of one side, at most ``EXCHANGE_PIECE_BYTES`` at a time, so
that the copy is read back from cache; the bytes written are those just read, already in cache,
which is why an exchange can outrun a ``copy_`` of as many bytes.

What a batch of one or a few pairs costs beyond its copies is Python's. A defragmenter's batch of
one pair (64 KiB blocks) is three copies of about 2.0 µs in all, all in cache, and about 0.9 µs
besides: checking the pair, finding this layout, the scratch, and torch's version bump (0.2 µs
alone). Such a batch skips the planning (``exchange_one``), which cut that from 1.2 µs; a
``copy_`` of the same 128 KiB takes about 2.0 µs (``specs/defragmenter.md`` §4).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Sequence

from pagedkv.optimized.kv_store import KVStore

EXCHANGE_PIECE_BYTES = 256 * 2**10
"""The most bytes one exchange step holds aside (a run of consecutive pairs, or one large block,
is split into pieces of at most this): small enough to stay in a core's cache."""


Span = tuple[int, int, int]
"""(first source block, first destination block, blocks): a ``kernels.Run``."""


class HostBlocks:
    """A host store's allocation as bytes, with the size of a block's slab, worked out once per
    store: for a batch of one pair, working it out again cost as much as the copies.

    An exchange holds one side aside in a scratch buffer that is kept (``take_scratch``), because
    allocating and zeroing it per call cost a batch of one pair a tenth of its time.
    """

    __slots__ = ("_spare", "memory", "slab", "written")

    def __init__(self, store: KVStore) -> None:
        self.memory = store.host_bytes()
        self.slab = store.block_bytes
        """Bytes of one block of every cache tensor: from one block to the next."""
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
    """Each span's (source, destination) bytes, as slices made once per call."""
    return [(slice(s * slab, (s + n) * slab), slice(d * slab, (d + n) * slab)) for s, d, n in spans]


def copy_runs(
    src: HostBlocks, dst: HostBlocks, direct: Sequence[Span], staged: Sequence[Span]
) -> None:
    """Every run of ``src`` onto ``dst``, all layers at once. ``staged`` runs have a source that
    this call also writes (``src`` and ``dst`` are one store): their bytes are read aside before
    any destination is written."""
    source, destination = src.memory, dst.memory
    held = [source[read].tobytes() for read, _ in _byte_slices(staged, src.slab)]
    for read, write in _byte_slices(direct, src.slab):
        destination[write] = source[read]
    for (_, write), data in zip(_byte_slices(staged, src.slab), held, strict=True):
        destination[write] = data


def _trade(memory: memoryview, held: memoryview, first: int, second: int) -> None:
    """Trade the ``len(held)`` bytes at ``first`` with those at ``second`` through ``held``."""
    n = len(held)
    held[:] = memory[first : first + n]
    memory[first : first + n] = memory[second : second + n]
    memory[second : second + n] = held


def exchange_one(blocks: HostBlocks, a: int, b: int) -> None:
    """Trade blocks ``a`` and ``b`` (distinct), all layers at once: ``exchange_runs`` of one
    run of one block, without its planning."""
    slab = blocks.slab
    if slab > EXCHANGE_PIECE_BYTES:  # a block too large to hold aside at once: in pieces
        exchange_runs(blocks, [(a, b, 1)])
        return
    scratch = blocks.take_scratch(EXCHANGE_PIECE_BYTES)  # the one scratch size kept
    _trade(blocks.memory, scratch[:slab], a * slab, b * slab)
    blocks.give_back(scratch)


def exchange_runs(blocks: HostBlocks, runs: Sequence[Span]) -> None:
    """Trade the contents of every run's two sides, all layers at once (the sides are disjoint),
    a piece of at most ``EXCHANGE_PIECE_BYTES`` at a time: a piece may end inside a block, since
    the two sides are equally long contiguous bytes."""
    memory, slab, piece = blocks.memory, blocks.slab, EXCHANGE_PIECE_BYTES
    scratch = blocks.take_scratch(piece)
    one = scratch[:slab] if slab <= piece else None
    for a, b, length in runs:
        first, second = a * slab, b * slab
        if length == 1 and one is not None:  # nearly every pair of a defragmenter's batch
            _trade(memory, one, first, second)
            continue
        end = first + length * slab
        while first < end:
            n = min(piece, end - first)
            _trade(memory, scratch[:n], first, second)
            first += n
            second += n
    blocks.give_back(scratch)
