"""The evictor: cached blocks nobody holds, in the order they are given up when the free list is
empty (``specs/block_pool.md`` §4)."""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heapify, heappop, heappush

from pagedkv.specs.types import BlockId

_SLACK = 32
"""Stale entries tolerated on top of 2x the live ones before the heaps are rebuilt."""


class Evictor:
    """Min-heaps keyed like ``pagedkv.reference.allocation.eviction_rank`` and then by the id the
    way ``own_eviction_pick`` picks among equals, so ``pop`` takes the same block as the
    reference: the least recently accessed first, then the most hashed tokens, then the lowest
    id.

    One heap per last-access time (the times in a heap of their own), each holding one int per
    entry, ``-num_hashed_tokens`` and the id packed so that their order is the int's
    (``-num_hashed_tokens << id_bits | block``): an int compares several times faster than a
    tuple, and a serving engine's blocks share few access times, so a push or a pop costs a
    few int comparisons.

    Removing a block or changing its access time does not search a heap: the block's current
    entry (time, key) is remembered in ``_live`` and any other entry for it is stale, skipped
    when it reaches the top (an equal stale entry stands at the live one's rank, so whichever
    comes first is taken). When stale entries outnumber live ones about 2 to 1, the heaps are
    rebuilt from the live ones, which keeps their size (and so every operation's cost)
    proportional to the evictable blocks, amortised O(log n).
    """

    __slots__ = ("_bits", "_entries", "_heaps", "_live", "_mask", "_times")

    def __init__(self, id_limit: int = 2**32) -> None:
        """``id_limit``: every block id is below it."""
        self._bits = max(1, (id_limit - 1).bit_length())
        self._mask = (1 << self._bits) - 1
        self._times: list[float] = []
        """A heap of the times that have a heap in ``_heaps`` (an emptied one goes at ``pop``)."""
        self._heaps: dict[float, list[int]] = {}
        self._live: dict[BlockId, tuple[float, int]] = {}
        self._entries = 0
        """Entries in all the heaps, live and stale."""

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._live

    def add(self, block: BlockId, last_accessed: float, num_hashed_tokens: int) -> None:
        """Make ``block`` evictable, or re-rank it if it already is (its old entry goes stale)."""
        key = (-num_hashed_tokens << self._bits) | block
        self._live[block] = (last_accessed, key)
        heap = self._heaps.get(last_accessed)
        if heap is None:
            heap = self._heaps[last_accessed] = []
            heappush(self._times, last_accessed)
        heappush(heap, key)
        self._entries += 1
        if self._entries > 3 * len(self._live) + _SLACK:  # a call saved while none is due
            self._compact_if_stale()

    def add_all(self, entries: Iterable[tuple[BlockId, float, int]]) -> None:
        """``add`` of each ``(block, last_accessed, num_hashed_tokens)``: a sequence's blocks
        given back together, in one call."""
        live, heaps, bits = self._live, self._heaps, self._bits
        time: float | None = None
        heap: list[int] = []
        count = 0
        for block, last_accessed, num_hashed in entries:
            key = (-num_hashed << bits) | block
            live[block] = (last_accessed, key)
            if last_accessed != time or time is None:
                time = last_accessed
                found = heaps.get(time)
                if found is None:
                    found = heaps[time] = []
                    heappush(self._times, time)
                heap = found
            heappush(heap, key)
            count += 1
        self._entries += count
        if self._entries > 3 * len(live) + _SLACK:
            self._compact_if_stale()

    def remove(self, block: BlockId) -> None:
        """``block`` is held again; its entry goes stale."""
        live = self._live
        del live[block]
        if self._entries > 3 * len(live) + _SLACK:  # a call saved while none is due
            self._compact_if_stale()

    def pop(self) -> BlockId:
        """Take the block to evict (the first in the order)."""
        times, heaps, live, mask = self._times, self._heaps, self._live, self._mask
        while True:
            time = times[0]
            heap = heaps[time]
            if not heap:
                heappop(times)
                del heaps[time]
                continue
            key = heappop(heap)
            self._entries -= 1
            block = key & mask
            entry = live.get(block)
            if entry is not None and entry[1] == key and entry[0] == time:
                del live[block]
                return block

    def blocks(self) -> frozenset[BlockId]:
        return frozenset(self._live)

    def clear(self) -> None:
        self._times.clear()
        self._heaps.clear()
        self._live.clear()
        self._entries = 0

    def _compact_if_stale(self) -> None:
        live = len(self._live)
        if self._entries - live > 2 * live + _SLACK:
            heaps: dict[float, list[int]] = {}
            for time, key in self._live.values():
                found = heaps.get(time)
                if found is None:
                    heaps[time] = [key]
                else:
                    found.append(key)
            for heap in heaps.values():
                heapify(heap)
            self._heaps = heaps
            self._times = list(heaps)
            heapify(self._times)
            self._entries = live
