"""The callers a pool-level stream (``pool_stream.py``) is replayed through: each owns its
sequences' tokens and block lists and drives one pool as its own engine would.

- ``PagedkvPublic``: pagedkv's ``BlockPool`` protocol, every call validated, driven the way vLLM
  v1's manager drives its pool: a prompt's full blocks are one ``allocate_immutable_chain`` (as
  v1 takes them in ``get_new_blocks`` and ``cache_full_blocks``) and its tail an
  ``append_tokens``; a decode token takes an ``allocate_mutable`` when the last block is full,
  and the sequence keeps its decode tokens until they fill the block, then hands the pool their
  run in one ``append_tokens`` (which takes any run that fits): the same work as v1's caller,
  which is called only then too. A free is one ``free_blocks``, tail first (v1's
  ``free_blocks``). The caller builds each block's ``Prefix`` as it goes (after a prompt's
  chain, from the last block's hash, which the pool computed).
- ``PagedkvPerToken``: the single calls, one ``allocate_immutable`` per prompt block, one
  ``append_tokens`` per decode token (as vLLM 0.6.3's manager appends to its pool) and one
  ``free`` per block.
- ``PagedkvCore``: the optimized pool's trusted core, the way the optimized manager drives it
  (hashes computed once by the caller, a prompt in one ``take_full_blocks``).

vLLM v1's caller, the third, is a peer's (``pagedkv.model_tests.peers.vllm_v1_pool_driver``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol

from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.block_table import packed
from pagedkv.optimized.tokens import TOKEN_BYTES
from pagedkv.specs.content_hash import ROOT, BlockHasher, Prefix, hasher_for
from pagedkv.specs.types import BlockHash, BlockId, ExtraKey, PoolConfig, Token


class Driver(Protocol):
    """One caller over one pool; ``handlers`` answer the events by kind (``pool_stream``)."""

    @property
    def handlers(self) -> tuple[Callable[[int, Any], None], ...]: ...


class _PagedkvSequence:
    __slots__ = ("blocks", "pooled", "prefix", "tokens")

    def __init__(self, blocks: list[BlockId], tokens: list[Token], prefix: Prefix) -> None:
        self.blocks = blocks
        self.tokens = tokens
        self.pooled = len(tokens)
        """How many of the tokens the pool holds (the rest wait for their block to fill)."""
        self.prefix = prefix
        """The prefix of the last block (the one a decode token goes to while it has room)."""


class PagedkvPublic:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        config = PoolConfig(num_blocks=num_blocks, block_size=block_size, enable_caching=True)
        self.pool = OptimizedBlockPool(config, publish_events=False)  # nobody reads them
        self.size = block_size
        self.seqs: dict[int, _PagedkvSequence] = {}
        self.handlers = (self.prompt, self.decode, self.free)

    def prompt(self, seq: int, payload: tuple[tuple[Token, ...], ExtraKey]) -> None:
        tokens, key = payload
        pool, size = self.pool, self.size
        prefix = Prefix(ROOT, 0, key)
        full = len(tokens) // size * size
        chunks = [tokens[start : start + size] for start in range(0, full, size)]
        blocks = pool.allocate_immutable_chain(prefix, chunks)
        if chunks:
            last_hash = pool.block(blocks[-1]).content_hash
            assert last_hash is not None
            prefix = Prefix(last_hash, full, key)
        if full < len(tokens):
            blocks.append(pool.append_tokens(pool.allocate_mutable(), prefix, tokens[full:]))
        self.seqs[seq] = _PagedkvSequence(blocks, list(tokens), prefix)

    def decode(self, seq: int, token: Token) -> None:
        """The pool is called when the token needs a new block, and when it fills one (the
        block's run of decode tokens in one ``append_tokens``)."""
        state = self.seqs[seq]
        tokens, size = state.tokens, self.size
        if len(tokens) % size == 0:
            state.blocks.append(self.pool.allocate_mutable())
        tokens.append(token)
        if len(tokens) % size:
            return
        blocks, run = state.blocks, tokens[state.pooled :]
        blocks[-1] = self.pool.append_tokens(blocks[-1], state.prefix, run)
        state.pooled = len(tokens)
        state.prefix = state.prefix.extend(tokens[-size:])

    def free(self, seq: int, _: None) -> None:
        self.pool.free_blocks(self.seqs.pop(seq).blocks[::-1])


class PagedkvPerToken(PagedkvPublic):
    def decode(self, seq: int, token: Token) -> None:
        """Every token in its own ``append_tokens``."""
        state = self.seqs[seq]
        tokens, blocks, size = state.tokens, state.blocks, self.size
        if len(tokens) % size == 0:
            blocks.append(self.pool.allocate_mutable())
        tokens.append(token)
        blocks[-1] = self.pool.append_tokens(blocks[-1], state.prefix, (token,))
        state.pooled = len(tokens)
        if len(tokens) % size == 0:
            state.prefix = state.prefix.extend(tokens[-size:])

    def prompt(self, seq: int, payload: tuple[tuple[Token, ...], ExtraKey]) -> None:
        tokens, key = payload
        pool, size = self.pool, self.size
        prefix = Prefix(ROOT, 0, key)
        blocks: list[BlockId] = []
        full = len(tokens) // size * size
        for start in range(0, full, size):
            chunk = tokens[start : start + size]
            blocks.append(pool.allocate_immutable(prefix, chunk))
            prefix = prefix.extend(chunk)
        if full < len(tokens):
            blocks.append(pool.append_tokens(pool.allocate_mutable(), prefix, tokens[full:]))
        self.seqs[seq] = _PagedkvSequence(blocks, list(tokens), prefix)

    def free(self, seq: int, _: None) -> None:
        free = self.pool.free
        for block in reversed(self.seqs.pop(seq).blocks):
            free(block)


class _CoreSequence:
    __slots__ = ("blocks", "hasher", "key", "parent", "tokens")

    def __init__(
        self,
        blocks: list[BlockId],
        tokens: list[Token],
        parent: BlockHash,
        key: ExtraKey,
        hasher: BlockHasher,
    ) -> None:
        self.blocks = blocks
        self.tokens = tokens
        self.parent = parent
        """The hash of the last full block (``ROOT`` before the first)."""
        self.key = key
        self.hasher = hasher


_pack_one = struct.Struct("<Q").pack


class PagedkvCore:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        config = PoolConfig(num_blocks=num_blocks, block_size=block_size, enable_caching=True)
        self.pool = OptimizedBlockPool(config, publish_events=False)  # nobody reads them
        self.size = block_size
        self.seqs: dict[int, _CoreSequence] = {}
        self.handlers = (self.prompt, self.decode, self.free)

    def prompt(self, seq: int, payload: tuple[tuple[Token, ...], ExtraKey]) -> None:
        tokens, key = payload
        pool, size = self.pool, self.size
        hasher = hasher_for(key)
        data, step = packed(tokens), size * TOKEN_BYTES  # the core takes tokens packed
        full = len(data) // step * step
        chunks = [data[start : start + step] for start in range(0, full, step)]
        hashes = hasher.chain_of_packed(ROOT, data[:full], size)
        blocks = pool.take_full_blocks(chunks, hashes, key)
        if full < len(data):
            block = pool.take()
            pool.append_in_place(block, data[full:])
            blocks.append(block)
        parent = hashes[-1] if hashes else ROOT
        self.seqs[seq] = _CoreSequence(blocks, list(tokens), parent, key, hasher)

    def decode(self, seq: int, token: Token) -> None:
        state = self.seqs[seq]
        tokens, blocks, size, pool = state.tokens, state.blocks, self.size, self.pool
        if len(tokens) % size == 0:
            blocks.append(pool.take())
        tokens.append(token)
        one = _pack_one(token)
        if len(tokens) % size:
            if not pool.append_in_place(blocks[-1], one):
                blocks[-1] = pool.fill(blocks[-1], None, one, None)
            return
        content_hash = state.hasher(state.parent, tokens[-size:])
        prefix = (state.parent, len(tokens) - size, state.key)
        blocks[-1] = pool.fill(blocks[-1], prefix, one, content_hash)
        state.parent = content_hash

    def free(self, seq: int, _: None) -> None:
        release = self.pool.release
        for block in reversed(self.seqs.pop(seq).blocks):
            release(block)


DRIVERS: dict[str, Callable[[int, int], Driver]] = {
    "pagedkv public API": PagedkvPublic,
    "pagedkv public API, a call per token": PagedkvPerToken,
    "pagedkv core": PagedkvCore,
}
"""Each of pagedkv's callers by the name the bench prints."""
