"""Each hashed block's parent hash and extra key, kept where the garbage collector does not look.

A pool of a million blocks kept them in two lists of a million entries, and every full
collection visited every entry (a parent hash is a ``bytes`` of its own, so each visit touched
another object). Here the parent hashes are one ``bytearray`` of 32 bytes per block, and the keys
are slots in an ``array``, each naming an entry of a small table of the extra keys in use:
neither is tracked by the collector, and the table holds one entry per key object that some
hashed block names.

The table is keyed by the key's identity (requests that share an extra key object share its
entry; two equal objects get an entry each and read back equal), and it keeps each key alive
while a block names it, so an id is never reused by another object while its entry stands. An
entry is dropped when the last block naming it is cleared.
"""

from __future__ import annotations

from array import array

from pagedkv.specs.types import BlockHash, ExtraKey

HASH_SIZE = 32
"""Bytes of a content hash (``pagedkv.specs.validation.check_content_hash``)."""

NO_PREFIX = -1
"""A block's key slot when it has no prefix (it is not hashed)."""


class BlockPrefixes:
    """``parent`` and ``key`` of each of ``num_blocks`` blocks, by index, or none."""

    __slots__ = ("_free_slots", "_keys", "_parents", "_slot_of", "_table", "_uses")

    def __init__(self, num_blocks: int) -> None:
        self._parents = bytearray(HASH_SIZE * num_blocks)
        self._keys = array("q", [NO_PREFIX]) * num_blocks
        self._table: list[ExtraKey | None] = []
        """The extra keys blocks name, by slot (None: a slot free for reuse)."""
        self._slot_of: dict[int, int] = {}
        """id(key) -> its slot."""
        self._uses: list[int] = []
        """How many blocks name each slot."""
        self._free_slots: list[int] = []

    def __getstate__(self) -> tuple[bytearray, array[int], list[ExtraKey | None], list[int]]:
        """A copy (``copy.deepcopy``, pickle) without the identities, which a copy's keys do not
        share: ``__setstate__`` finds them again from the table."""
        return self._parents, self._keys, self._table, self._uses

    def __setstate__(
        self, state: tuple[bytearray, array[int], list[ExtraKey | None], list[int]]
    ) -> None:
        self._parents, self._keys, self._table, self._uses = state
        self._slot_of = {id(key): slot for slot, key in enumerate(self._table) if key is not None}
        self._free_slots = [slot for slot, key in enumerate(self._table) if key is None]

    def set(self, index: int, parent: BlockHash, key: ExtraKey) -> None:
        """Give block ``index`` its parent hash and extra key (replacing any it had: a caller
        may reuse an evicted block without clearing it first)."""
        slot = self._slot_of.get(id(key))
        if slot is None:
            slot = self._new_slot(key)
        self._uses[slot] += 1
        if self._keys[index] != NO_PREFIX:
            self.clear(index)
        self._keys[index] = slot
        start = index * HASH_SIZE
        self._parents[start : start + HASH_SIZE] = parent

    def set_all(self, indices: list[int], parents: list[BlockHash], key: ExtraKey) -> None:
        """``set`` of each block ``indices[i]`` with ``parents[i]``, all under ``key`` (a
        prompt's blocks taken together): the key's slot found once."""
        slot = self._slot_of.get(id(key))
        if slot is None:
            slot = self._new_slot(key)
        keys, view = self._keys, self._parents
        kept = 0  # blocks that named this slot already (evicted ones of the key): their use stays
        self._uses[slot] += len(indices)  # before any clear: a clear may not free this slot
        for index, parent in zip(indices, parents, strict=True):
            old = keys[index]
            if old == slot:
                kept += 1
            else:
                if old != NO_PREFIX:
                    self.clear(index)
                keys[index] = slot
            start = index * HASH_SIZE
            view[start : start + HASH_SIZE] = parent
        self._uses[slot] -= kept

    def _new_slot(self, key: ExtraKey) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
            self._table[slot] = key
        else:
            slot = len(self._table)
            self._table.append(key)
            self._uses.append(0)
        self._slot_of[id(key)] = slot
        return slot

    def clear(self, index: int) -> None:
        """Block ``index`` has no prefix any more (it may have had none)."""
        slot = self._keys[index]
        if slot == NO_PREFIX:
            return
        self._keys[index] = NO_PREFIX
        uses = self._uses[slot] - 1
        self._uses[slot] = uses
        if not uses:
            del self._slot_of[id(self._table[slot])]
            self._table[slot] = None
            self._free_slots.append(slot)

    def get(self, index: int) -> tuple[BlockHash, ExtraKey] | None:
        """Block ``index``'s parent hash and extra key, or None without a prefix."""
        slot = self._keys[index]
        if slot == NO_PREFIX:
            return None
        key = self._table[slot]
        assert key is not None
        start = index * HASH_SIZE
        return bytes(self._parents[start : start + HASH_SIZE]), key

    def fingerprint(self) -> tuple[bytes, bytes, list[ExtraKey | None]]:
        """What ``columns`` reads, copied at C speed (``OptimizedBlockPool.fingerprint``)."""
        return bytes(self._parents), self._keys.tobytes(), self._table.copy()

    def columns(self) -> tuple[list[BlockHash | None], list[ExtraKey | None]]:
        """Every block's parent hash and extra key (None and None without a prefix), as lists."""
        parents: list[BlockHash | None] = [None] * len(self._keys)
        keys: list[ExtraKey | None] = [None] * len(self._keys)
        view, table = self._parents, self._table
        for index, slot in enumerate(self._keys):
            if slot != NO_PREFIX:
                start = index * HASH_SIZE
                parents[index] = bytes(view[start : start + HASH_SIZE])
                keys[index] = table[slot]
        return parents, keys


def columns_of(
    fingerprint: tuple[bytes, bytes, list[ExtraKey | None]],
) -> tuple[list[BlockHash | None], list[ExtraKey | None]]:
    """``BlockPrefixes.columns`` as it was when ``fingerprint`` was taken
    (``OptimizedBlockPool.compact_of``)."""
    view, slots, table = fingerprint
    found = array("q", slots)
    parents: list[BlockHash | None] = [None] * len(found)
    keys: list[ExtraKey | None] = [None] * len(found)
    for index, slot in enumerate(found):
        if slot != NO_PREFIX:
            start = index * HASH_SIZE
            parents[index] = bytes(view[start : start + HASH_SIZE])
            keys[index] = table[slot]
    return parents, keys
