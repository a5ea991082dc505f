"""The chained content hash of full blocks, and the canonical byte encoding it hashes.

A block's hash is ``SHA-256(encode(parent_hash, tokens, extra_key))`` where ``parent_hash`` is the
hash of the block before it in its sequence, or ``ROOT`` for the first block. Because the parent is
part of the input, equal hashes mean equal whole prefixes, not merely equal blocks. The encoding is
fixed byte for byte (see ``specs/block_pool.md``, "Content hash") so that every process and every
language computes the same hashes; traces depend on it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from specs.types import BlockHash, ExtraKey, Token

BLOCK_DOMAIN: bytes = b"pagedkv/block/v1\x00"
ROOT: BlockHash = hashlib.sha256(b"pagedkv/root/v1").digest()
"""The parent hash of a sequence's first block."""


def encode_extra_key(extra_key: ExtraKey) -> bytes:
    """``lora``: 0x00, or 0x01 + u64 LE; ``salt``: 0x00, or 0x01 + u32 LE byte length + UTF-8."""
    out = bytearray()
    if extra_key.lora_id is None:
        out += b"\x00"
    else:
        out += b"\x01" + struct.pack("<Q", extra_key.lora_id)
    if extra_key.cache_salt is None:
        out += b"\x00"
    else:
        salt = extra_key.cache_salt.encode("utf-8")
        out += b"\x01" + struct.pack("<I", len(salt)) + salt
    return bytes(out)


def encode_block(parent: BlockHash, tokens: Sequence[Token], extra_key: ExtraKey) -> bytes:
    """``BLOCK_DOMAIN | parent (32 bytes) | u32 LE count | u64 LE per token | extra key``."""
    return b"".join(
        (
            BLOCK_DOMAIN,
            parent,
            struct.pack(f"<I{len(tokens)}Q", len(tokens), *tokens),
            encode_extra_key(extra_key),
        )
    )


def block_hash(parent: BlockHash, tokens: Sequence[Token], extra_key: ExtraKey) -> BlockHash:
    return hashlib.sha256(encode_block(parent, tokens, extra_key)).digest()


@lru_cache(maxsize=64)
def _count_and_tokens(num_tokens: int) -> struct.Struct:
    return struct.Struct(f"<I{num_tokens}Q")


class BlockHasher:
    """``block_hash`` for the blocks of one extra key, with the key's encoding and the token
    layout prepared once: a block table hashing block after block of one sequence calls this.
    The bytes hashed are exactly ``encode_block``'s."""

    __slots__ = ("_key_bytes",)

    def __init__(self, extra_key: ExtraKey) -> None:
        self._key_bytes = encode_extra_key(extra_key)

    def __call__(self, parent: BlockHash, tokens: Sequence[Token]) -> BlockHash:
        count = len(tokens)
        body = _count_and_tokens(count).pack(count, *tokens)
        return hashlib.sha256(b"".join((BLOCK_DOMAIN, parent, body, self._key_bytes))).digest()


@dataclass(frozen=True, slots=True)
class Prefix:
    """Where a block sits in its sequence: the hash and length of everything before it.

    Callers pass the prefix of the block they fill; the pool hashes the block as
    ``block_hash(prefix.hash, tokens, prefix.extra_key)``. ``prefix.num_tokens + block_size`` is
    the block's number of hashed tokens, which breaks eviction ties (a chain's tail goes first).
    """

    hash: BlockHash = ROOT
    num_tokens: int = 0
    extra_key: ExtraKey = field(default_factory=ExtraKey)

    def child_hash(self, tokens: Sequence[Token]) -> BlockHash:
        return block_hash(self.hash, tokens, self.extra_key)

    def extend(self, tokens: Sequence[Token]) -> Prefix:
        """The prefix of the block after a full block holding ``tokens``."""
        return Prefix(self.child_hash(tokens), self.num_tokens + len(tokens), self.extra_key)
