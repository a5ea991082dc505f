"""The prefixes a pool has already checked, so that a caller appending token after token to one
block pays for the prefix's checks once, not at every call.

A ``Prefix`` is frozen: once it passed ``check_prefix`` for a block size it passes for good. The
entries are keyed by the object's identity and keep the object alive, so an id cannot be reused
by another object while its entry stands; ``entry[0] is prefix`` confirms the match. Each entry
also keeps the encoding of the prefix's extra key, which every hash under it needs. The table is
emptied when it grows past ``limit``: a prompt's prefixes are each passed once, and a caller
between them re-checks its prefix at most once more.
"""

from __future__ import annotations

from pagedkv.specs.content_hash import Prefix, encode_extra_key
from pagedkv.specs.types import ExtraKey
from pagedkv.specs.validation import check_extra_key, check_prefix

LIMIT = 4096


class CheckedPrefixes:
    __slots__ = ("_block_size", "_keys", "entries")

    def __init__(self, block_size: int) -> None:
        self._block_size = block_size
        self.entries: dict[int, tuple[Prefix, bytes]] = {}
        """id(prefix) -> (prefix, its extra key's encoding); read directly by the pool."""
        self._keys: dict[int, tuple[ExtraKey, bytes]] = {}
        """id(extra key) -> (key, its encoding), the same way: a request's prefixes share one."""

    def admit(self, prefix: object) -> bytes:
        """Check ``prefix`` (raising ``check_prefix``'s error) and remember it; the encoding of
        its extra key."""
        key_bytes = self.check(prefix)
        if len(self.entries) >= LIMIT:
            self.entries.clear()
        assert isinstance(prefix, Prefix)
        self.entries[id(prefix)] = (prefix, key_bytes)
        return key_bytes

    def check(self, prefix: object) -> bytes:
        """Check ``prefix`` (raising ``check_prefix``'s error) without remembering it (a prompt's
        prefixes are each passed once); the encoding of its extra key. A prefix of plain fields
        under a key already seen is checked inline."""
        if type(prefix) is not Prefix:
            check_prefix(prefix, self._block_size)  # raises, or passes a subclass
        assert isinstance(prefix, Prefix)
        parent, num_tokens, key = prefix.hash, prefix.num_tokens, prefix.extra_key
        known = self._keys.get(id(key))
        if (
            type(parent) is bytes
            and len(parent) == 32
            and type(num_tokens) is int
            and num_tokens >= 0
            and not num_tokens % self._block_size
            and known is not None
            and known[0] is key
        ):
            return known[1]
        check_prefix(prefix, self._block_size)  # raises, or passes an unusual field
        known = (key, encode_extra_key(check_extra_key(key)))
        if len(self._keys) >= LIMIT:
            self._keys.clear()
        self._keys[id(key)] = known
        return known[1]
