"""The free list: blocks nobody holds and no hash names, handed out lowest id first."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from pagedkv.specs.types import BlockId


class FreeList:
    """A min-heap of block ids.

    The reference allocates the lowest free id, and exact mode must pick the same block, so a heap
    gives that choice in O(log n) instead of a scan. Blocks only leave through ``pop_lowest``, so
    the heap never holds stale entries.
    """

    __slots__ = ("heap",)

    def __init__(self, blocks: Iterable[BlockId] = ()) -> None:
        self.heap: list[BlockId] = list(blocks)
        """The heap itself: the pool's hottest paths push and pop on it directly
        (``heapq.heappush``, ``heapq.heappop``), a method call fewer per block."""
        heapq.heapify(self.heap)

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, block: BlockId) -> None:
        heapq.heappush(self.heap, block)

    def pop_lowest(self) -> BlockId | None:
        """The lowest free id, taken off the list; None when the list is empty."""
        return heapq.heappop(self.heap) if self.heap else None

    def blocks(self) -> frozenset[BlockId]:
        return frozenset(self.heap)
