"""A prompt's tokens checked in C loops: a scheduler admits prompts of thousands of tokens, and
asks ``can_allocate`` about each before it allocates it.

``pagedkv.specs.validation.check_tokens`` looks at one token at a time in Python. For a list or
tuple of
plain ints the same verdict comes from passes that run in C: the elements' types are counted
(every one must be ``int`` itself, so a ``bool`` or any other subclass fails), then the tokens are
packed as unsigned 64-bit little-endian integers, which ``struct`` refuses for a value outside
``[0, 2**64)``; a value below ``2**63`` has its last byte (the most significant) below ``0x80``,
so those bytes, taken every eighth, are ASCII exactly when every token is at most ``MAX_TOKEN``.
When this says no, the caller runs ``check_tokens``, which accepts what is fine after all (an int
subclass) or raises its error for the first bad token.

Checked tokens are kept in that encoding (``TOKEN_BYTES`` each): a ``bytes`` is no object for the
garbage collector, where a tuple is one more tracked object per block or sequence.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from operator import countOf

from pagedkv.specs.types import MAX_TOKEN

assert MAX_TOKEN == 2**63 - 1, "the top bit of each packed token is the bound"

TOKEN_BYTES = 8
"""A packed token's size: u64 little-endian, the content hash's encoding."""

_unpackers: dict[int, Callable[[bytes | bytearray], tuple[int, ...]]] = {}


def unpacked(packed: bytes | bytearray) -> tuple[int, ...]:
    """The tokens ``packed_tokens`` packed, as a tuple."""
    count = len(packed) // TOKEN_BYTES
    unpack = _unpackers.get(count)
    if unpack is None:
        unpack = _unpackers[count] = struct.Struct(f"<{count}Q").unpack
    return unpack(packed)


def plain_tokens(tokens: list[object] | tuple[object, ...]) -> bool:
    """Whether every element is an ``int`` (not a subclass) in ``[0, MAX_TOKEN]``."""
    count = len(tokens)
    if countOf(map(type, tokens), int) != count:
        return False
    try:
        packed = struct.pack(f"<{count}Q", *tokens)
    except struct.error:  # a negative token, or one of 2**64 or more
        return False
    return packed[7::8].isascii()


def packed_tokens(
    tokens: Sequence[object], pack: Callable[..., bytes] | None = None
) -> bytes | None:
    """The tokens as the content hash encodes them (u64 little-endian each) when every one is
    an ``int`` in ``[0, MAX_TOKEN]``, else None: one pass in C both checks a block's tokens and
    gives the bytes its hash reads, so they are encoded once. ``pack``: a ``struct.Struct``'s
    ``pack`` for exactly ``len(tokens)`` tokens (``"<nQ"``), kept by a caller that packs blocks
    of one size again and again."""
    count = len(tokens)
    if countOf(map(type, tokens), int) != count:
        return None
    try:
        packed = pack(*tokens) if pack is not None else struct.pack(f"<{count}Q", *tokens)
    except struct.error:  # a negative token, or one of 2**64 or more
        return None
    return packed if packed[7::8].isascii() else None
