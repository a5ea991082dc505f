"""The evictor: cached blocks nobody holds, in the order they are given up when the free list is
empty (``specs/block_pool.md`` §4)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from heapq import heapify, heappop, heappush

from pagedkv.specs.types import BlockId

_SLACK = 32
"""Stale entries tolerated on top of 2x the live ones before the heap is rebuilt."""

_TIMES_KEPT = 4096
"""Times whose bits are kept (then forgotten all at once)."""

_DOUBLE = struct.Struct("<d").pack
_LOW_63 = (1 << 63) - 1


def time_bits(last_accessed: float) -> int:
    """An int in the order of the times: a double's bits read as a signed int rise with the
    value for positive doubles and fall for negative ones, so a negative one's value bits are
    flipped (``-0.0`` is ``0.0`` first: the two times are equal). Times are never NaN."""
    bits = int.from_bytes(_DOUBLE(last_accessed + 0.0), "little", signed=True)
    return bits ^ _LOW_63 if bits < 0 else bits


class Evictor:
    """A min-heap in the order of ``pagedkv.reference.allocation.eviction_rank`` and then of the
    id, the way ``own_eviction_pick`` picks among equals, so ``pop`` takes the same block as the
    reference: the least recently accessed first, then the most hashed tokens, then the lowest
    id.

    Each entry is one int, the three packed so that the int's order is theirs: the time's bits
    (``time_bits``), then ``hashed_cap - 1 - num_hashed_tokens``, then the id. An int compares
    several times faster than a tuple and needs no object besides itself. A count of hashed
    tokens that does not fit the field widens it (every key rebuilt), so any count is exact.

    Removing a block or changing its access time does not search the heap: the block's current
    key is remembered in ``_live`` and any other entry for it is stale, skipped when it reaches
    the top. When stale entries outnumber live ones about 2 to 1, the heap is rebuilt from the
    live ones, which keeps its size (and so every operation's cost) proportional to the
    evictable blocks, amortised O(log n).
    """

    __slots__ = (
        "_block_bits",
        "_hashed_bits",
        "_heap",
        "_last",
        "_live",
        "_most_hashed",
        "_time_bits",
    )

    def __init__(self, id_limit: int = 2**32) -> None:
        """``id_limit``: every block id is below it."""
        self._block_bits = max(1, (id_limit - 1).bit_length())
        self._hashed_bits = 40
        self._most_hashed = (1 << 40) - 1
        """The largest count the field holds (``2**hashed_bits - 1``)."""
        self._heap: list[int] = []
        self._live: dict[BlockId, int] = {}
        self._last: tuple[float, int] = (0.0, 0)
        self._time_bits: dict[float, int] = {}
        """The times packed lately and their bits: the blocks of a step share its time."""

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._live

    def _bits_of(self, last_accessed: float) -> int:
        """``time_bits``, remembered: the last time first (blocks given back together share
        it), then the times seen lately (the blocks of a step share its time)."""
        bits = self._time_bits.get(last_accessed)
        if bits is None:
            if len(self._time_bits) >= _TIMES_KEPT:
                self._time_bits.clear()
            bits = self._time_bits[last_accessed] = time_bits(last_accessed)
        self._last = (last_accessed, bits)
        return bits

    def add(self, block: BlockId, last_accessed: float, num_hashed_tokens: int) -> None:
        """Make ``block`` evictable, or re-rank it if it already is (its old entry goes stale)."""
        last_time, bits = self._last
        if last_accessed != last_time:
            bits = self._bits_of(last_accessed)
        if num_hashed_tokens > self._most_hashed:
            self._widen(num_hashed_tokens)
        key = (
            ((bits << self._hashed_bits) | (self._most_hashed - num_hashed_tokens))
            << self._block_bits
        ) | block
        self._live[block] = key
        heappush(self._heap, key)
        if len(self._heap) > 3 * len(self._live) + _SLACK:  # a call saved while none is due
            self._compact_if_stale()

    def add_all(
        self,
        blocks: Sequence[BlockId],
        times: Sequence[float],
        nums_hashed: Sequence[int],
        addend: int = 0,
    ) -> None:
        """``add`` of each block with its last access and count of hashed tokens
        (``nums_hashed[i] + addend``: the pool gives its blocks' starts and the block size), a
        sequence's blocks given back together, in one call. They share one access time in the
        common case, whose bits are found once; each key is then a base for that time and the
        addend, less the block's count, plus its id (``add``'s fields, written as a sum)."""
        if not blocks:
            return
        most = max(nums_hashed) + addend
        if most > self._most_hashed:
            self._widen(most)
        first_time = times[0]
        if times.count(first_time) != len(times):  # several times: one at a time
            for block, last_accessed, num_hashed in zip(blocks, times, nums_hashed, strict=True):
                self.add(block, last_accessed, num_hashed + addend)
            return
        last_time, bits = self._last
        if first_time != last_time:
            bits = self._bits_of(first_time)
        live, heap, block_bits = self._live, self._heap, self._block_bits
        base = (((bits << self._hashed_bits) | self._most_hashed) - addend) << block_bits
        keys = [
            base - (num << block_bits) + block
            for block, num in zip(blocks, nums_hashed, strict=True)
        ]
        live.update(zip(blocks, keys, strict=True))
        for key in keys:
            heappush(heap, key)
        if len(heap) > 3 * len(live) + _SLACK:
            self._compact_if_stale()

    def remove(self, block: BlockId) -> None:
        """``block`` is held again; its entry goes stale."""
        live = self._live
        del live[block]
        if len(self._heap) > 3 * len(live) + _SLACK:  # a call saved while none is due
            self._compact_if_stale()

    def pop(self) -> BlockId:
        """Take the block to evict (the first in the order)."""
        heap, live, mask = self._heap, self._live, (1 << self._block_bits) - 1
        while True:
            key = heappop(heap)
            block = key & mask
            if live.get(block) == key:
                del live[block]
                return block

    def blocks(self) -> frozenset[BlockId]:
        return frozenset(self._live)

    def fingerprint(self) -> dict[BlockId, int]:
        """The evictable blocks with their order keys, copied at C speed: equal fingerprints mean
        equal ``blocks`` (``OptimizedBlockPool.fingerprint``)."""
        return self._live.copy()

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def _compact_if_stale(self) -> None:
        live = len(self._live)
        if len(self._heap) - live > 2 * live + _SLACK:
            self._heap = list(self._live.values())
            heapify(self._heap)

    def _widen(self, num_hashed_tokens: int) -> None:
        """Make room for ``num_hashed_tokens`` in the keys: each live key decoded and packed
        again with the wider field (stale entries dropped)."""
        old_bits, block_bits = self._hashed_bits, self._block_bits
        new_bits = max(2 * old_bits, num_hashed_tokens.bit_length() + 1)
        widened = {}
        for block, key in self._live.items():
            rank = key >> block_bits
            num_hashed = (1 << old_bits) - 1 - (rank & ((1 << old_bits) - 1))
            bits = rank >> old_bits
            rank = (bits << new_bits) | ((1 << new_bits) - 1 - num_hashed)
            widened[block] = (rank << block_bits) | block
        self._hashed_bits = new_bits
        self._most_hashed = (1 << new_bits) - 1
        self._live = widened
        self._heap = list(widened.values())
        heapify(self._heap)
