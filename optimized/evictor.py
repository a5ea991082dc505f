"""The evictor: cached blocks nobody holds, in the order they are given up when the free list is
empty (``specs/block_pool.md`` §4)."""

from __future__ import annotations

import heapq
from typing import TypeAlias

from pagedkv.specs.types import BlockId

_Entry: TypeAlias = tuple[float, int, BlockId]
"""(last_accessed, -num_hashed_tokens, block): the heap order is the reference's eviction order,
the lowest id first among equals."""

_SLACK = 32
"""Stale entries tolerated on top of 2x the live ones before the heap is rebuilt."""


class Evictor:
    """A min-heap keyed like ``pagedkv.reference.allocation.eviction_rank`` and then by the id the
    way ``own_eviction_pick`` picks among equals, so ``pop`` takes the same block as the reference.

    Removing a block or changing its access time does not search the heap: the block's current
    entry is remembered in ``_live`` and any other entry for it is stale, skipped when it reaches
    the top: the live entry is told from a stale one of equal value by identity. When stale
    entries outnumber live ones about 2 to 1, the heap is rebuilt from the live ones, which keeps
    its size (and so every operation's cost) proportional to the evictable blocks, amortised
    O(log n).
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live: dict[BlockId, _Entry] = {}

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._live

    def add(self, block: BlockId, last_accessed: float, num_hashed_tokens: int) -> None:
        """Make ``block`` evictable, or re-rank it if it already is (its old entry goes stale)."""
        entry = (last_accessed, -num_hashed_tokens, block)
        self._live[block] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 3 * len(self._live) + _SLACK:  # a call saved while none is due
            self._compact_if_stale()

    def add_all(self, entries: list[_Entry]) -> None:
        """``add`` of each ``(last_accessed, -num_hashed_tokens, block)``: a sequence's blocks
        given back together, a call for all of them."""
        live, heap, push = self._live, self._heap, heapq.heappush
        for entry in entries:
            live[entry[2]] = entry
            push(heap, entry)
        if len(heap) > 3 * len(live) + _SLACK:
            self._compact_if_stale()

    def remove(self, block: BlockId) -> None:
        """``block`` is held again; its entry goes stale."""
        del self._live[block]
        self._compact_if_stale()

    def pop(self) -> BlockId:
        """Take the block to evict (the first in the heap order)."""
        while True:
            entry = heapq.heappop(self._heap)
            block = entry[2]
            if self._live.get(block) is entry:
                del self._live[block]
                return block

    def blocks(self) -> frozenset[BlockId]:
        return frozenset(self._live)

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def _compact_if_stale(self) -> None:
        live = len(self._live)
        if len(self._heap) - live > 2 * live + _SLACK:
            self._heap = list(self._live.values())
            heapq.heapify(self._heap)
