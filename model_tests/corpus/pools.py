"""Wrong pools, in one home: the reference pool with one bug each, for the corpus
(``specs/corpus.md``), and the optimized pool with one bug each, for the tests of atomicity and
of reports (``model_tests/tests/test_pool_atomicity.py``, ``test_reports.py``).

Each wrong reference pool breaks one operation of ``specs/block_pool.md`` §5 and nothing else: it
runs the correct operation first (so its checks and errors are the spec's), then makes the
mistake, either through the pool's own operations or, where the mistake is a step left out, by
redoing the operation wrongly from the state before it (the reference's state is a frozen value).
``MirroredPool`` is correct: the reference behind ids numbered the other way round, which only
isomorphic mode accepts. The wrong optimized pools override one private step of the pool; a
target for ``pagedkv check --level pool``:
``pagedkv.model_tests.corpus.pools:CowDropsTheSourceFirst``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pagedkv.optimized.block_pool import OptimizedBlockPool, PrefixParts
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.request_types import BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import NO_EXTRA_KEY, BlockHash, BlockId, CopyPair, PoolConfig, Token


class PoolAllocateLeaksABlock(ReferenceBlockPool):
    """``allocate_mutable`` takes a second block while two or more are free, and forgets it."""

    def allocate_mutable(self, choice: BlockId | None = None) -> BlockId:
        block = super().allocate_mutable(choice)
        if self.num_free_blocks() >= 2:
            super().allocate_mutable()  # held by nobody, freed by nobody
        return block


class PoolHashIgnoresExtraKey(ReferenceBlockPool):
    """``allocate_immutable`` and ``append_tokens`` hash a block without its extra key: one
    tenant's block is found under another's prompt."""

    @staticmethod
    def _keyless(prefix: Any) -> Any:
        return replace(prefix, extra_key=NO_EXTRA_KEY) if isinstance(prefix, Prefix) else prefix

    def allocate_immutable(
        self, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        return super().allocate_immutable(self._keyless(prefix), tokens, choice)

    def append_tokens(
        self, block: BlockId, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        return super().append_tokens(block, self._keyless(prefix), tokens, choice)


class PoolCowKeepsSource(ReferenceBlockPool):
    """``cow_if_not_appendable`` copies a shared block but keeps the caller's reference on the
    source: a block nobody will ever give back."""

    def cow_if_not_appendable(self, block: BlockId, choice: BlockId | None = None) -> BlockId:
        copy = super().cow_if_not_appendable(block, choice)
        if copy != block:
            super().fork([block])  # the reference the copy should have replaced
        return copy


class PoolClearKeepsPairs(ReferenceBlockPool):
    """``clear_copy_on_writes`` returns the pending pairs but keeps them pending: the next batch
    copies them again, over blocks written since."""

    def clear_copy_on_writes(self) -> list[CopyPair]:
        before = self.state
        pairs = super().clear_copy_on_writes()
        self.state = before
        return pairs


class PoolFreeDropsTwoReferences(ReferenceBlockPool):
    """``free`` of a block another holder shares drops that holder's reference too."""

    def free(self, block: BlockId) -> None:
        super().free(block)
        if self.block(block).ref_count >= 1:
            super().free(block)


class PoolFreeBlocksKeepsTheLast(ReferenceBlockPool):
    """``free_blocks`` gives back every block of the list but the last: a sequence's tail block
    is held by nobody and freed by nobody."""

    def free_blocks(self, blocks: Sequence[BlockId]) -> None:
        before = self.state
        super().free_blocks(blocks)  # the checks, and the errors, are the spec's
        self.state = before
        for block in blocks[:-1]:
            self.free(block)


class PoolForkForgetsLastBlock(ReferenceBlockPool):
    """``fork`` shares every block of the chain but the last with the child."""

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        shared = super().fork(chain)
        if shared:
            super().free(shared[-1])  # the reference the child should have added
        return shared


class PoolMarkAccessedSkipsCached(ReferenceBlockPool):
    """``mark_accessed`` stamps the blocks someone holds, not the cached ones nobody holds: those
    keep their old times and are evicted in the wrong order."""

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        before = self.state
        super().mark_accessed(blocks, now)  # the checks, and the errors, are the spec's
        self.state = before
        super().mark_accessed([b for b in blocks if self.block(b).ref_count > 0], now)


class PoolMarkComputedSkipsCached(ReferenceBlockPool):
    """``mark_computed`` marks the blocks someone holds, not the cached ones nobody holds."""

    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        before = self.state
        super().mark_computed(blocks)
        self.state = before
        super().mark_computed([b for b in blocks if self.block(b).ref_count > 0])


class PoolCommonPrefixKeepsLast(ReferenceBlockPool):
    """``common_computed_prefix`` lets each chain's last block count (the spec keeps it out: the
    model must compute at least one token of each sequence)."""

    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
        common = super().common_computed_prefix(chains)
        lists = [list(chain) for chain in chains]
        whole = lists and all(len(c) == len(common) + 1 and c[-1] == lists[0][-1] for c in lists)
        if whole and self.block(lists[0][-1]).computed:
            return [*common, lists[0][-1]]
        return common


class PoolHitRateCountsMisses(ReferenceBlockPool):
    """``hit_rate`` answers the share of lookups that missed."""

    def hit_rate(self) -> float:
        rate = super().hit_rate()
        return rate if rate <= 0.0 else 1.0 - rate


class PoolResetRefusesCachedBlocks(ReferenceBlockPool):
    """``reset_prefix_cache`` refuses while cached blocks wait in the evictor, though nobody
    holds them (only a held block may stop a reset)."""

    def reset_prefix_cache(self) -> bool:
        if self.view().evictable:
            return False
        return super().reset_prefix_cache()


class PoolEvictionSilent(ReferenceBlockPool):
    """Publishes no ``BlockRemoved``: a router keeps sending requests for hashes the pool has
    evicted."""

    def take_events(self) -> list[KVEvent]:
        return [e for e in super().take_events() if not isinstance(e, BlockRemoved)]


class PoolStoresBeforeFull(ReferenceBlockPool):
    """``append_tokens`` that leaves its block partial publishes a ``BlockStored`` for it (the
    hash of the tokens so far), before the block is full and cached."""

    def append_tokens(
        self, block: BlockId, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        held = super().append_tokens(block, prefix, tokens, choice)
        partial = self.block(held).tokens
        if self.config.enable_caching and 0 < len(partial) < self.config.block_size:
            parent = None if prefix.num_tokens == 0 else prefix.hash
            lora = prefix.extra_key.lora_id
            size = self.config.block_size
            stored = BlockStored((prefix.child_hash(partial),), parent, partial, size, lora, 0)
            self._events = [*self._events, stored]
        return held


class PoolStoresWithoutCaching(ReferenceBlockPool):
    """With prefix caching off, ``allocate_immutable`` still publishes a ``BlockStored``: the
    hash is never committed to the index, so no request can hit it."""

    def allocate_immutable(
        self, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        block = super().allocate_immutable(prefix, tokens, choice)
        if not self.config.enable_caching:
            parent = None if prefix.num_tokens == 0 else prefix.hash
            lora = prefix.extra_key.lora_id
            full = tuple(tokens)
            size = self.config.block_size
            stored = BlockStored((prefix.child_hash(full),), parent, full, size, lora, 0)
            self._events = [*self._events, stored]
        return block


class PoolStoredWithoutParent(ReferenceBlockPool):
    """Every ``BlockStored`` names no parent, as if each block began a sequence: a router files
    a chain's later blocks at its root."""

    def take_events(self) -> list[KVEvent]:
        return [
            replace(e, parent_hash=None) if isinstance(e, BlockStored) else e
            for e in super().take_events()
        ]


class MirroredPool:
    """The reference pool behind ids numbered the other way round: a correct pool whose ids
    differ from the reference's, so only isomorphic mode accepts it."""

    def __init__(self, config: PoolConfig) -> None:
        self.inner = ReferenceBlockPool(config)
        self.config = config

    def _flip(self, block: Any) -> Any:
        ids = self.config.block_ids
        if isinstance(block, int) and not isinstance(block, bool) and block in ids:
            return ids.start + ids.stop - 1 - block
        return block

    def _flips(self, blocks: Any) -> Any:
        return [self._flip(b) for b in blocks] if isinstance(blocks, list | tuple) else blocks

    def allocate_mutable(self) -> BlockId:
        return int(self._flip(self.inner.allocate_mutable()))

    def allocate_immutable(self, prefix: Prefix, tokens: Sequence[int]) -> BlockId:
        return int(self._flip(self.inner.allocate_immutable(prefix, tokens)))

    def append_tokens(self, block: BlockId, prefix: Prefix, tokens: Sequence[int]) -> BlockId:
        return int(self._flip(self.inner.append_tokens(self._flip(block), prefix, tokens)))

    def cow_if_not_appendable(self, block: BlockId) -> BlockId:
        return int(self._flip(self.inner.cow_if_not_appendable(self._flip(block))))

    def free(self, block: BlockId) -> None:
        self.inner.free(self._flip(block))

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        return list(self._flips(self.inner.fork(self._flips(chain))))

    def clear_copy_on_writes(self) -> list[tuple[BlockId, BlockId]]:
        return [(self._flip(s), self._flip(d)) for s, d in self.inner.clear_copy_on_writes()]

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        self.inner.mark_accessed(self._flips(blocks), now)

    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        self.inner.mark_computed(self._flips(blocks))

    def common_computed_prefix(self, chains: Any) -> list[BlockId]:
        flipped = [self._flips(c) for c in chains] if isinstance(chains, list) else chains
        return list(self._flips(self.inner.common_computed_prefix(flipped)))

    def num_free_blocks(self) -> int:
        return self.inner.num_free_blocks()

    def hit_rate(self) -> float:
        return self.inner.hit_rate()

    def reset_prefix_cache(self) -> bool:
        return self.inner.reset_prefix_cache()


class MirroredPoolMissingOneFree(MirroredPool):
    """Broken: the free count forgets one block once the pool is more than half used."""

    def num_free_blocks(self) -> int:
        free = super().num_free_blocks()
        return free - 1 if 0 < free < self.config.num_blocks / 2 else free


WRONG_POOLS: tuple[type[Any], ...] = (
    PoolAllocateLeaksABlock,
    PoolHashIgnoresExtraKey,
    PoolCowKeepsSource,
    PoolClearKeepsPairs,
    PoolFreeDropsTwoReferences,
    PoolForkForgetsLastBlock,
    PoolMarkAccessedSkipsCached,
    PoolMarkComputedSkipsCached,
    PoolCommonPrefixKeepsLast,
    PoolHitRateCountsMisses,
    PoolResetRefusesCachedBlocks,
    MirroredPoolMissingOneFree,
)


# --- wrong optimized pools: fixtures of the atomicity and report tests --------------------------


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
        self, prefix: PrefixParts, tokens: bytes, content_hash: BlockHash | None
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
        tokens: bytes,
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
