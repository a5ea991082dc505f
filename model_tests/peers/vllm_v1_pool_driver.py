"""vLLM 0.33.0's real ``BlockPool`` driven the way its ``KVCacheManager`` drives it, as a caller
of the bench's pool-level stream (``pagedkv.model_tests.bench.pool``; the same ``handlers`` as
``pool_drivers.py``'s callers).

A prompt's block hashes are computed by the request (pagedkv's chained hash, as the peer adapter
hands it), its longest cached run looked up (``get_cached_block``, at most ``n - 1`` tokens), the
hits ``touch``ed, the rest ``get_new_blocks``, the full ones ``cache_full_blocks``; a decode
token reaches the pool only when it needs a new block or fills one (the request keeps the
tokens); a free is one ``free_blocks`` of the request's blocks, tail first. The pool is one block
larger than pagedkv's, for the null block it takes at construction.
"""

from __future__ import annotations

from typing import Any

from pagedkv.model_tests.peers import vllm_v1_pool
from pagedkv.specs.content_hash import ROOT, BlockHasher, hasher_for
from pagedkv.specs.types import BlockHash, ExtraKey, Token


class _V1Request:
    """What v1's ``cache_full_blocks`` reads of a request (its block hashes), and what the
    manager keeps per request (its tokens and blocks)."""

    __slots__ = ("block_hashes", "blocks", "hasher", "tokens")

    def __init__(self, tokens: list[Token], block_hashes: list[BlockHash], hasher: BlockHasher):
        self.tokens = tokens
        self.block_hashes = block_hashes
        self.hasher = hasher
        self.blocks: list[Any] = []


GROUPS = [vllm_v1_pool.GROUP]


class VllmV1:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        pool_class = vllm_v1_pool.modules()["vllm.v1.core.block_pool"].BlockPool
        self.pool: Any = pool_class(num_blocks + 1, True, block_size)
        self.size = block_size
        self.requests: dict[int, _V1Request] = {}
        self.handlers = (self.prompt, self.decode, self.free)

    def prompt(self, seq: int, payload: tuple[tuple[Token, ...], ExtraKey]) -> None:
        tokens, key = payload
        pool, size = self.pool, self.size
        hasher = hasher_for(key)
        num_full = len(tokens) // size
        chunks = [tokens[index * size : (index + 1) * size] for index in range(num_full)]
        request = _V1Request(list(tokens), hasher.chain(ROOT, chunks), hasher)
        hits: list[Any] = []
        lookup = pool.get_cached_block
        for content_hash in request.block_hashes[: (len(tokens) - 1) // size]:
            found = lookup(content_hash, GROUPS)
            if found is None:
                break
            hits.append(found[0])
        pool.touch(hits)
        blocks = hits + pool.get_new_blocks(-(-len(tokens) // size) - len(hits))
        request.blocks = blocks
        pool.cache_full_blocks(request, blocks, len(hits), num_full, size, vllm_v1_pool.GROUP)
        self.requests[seq] = request

    def decode(self, seq: int, token: Token) -> None:
        request = self.requests[seq]
        tokens, size = request.tokens, self.size
        if len(tokens) % size == 0:
            request.blocks += self.pool.get_new_blocks(1)
        tokens.append(token)
        if len(tokens) % size:
            return
        hashes = request.block_hashes
        hashes.append(request.hasher(hashes[-1] if hashes else ROOT, tokens[-size:]))
        num_full = len(hashes)
        self.pool.cache_full_blocks(
            request, request.blocks, num_full - 1, num_full, size, vllm_v1_pool.GROUP
        )

    def free(self, seq: int, _: None) -> None:
        self.pool.free_blocks(reversed(self.requests.pop(seq).blocks))
