"""Deliberately broken block pools: fixtures for what the oracle must say about a pool.

Each is the optimized pool with one bug (the independent implementations import only
``specs``, so these live with the tests). A target for ``pagedkv check --level pool``:
``pagedkv.model_tests.tests.broken_pools:CowDropsTheSourceFirst``.
"""

from __future__ import annotations

from pagedkv.optimized.block_pool import OptimizedBlockPool, PrefixParts
from pagedkv.specs.types import BlockHash, BlockId, Token


class CowDropsTheSourceFirst(OptimizedBlockPool):
    """Copy-on-write lets go of the shared block before it takes the copy: when no block is left
    for the copy, the call raises ``OutOfBlocksError`` with the caller's reference already gone.
    The free count does not change (the block stays held by its other holder); its ref count
    does, and the damage shows calls later, as a double free or a block freed under a holder."""

    atomic = True
    """What it claims (the optimized pool is atomic): the safety tier holds it to that."""

    def _copy_if_shared(self, block: BlockId) -> BlockId:
        index = block - self._first_id
        if self._ref_counts[index] == 1:
            return block
        self._release(block)  # the bug: before the copy is sure to exist
        copy = self._take_block()
        self._tokens[copy - self._first_id] = self._tokens[index]
        self._record_copy(block, copy)
        return copy


class RecordsTheHashFirst(OptimizedBlockPool):
    """An ``allocate_immutable`` that misses records its hash before it takes a block: when no
    block is left, it raises with the hash already pointing at a block that holds other data.
    Neither the free count nor any held block changes; the hash lookup does."""

    atomic = True

    def take_full(
        self, prefix: PrefixParts, tokens: tuple[Token, ...], content_hash: BlockHash | None
    ) -> BlockId:
        full = not self.num_free  # no free or evictable block: it will raise
        if content_hash is not None and content_hash not in self._cached and full:
            self._cached[content_hash] = self._first_id  # the bug: before the block is sure
            self._take_block()  # raises OutOfBlocksError, the hash left behind
        return super().take_full(prefix, tokens, content_hash)


class KeepsItsBlockWhenFilled(OptimizedBlockPool):
    """A block that fills with content already cached in another block stays the caller's (no
    dedup onto the cached block): under the ``pagedkv`` profile, a different block answered."""

    def fill(
        self,
        block: BlockId,
        prefix: PrefixParts | None,
        tokens: tuple[Token, ...],
        content_hash: BlockHash | None,
    ) -> BlockId:
        if content_hash is not None and content_hash in self._cached:
            content_hash = None  # the bug: neither dedup nor caching
        return super().fill(block, prefix, tokens, content_hash)


class AssertsItNeverCopies(OptimizedBlockPool):
    """Copy-on-write was left out: appending to a shared block trips a bare ``assert`` deep in
    the pool, as an engine's internal check does (a ``AssertionError()`` with no message)."""

    def _copy_if_shared(self, block: BlockId) -> BlockId:
        assert self._ref_counts[block - self._first_id] == 1
        return block
