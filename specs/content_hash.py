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

from pagedkv.specs.types import MAX_TOKEN, BlockHash, ExtraKey, Token

BLOCK_DOMAIN: bytes = b"pagedkv/block/v1\x00"
ROOT: BlockHash = hashlib.sha256(b"pagedkv/root/v1").digest()
"""The parent hash of a sequence's first block."""


def utf8_encodable(text: str) -> bool:
    """Every code point but the surrogates has a UTF-8 encoding. (Said with code points rather
    than by trying ``str.encode``, which CrossHair's symbolic strings run without the error.)"""
    return not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def encodable(extra_key: ExtraKey) -> bool:
    """The keys the encoding is defined for; ``pagedkv.specs.validation.check_extra_key`` admits
    exactly these (its contract says so)."""
    lora, salt = extra_key.lora_id, extra_key.cache_salt
    if lora is not None and (type(lora) is not int or not 0 <= lora <= MAX_TOKEN):
        return False
    return salt is None or (type(salt) is str and utf8_encodable(salt))


def encode_extra_key(extra_key: ExtraKey) -> bytes:
    """``lora``: 0x00, or 0x01 + u64 LE; ``salt``: 0x00, or 0x01 + u32 LE byte length + UTF-8.

    The conditions say the bytes decode back to the key, so two keys never share an encoding.

    pre: encodable(extra_key)
    post: _[0] == (extra_key.lora_id is not None)
    post: extra_key.lora_id is None or int.from_bytes(_[1:9], "little") == extra_key.lora_id
    post: _[8 * _[0] + 1] == (extra_key.cache_salt is not None)
    post: extra_key.cache_salt is not None or len(_) == 2 + 8 * _[0]
    post: extra_key.cache_salt is None or _[8 * _[0] + 6 :].decode() == extra_key.cache_salt
    post: extra_key.cache_salt is None or _[8*_[0]+2:][:4] == (len(_)-6-8*_[0]).to_bytes(4,"little")
    """
    if extra_key.lora_id is None and extra_key.cache_salt is None:  # the common key
        return b"\x00\x00"
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
    """``BLOCK_DOMAIN | parent (32 bytes) | u32 LE count | u64 LE per token | extra key``.

    The conditions decode each field back, so the encoding is injective. (Stated as equality of
    two encodings, CrossHair mis-runs ``struct.pack`` over a symbolic list and reports a spurious
    ``([], [])``; ``test_contracts`` pins that case.)

    pre: len(parent) == 32 and encodable(extra_key)
    pre: all(0 <= token <= MAX_TOKEN for token in tokens) and len(tokens) < 2**32
    post: _[: len(BLOCK_DOMAIN)] == BLOCK_DOMAIN and _[len(BLOCK_DOMAIN) :][:32] == parent
    post: int.from_bytes(_[49:53], "little") == len(tokens)
    post: [int.from_bytes(_[53 + 8 * i :][:8], "little") for i in range(len(tokens))] == [*tokens]
    post: _[53 + 8 * len(tokens) :] == encode_extra_key(extra_key)
    """
    return b"".join(
        (
            BLOCK_DOMAIN,
            parent,
            struct.pack(f"<I{len(tokens)}Q", len(tokens), *tokens),
            encode_extra_key(extra_key),
        )
    )


def packed_block_hash(
    parent: BlockHash, packed_tokens: bytes | bytearray, key_bytes: bytes
) -> BlockHash:
    """``block_hash`` of tokens already packed (u64 little-endian each) under a key already
    encoded (``encode_extra_key``): for a caller that has the bytes at hand, so that a block's
    content is encoded once. The bytes hashed are exactly ``encode_block``'s."""
    count = struct.pack("<I", len(packed_tokens) >> 3)
    return hashlib.sha256(
        b"".join((BLOCK_DOMAIN, parent, count, packed_tokens, key_bytes))
    ).digest()


def packed_chain_hashes(
    parent: BlockHash, packed_tokens: bytes, block_size: int, key_bytes: bytes
) -> list[BlockHash]:
    """``packed_block_hash`` of consecutive full blocks packed end to end (a prompt's blocks,
    packed at once), each after the one before: every block's bytes read once, in place."""
    stride = 8 * block_size
    count = struct.pack("<I", block_size)
    sha256, view = hashlib.sha256, memoryview(packed_tokens)
    hashes: list[BlockHash] = []
    for start in range(0, len(packed_tokens), stride):
        parent = sha256(
            b"".join((BLOCK_DOMAIN, parent, count, view[start : start + stride], key_bytes))
        ).digest()
        hashes.append(parent)
    return hashes


def packed_blocks_chain(
    parent: BlockHash, blocks: Sequence[bytes], key_bytes: bytes
) -> list[BlockHash]:
    """``packed_block_hash`` of consecutive full blocks, each packed on its own (all of one
    length: a prompt's blocks as a pool keeps them), each after the one before."""
    if not blocks:
        return []
    count = struct.pack("<I", len(blocks[0]) >> 3)
    sha256, join = hashlib.sha256, b"".join
    hashes: list[BlockHash] = []
    for packed in blocks:
        parent = sha256(join((BLOCK_DOMAIN, parent, count, packed, key_bytes))).digest()
        hashes.append(parent)
    return hashes


def block_hash(parent: BlockHash, tokens: Sequence[Token], extra_key: ExtraKey) -> BlockHash:
    """
    pre: len(parent) == 32 and encodable(extra_key)
    pre: all(0 <= token <= MAX_TOKEN for token in tokens)
    post: len(_) == 32
    """
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

    def of_packed(self, parent: BlockHash, packed_tokens: bytes | bytearray) -> BlockHash:
        """The same hash of tokens already packed (u64 little-endian each)."""
        return packed_block_hash(parent, packed_tokens, self._key_bytes)

    def chain_of_packed(
        self, parent: BlockHash, packed_tokens: bytes, block_size: int
    ) -> list[BlockHash]:
        """``chain`` of full blocks packed end to end (``packed_chain_hashes``)."""
        return packed_chain_hashes(parent, packed_tokens, block_size, self._key_bytes)

    def chain(self, parent: BlockHash, blocks: Sequence[Sequence[Token]]) -> list[BlockHash]:
        """The hashes of consecutive full blocks (all of one length) after ``parent``: a
        prompt's blocks, hashed in one loop, each after the one before."""
        if not blocks:
            return []
        count = len(blocks[0])
        pack = _count_and_tokens(count).pack
        key, sha256 = self._key_bytes, hashlib.sha256
        hashes: list[BlockHash] = []
        for tokens in blocks:
            parent = sha256(b"".join((BLOCK_DOMAIN, parent, pack(count, *tokens), key))).digest()
            hashes.append(parent)
        return hashes


@lru_cache(maxsize=1024)
def hasher_for(extra_key: ExtraKey) -> BlockHasher:
    """One ``BlockHasher`` per extra key, for a caller hashing the blocks of many sequences."""
    return BlockHasher(extra_key)


_last_hashed: tuple[BlockHash, ExtraKey | None, tuple[Token, ...], BlockHash] = (b"", None, (), b"")
"""The last block hashed through ``remember_block_hash``: (parent, extra key, tokens, hash)."""


def remember_block_hash(
    parent: BlockHash, tokens: tuple[Token, ...], extra_key: ExtraKey, content_hash: BlockHash
) -> None:
    """Note the hash of a block just filled, for ``Prefix.child_hash``: a pool and its caller
    both need the hash of a block that fills (the pool to cache the block, the caller for the
    next block's ``Prefix``), and the second asks for what the first computed, so the block is
    encoded and hashed once. One tuple, replaced whole: a reader sees an entry or the next."""
    global _last_hashed
    _last_hashed = (parent, extra_key, tokens, content_hash)


@dataclass(frozen=True, slots=True)
class Prefix:
    """Where a block sits in its sequence: the hash and length of everything before it.

    Callers pass the prefix of the block they fill; the pool hashes the block as
    ``block_hash(prefix.hash, tokens, prefix.extra_key)``. ``prefix.num_tokens + block_size`` is
    the block's number of hashed tokens, which the eviction order reads (``block_pool.md`` §4).
    """

    hash: BlockHash = ROOT
    num_tokens: int = 0
    extra_key: ExtraKey = field(default_factory=ExtraKey)

    def child_hash(self, tokens: Sequence[Token]) -> BlockHash:
        last = _last_hashed
        if (
            last[0] is self.hash
            and last[1] is self.extra_key
            and last[2] == (tokens if type(tokens) is tuple else tuple(tokens))
        ):
            return last[3]
        return block_hash(self.hash, tokens, self.extra_key)

    def extend(self, tokens: Sequence[Token]) -> Prefix:
        """The prefix of the block after a full block holding ``tokens``.

        pre: len(self.hash) == 32 and encodable(self.extra_key)
        pre: all(0 <= token <= MAX_TOKEN for token in tokens)
        post: _.num_tokens == self.num_tokens + len(tokens) and _.extra_key == self.extra_key
        post: _.hash == block_hash(self.hash, tokens, self.extra_key)
        """
        return Prefix(self.child_hash(tokens), self.num_tokens + len(tokens), self.extra_key)
