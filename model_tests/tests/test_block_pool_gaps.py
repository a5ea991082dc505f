"""Small scenarios for the reference pool's rarer branches (``reference/block_pool.py``): a
shared cached block given back by one holder, a promoted block freed before the mark, chains
that part and meet again. The machines run pagedkv's own policy and build chains from tables, so
a change to these lines went unseen (gaps found by ``make mutate``, ``specs/mutation.md``)."""

from __future__ import annotations

import pytest

from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.block_table import packed
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.interface import BlockPoolFactory
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.types import NO_EXTRA_KEY, PoolConfig

ROOT = Prefix()


def reference(policy: dict[str, str], num_blocks: int = 4) -> ReferenceBlockPool:
    """A caching reference pool of one-token blocks under pagedkv's policy with ``policy``'s
    options overridden."""
    return ReferenceBlockPool(PoolConfig(num_blocks, 1), PAGEDKV.overridden(policy))


def test_a_shared_block_keeps_its_hash_until_its_last_holder_goes() -> None:
    """``keep_freed_cache=false`` drops a block's hash with its last holder, not its first: a
    block two hold, given back once, is still a hit."""
    pool = reference({"keep_freed_cache": "false"})
    block = pool.allocate_immutable(ROOT, [1])
    assert pool.allocate_immutable(ROOT, [1]) == block
    pool.free(block)
    assert pool.lookup(ROOT.child_hash([1])) == block
    assert pool.allocate_immutable(ROOT, [1]) == block


def test_a_promoted_block_freed_before_the_mark_stays_uncomputed() -> None:
    """``computed_marks=promoted_batch`` marks the promoted blocks still held: one given back
    before the mark is not marked (a hit that takes it back marks it then)."""
    pool = reference({"computed_marks": "promoted_batch"})
    held = pool.allocate_immutable(ROOT, [1])
    freed = pool.allocate_immutable(ROOT, [2])
    pool.free(freed)
    pool.mark_computed([])
    assert (pool.block(held).computed, pool.block(freed).computed) == (True, False)


def test_the_common_prefix_stops_at_the_first_difference() -> None:
    """Two chains that differ in their first block and share their second: the common prefix
    is empty (a shared block further on is no prefix)."""
    pool = reference({}, num_blocks=6)
    first, second, shared, tail = (pool.allocate_immutable(ROOT, [t]) for t in (1, 2, 3, 4))
    pool.mark_computed([first, second, shared])
    chains = [[first, shared, tail], [second, shared, tail]]
    assert pool.common_computed_prefix(chains) == []
    assert pool.common_computed_prefix([[first, shared, tail], [first, shared]]) == [first]


# --- both pools: the optimized pool's rarer branches (gaps of optimized/block_pool.py) ---------

POOLS: list[BlockPoolFactory] = [ReferenceBlockPool, OptimizedBlockPool]


@pytest.mark.parametrize("make", POOLS, ids=lambda f: f.__name__)
def test_an_evicted_copy_destination_drops_its_pending_pair(make: BlockPoolFactory) -> None:
    """A copy-on-write's destination that fills, is given back (evictable) and is then evicted
    before the copies are run: its pair goes with it, as the block is taken again blank."""
    pool = make(PoolConfig(3, 2))
    source = pool.allocate_mutable()
    pool.append_tokens(source, ROOT, [1])
    pool.fork([source])
    copy = pool.append_tokens(source, ROOT, [2])  # shared: copied, then filled and cached
    assert copy != source
    pool.free(copy)  # evictable, its pair still pending
    assert pool.allocate_mutable() not in (source, copy)  # the last free block
    assert pool.allocate_mutable() == copy  # evicted
    assert pool.clear_copy_on_writes() == []


@pytest.mark.parametrize("make", POOLS, ids=lambda f: f.__name__)
def test_an_access_re_ranks_an_evictable_block(make: BlockPoolFactory) -> None:
    """Two evictable blocks, the lower id first in the eviction order until an access of it:
    then the other one is evicted first."""
    pool = make(PoolConfig(3, 1))
    first = pool.allocate_immutable(ROOT, [1])
    second = pool.allocate_immutable(ROOT, [2])
    pool.free(first)
    pool.free(second)
    pool.mark_accessed([first], 5.0)
    assert pool.allocate_mutable() not in (first, second)  # the free block
    assert pool.allocate_mutable() == second
    assert pool.lookup(ROOT.child_hash([1])) == first


def test_the_trusted_core_on_a_pool_whose_ids_do_not_start_at_zero() -> None:
    """The CPU pool's ids start after the GPU's: the core's index is the id less the first id,
    also in ``take_full_blocks`` without caching and in ``append_in_place``."""
    pool = OptimizedBlockPool(PoolConfig(4, 2, enable_caching=False, first_id=10))
    (full,) = pool.take_full_blocks([packed((1, 2))], None, NO_EXTRA_KEY)
    assert pool.tokens_of(full) == packed((1, 2))
    tail = pool.take()
    assert pool.append_in_place(tail, packed((3,)))
    assert pool.tokens_of(tail) == packed((3,))
    assert pool.block(tail).tokens == (3,) and pool.block(full).tokens == (1, 2)


@pytest.mark.parametrize("make", POOLS, ids=lambda f: f.__name__)
def test_a_reset_drops_the_pending_copy_into_an_evictable_block(make: BlockPoolFactory) -> None:
    """With nothing in use a copy can still wait for its destination, given back evictable: the
    reset blanks that block, and the pair goes with it."""
    pool = make(PoolConfig(3, 2))
    source = pool.allocate_mutable()
    pool.append_tokens(source, ROOT, [1])
    pool.fork([source])
    copy = pool.append_tokens(source, ROOT, [2])
    pool.free(copy)
    pool.free(source)
    assert pool.reset_prefix_cache()
    assert pool.clear_copy_on_writes() == []
    assert pool.block(copy).tokens == () and pool.lookup(ROOT.child_hash([1, 2])) is None


def test_a_reset_of_a_pool_whose_ids_do_not_start_at_zero() -> None:
    """The CPU pool's reset blanks its evictable blocks by id less the first id."""
    pool = OptimizedBlockPool(PoolConfig(4, 1, first_id=10))
    cached = pool.allocate_immutable(ROOT, [1])
    pool.free(cached)
    assert pool.reset_prefix_cache()
    assert pool.block(cached).tokens == () and pool.block(cached).content_hash is None
    assert pool.allocate_mutable() == cached
