"""Each hashed block's parent hash and extra key, kept where the garbage collector does not look.

A pool of a million blocks kept them in two lists of a million entries, and every full
collection visited every entry (a parent hash is a ``bytes`` of its own, so each visit touched
another object). Here the parent hashes are one ``bytearray`` of 32 bytes per block, and the keys
are slots in an ``array``, each naming an entry of a small table of the extra keys in use:
neither is tracked by the collector.

The table is keyed by the key's identity (requests that share an extra key object share its
entry; two equal objects get an entry each and read back equal), and it keeps each key alive
while its entry stands, so an id is never reused by another object while its entry stands.
Entries are not counted as blocks name them and give them up (that bookkeeping was about 5% of
the pool-level serving stream, ``pagedkv.model_tests.bench.pool``): when the table fills up, one
pass over the blocks' slots finds the entries no block names any more and frees them for reuse.
The table so holds the keys in use and a bounded number that no block names (``_purge_at``).
"""

from __future__ import annotations

from array import array

from pagedkv.specs.types import BlockHash, ExtraKey

HASH_SIZE = 32
"""Bytes of a content hash (``pagedkv.specs.validation.check_content_hash``)."""

NO_PREFIX = -1
"""A block's key slot when it has no prefix (it is not hashed)."""

LIMIT = 64
"""The fewest table entries at which a new key looks for entries no block names."""


class BlockPrefixes:
    """``parent`` and ``key`` of each of ``num_blocks`` blocks, by index, or none."""

    __slots__ = ("_free_slots", "_keys", "_parents", "_purge_at", "_slot_of", "_table")

    def __init__(self, num_blocks: int) -> None:
        self._parents = bytearray(HASH_SIZE * num_blocks)
        self._keys = array("q", [NO_PREFIX]) * num_blocks
        self._table: list[ExtraKey | None] = []
        """The extra keys blocks name or named, by slot (None: a slot free for reuse)."""
        self._slot_of: dict[int, int] = {}
        """id(key) -> its slot."""
        self._free_slots: list[int] = []
        self._purge_at = max(LIMIT, num_blocks // LIMIT)
        """The table's size at which a new key frees the entries no block names: at least
        twice the entries in use after the last such pass, and a 64th of the blocks, so that
        the pass (one look at each block) costs O(1) per new key, amortised."""

    def __getstate__(self) -> tuple[bytearray, array[int], list[ExtraKey | None], int]:
        """A copy (``copy.deepcopy``, pickle) without the identities, which a copy's keys do not
        share: ``__setstate__`` finds them again from the table."""
        return self._parents, self._keys, self._table, self._purge_at

    def __setstate__(self, state: tuple[bytearray, array[int], list[ExtraKey | None], int]) -> None:
        self._parents, self._keys, self._table, self._purge_at = state
        self._slot_of = {id(key): slot for slot, key in enumerate(self._table) if key is not None}
        self._free_slots = [slot for slot, key in enumerate(self._table) if key is None]

    def set(self, index: int, parent: BlockHash, key: ExtraKey) -> None:
        """Give block ``index`` its parent hash and extra key (replacing any it had: a caller
        may reuse an evicted block without clearing it first)."""
        slot = self._slot_of.get(id(key))
        if slot is None:
            slot = self._new_slot(key)
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
        for index, parent in zip(indices, parents, strict=True):
            keys[index] = slot
            start = index * HASH_SIZE
            view[start : start + HASH_SIZE] = parent

    def _new_slot(self, key: ExtraKey) -> int:
        if not self._free_slots and len(self._table) >= self._purge_at:
            self._free_unnamed()
        if self._free_slots:
            slot = self._free_slots.pop()
            self._table[slot] = key
        else:
            slot = len(self._table)
            self._table.append(key)
        self._slot_of[id(key)] = slot
        return slot

    def _free_unnamed(self) -> None:
        """Free the entries no block names (their keys are no longer kept alive)."""
        named = set(self._keys)
        for slot, key in enumerate(self._table):
            if key is not None and slot not in named:
                del self._slot_of[id(key)]
                self._table[slot] = None
                self._free_slots.append(slot)
        in_use = len(self._table) - len(self._free_slots)
        self._purge_at = max(LIMIT, len(self._keys) // LIMIT, 2 * in_use)

    def clear(self, index: int) -> None:
        """Block ``index`` has no prefix any more (it may have had none)."""
        self._keys[index] = NO_PREFIX

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
