"""The request level's free queue: every block no request holds, in the order allocation takes
them (``specs/request_level.md``, "Giving blocks back").

vLLM v1's ``FreeKVCacheBlockQueue`` threads a doubly linked list through its block objects so a
hit can pull a block out of the middle in O(1). Here the links are two flat lists indexed by
block id, so the queue makes no object per block for the garbage collector to walk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pagedkv.specs.types import BlockId

_OUT = -1
"""The link of a block that is not in the queue."""


class FreeQueue:
    """A doubly linked list over block ids ``0 .. capacity - 1`` with two sentinels (ids
    ``capacity`` and ``capacity + 1``), so no operation branches on an empty queue or an end.

    ``popleft``, ``remove``, ``append`` and ``__contains__`` are O(1); ``prepend_n`` and
    ``append_n`` are O(run length). Callers pass only ids in range, and ``remove`` / ``append``
    only ids that are (or are not) in the queue: the manager above knows which from the ref
    counts, and checking again here would cost every hot call.
    """

    __slots__ = ("_head", "_length", "_next", "_prev", "_tail")

    def __init__(self, capacity: int, blocks: Iterable[BlockId] = ()) -> None:
        self._head = capacity
        self._tail = capacity + 1
        self._next: list[int] = [_OUT] * (capacity + 2)
        self._prev: list[int] = [_OUT] * (capacity + 2)
        self._next[self._head] = self._tail
        self._prev[self._tail] = self._head
        self._length = 0
        self.append_n(blocks)

    def __len__(self) -> int:
        return self._length

    def __contains__(self, block: BlockId) -> bool:
        return self._prev[block] != _OUT

    def __iter__(self) -> Iterator[BlockId]:
        """Front first."""
        nxt, tail = self._next, self._tail
        block = nxt[self._head]
        while block != tail:
            yield block
            block = nxt[block]

    def popleft(self) -> BlockId:
        """Take the front block; the queue must not be empty."""
        nxt, prev = self._next, self._prev
        block = nxt[self._head]
        after = nxt[block]
        nxt[self._head] = after
        prev[after] = self._head
        nxt[block] = prev[block] = _OUT
        self._length -= 1
        return block

    def popleft_n(self, count: int) -> list[BlockId]:
        """Take ``count`` blocks from the front, front first; the queue must hold them."""
        nxt, prev = self._next, self._prev
        taken: list[BlockId] = []
        block = nxt[self._head]
        for _ in range(count):
            taken.append(block)
            after = nxt[block]
            nxt[block] = prev[block] = _OUT
            block = after
        nxt[self._head] = block
        prev[block] = self._head
        self._length -= count
        return taken

    def remove(self, block: BlockId) -> None:
        """Take ``block`` out of the middle (a hit touched it); it must be in the queue."""
        nxt, prev = self._next, self._prev
        before, after = prev[block], nxt[block]
        nxt[before] = after
        prev[after] = before
        nxt[block] = prev[block] = _OUT
        self._length -= 1

    def append(self, block: BlockId) -> None:
        """Put ``block`` at the back (taken last); it must not be in the queue."""
        nxt, prev, tail = self._next, self._prev, self._tail
        last = prev[tail]
        nxt[last] = block
        prev[block] = last
        nxt[block] = tail
        prev[tail] = block
        self._length += 1

    def append_n(self, blocks: Iterable[BlockId]) -> None:
        """Put ``blocks`` at the back in the given order (the first given is taken first)."""
        self._insert_run(self._prev[self._tail], self._tail, blocks)

    def prepend_n(self, blocks: Iterable[BlockId]) -> None:
        """Put ``blocks`` at the front in the given order (the first given is taken first)."""
        self._insert_run(self._head, self._next[self._head], blocks)

    def _insert_run(self, before: int, after: int, blocks: Iterable[BlockId]) -> None:
        """Link ``blocks``, in order, between the adjacent nodes ``before`` and ``after``."""
        nxt, prev = self._next, self._prev
        last = before
        added = 0
        for block in blocks:
            nxt[last] = block
            prev[block] = last
            last = block
            added += 1
        nxt[last] = after
        prev[after] = last
        self._length += added
