"""A request's block hashes, kept between calls and extended only by its new full blocks
(``specs/request_level.md``, "Hashes").

A decode step adds one token to a request of thousands; hashing the whole request again on every
call would cost more than the rest of ``allocate_slots`` together. The hashes are a function of
the tokens, the extra key and the multimodal inputs alone, so they stay valid exactly as long as
those are unchanged up to the last hashed block: that is what ``update`` checks before it extends
them, and when it fails (the same id came back with other tokens, say) it hashes the request
afresh. The check asks whether the request's tuple starts with the very objects seen before
(``same_objects``): a scheduler that builds each step's tokens from the last step's shares
them, so it is one memory comparison. Tokens equal in value but made anew are compared and
their types checked, since ``100.0 == 100``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from operator import is_

from pagedkv.optimized.same_objects import starts_with_same_objects
from pagedkv.specs.content_hash import ROOT, BlockHasher
from pagedkv.specs.request_hashes import block_identifiers, request_block_hash
from pagedkv.specs.request_types import MultimodalInput, Request
from pagedkv.specs.types import BlockHash, ExtraKey, Token

_is_int = partial(is_, int)
"""``_is_int(type(token))``: the token an exact int (``map``-able)."""


class IncrementalBlockHashes:
    """``specs.request_hashes.request_block_hashes(request, block_size)``, remembered.

    ``hashes`` is that list for the request last passed to ``update`` (or the constructor).
    ``unchanged`` says how many leading tokens of a request are the ones seen before, so a
    caller checks only the tokens after them. With ``hashing`` off (a manager that caches
    nothing) only the tokens are kept and ``hashes`` stays empty.
    """

    __slots__ = (
        "_block_size",
        "_extra_key",
        "_hasher",
        "_hashing",
        "_multimodal",
        "_tokens",
        "hashes",
    )

    def __init__(self, request: Request, block_size: int, *, hashing: bool = True) -> None:
        self._block_size = block_size
        self._hashing = hashing
        self._tokens: tuple[Token, ...] = ()
        self._extra_key: ExtraKey = request.extra_key
        self._multimodal: tuple[MultimodalInput, ...] = request.multimodal
        self._hasher = BlockHasher(request.extra_key)
        self.hashes: list[BlockHash] = []
        self._extend(request.tokens)

    def unchanged(self, request: Request) -> int:
        """How many leading tokens of ``request`` are the ones seen last, under the same keys
        (0 when its keys differ, or its tokens differ from the seen ones anywhere)."""
        extra_key, multimodal = request.extra_key, request.multimodal
        if not (
            (extra_key is self._extra_key or extra_key == self._extra_key)
            and (multimodal is self._multimodal or multimodal == self._multimodal)
        ):
            return 0
        tokens = request.tokens
        seen = self._tokens
        if tokens is seen:
            return len(seen)
        if type(tokens) is not tuple:
            return 0
        if starts_with_same_objects(tokens, seen):  # the very ints checked before
            return len(seen)
        prefix = tokens[: len(seen)]
        if prefix == seen and all(map(_is_int, map(type, prefix))):
            return len(seen)  # equal ints made anew; equal in value alone is not enough
        return 0

    def _same_keys(self, request: Request) -> bool:
        extra_key, multimodal = request.extra_key, request.multimodal
        return (extra_key is self._extra_key or extra_key == self._extra_key) and (
            multimodal is self._multimodal or multimodal == self._multimodal
        )

    def update(self, request: Request, unchanged: int) -> list[BlockHash]:
        """The hashes of ``request``, whose first ``unchanged`` tokens (from ``unchanged``) are
        the ones seen last: the kept hashes extended by its new full blocks, or, when fewer
        tokens than seen are unchanged, all of them afresh."""
        tokens = request.tokens
        if tokens is self._tokens and self._same_keys(request):
            return self.hashes  # updated for this very request already
        if unchanged < len(self._tokens):
            self._extra_key = request.extra_key
            self._multimodal = request.multimodal
            self._hasher = BlockHasher(request.extra_key)
            self.hashes = []
        elif type(tokens) is tuple and (
            not self._hashing or len(tokens) < (len(self.hashes) + 1) * self._block_size
        ):  # a decode step, mostly: no new full block, so only the tokens are kept
            self._tokens = tokens
            return self.hashes
        self._extend(tokens)
        return self.hashes

    def _extend(self, tokens: Sequence[Token]) -> None:
        self._tokens = tokens if type(tokens) is tuple else tuple(tokens)
        if not self._hashing:
            return
        size = self._block_size
        hashes = self.hashes
        start = len(hashes) * size
        if start + size <= len(tokens):
            parent = hashes[-1] if hashes else ROOT
            for begin in range(start, len(tokens) - size + 1, size):
                end = begin + size
                parent = self._hash(parent, tokens[begin:end], begin, end)
                hashes.append(parent)

    def _hash(self, parent: BlockHash, block: Sequence[Token], begin: int, end: int) -> BlockHash:
        """A block without multimodal identifiers hashes as at the pool level (the bytes of
        ``specs.request_hashes`` add nothing then), so the prepared hasher serves it."""
        if self._multimodal:
            identifiers = block_identifiers(self._multimodal, begin, end)
            if identifiers:
                return request_block_hash(parent, block, self._extra_key, identifiers)
        return self._hasher(parent, block)
