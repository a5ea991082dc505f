"""A request's block hashes: the chained content hash of each of its full blocks, with the
request's keys (``specs/request_level.md``, "Hashes").

As in vLLM v1 (``Request.block_hashes``) the hashes are the caller's side: a function of the
request alone, the same in every implementation. A block is hashed as at the pool level
(``specs/content_hash.py``) with the request's LoRA id and cache salt; a block that overlaps a
multimodal input is also keyed by its identifiers, each with where the input starts relative to
the block (``cat@-3``: it began 3 tokens before the block): the same placeholder tokens with the
image 1 token later hold other KV, so they must not share a block (vLLM keys them
``("mm", identifier, offset - start)`` alike). ``@`` then an int is read from the right, so
the pair is recovered from any identifier. Their bytes follow ``encode_block``'s, and
only when there are some: ``0x01 | u32 LE count | (u32 LE length | UTF-8)*``. ``encode_block``'s
bytes end where its extra key ends (the salt carries its length), so a parse reads them exactly
and anything after them is the identifiers: the encoding stays injective, and a block without
identifiers hashes exactly as at the pool level.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from pagedkv.specs.content_hash import ROOT, encode_block
from pagedkv.specs.request_types import MultimodalInput, Request
from pagedkv.specs.types import BlockHash, ExtraKey, Token


def block_identifiers(
    multimodal: Sequence[MultimodalInput], start: int, end: int
) -> tuple[str, ...]:
    """The identifiers of the inputs that overlap tokens ``start .. end - 1``, in input order,
    each with its offset relative to ``start``."""
    return tuple(
        f"{item.identifier}@{item.offset - start}"
        for item in multimodal
        if item.offset < end and start < item.offset + item.length
    )


def encode_identifiers(identifiers: Sequence[str]) -> bytes:
    if not identifiers:
        return b""
    parts = [b"\x01", struct.pack("<I", len(identifiers))]
    for identifier in identifiers:
        data = identifier.encode("utf-8")
        parts += [struct.pack("<I", len(data)), data]
    return b"".join(parts)


def request_block_hash(
    parent: BlockHash, tokens: Sequence[Token], extra_key: ExtraKey, identifiers: Sequence[str]
) -> BlockHash:
    body = encode_block(parent, tokens, extra_key) + encode_identifiers(identifiers)
    return hashlib.sha256(body).digest()


def request_block_hashes(request: Request, block_size: int) -> list[BlockHash]:
    """One hash per full block of ``request.tokens`` (committed tokens only), each chained on
    the one before, the first on ``ROOT``."""
    hashes: list[BlockHash] = []
    parent = ROOT
    for start in range(0, request.num_tokens - block_size + 1, block_size):
        end = start + block_size
        identifiers = block_identifiers(request.multimodal, start, end)
        parent = request_block_hash(
            parent, request.tokens[start:end], request.extra_key, identifiers
        )
        hashes.append(parent)
    return hashes
