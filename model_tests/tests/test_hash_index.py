"""The reference pool's hash index under the policies that the default-policy lockstep machines
never reach (gaps found by ``make mutate``, ``specs/mutation.md``): second holders of one content
(``promotion=keep``; with ``duplicates=first_stays`` they wait in line and take the index, in
order, when the first lets go) and a block that loses its hash (``keep_freed_cache=false``: it is
blank; ``duplicates=latest_replaces``: its holders keep it, tokens and all)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.pool_view import BLANK
from pagedkv.specs.types import PoolConfig


def test_a_waiting_holder_that_is_evicted_leaves_the_line_and_only_it() -> None:
    pool = ReferenceBlockPool(
        PoolConfig(num_blocks=3, block_size=1), replace(PAGEDKV, promotion="keep")
    )
    first, second, third = (pool.allocate_mutable() for _ in range(3))
    for block in (first, second, third):
        pool.append_tokens(block, Prefix(), [1])
    content = Prefix().child_hash([1])
    assert pool.lookup(content) == first
    pool.free(second)
    assert pool.allocate_mutable() == second  # the one evictable block: it loses the content
    pool.free(first)
    assert pool.allocate_mutable() == first  # the index passes to the next in line
    assert pool.lookup(content) == third
    assert pool.block(third).content_hash == content


def test_the_index_passes_down_the_line_in_order() -> None:
    pool = ReferenceBlockPool(
        PoolConfig(num_blocks=4, block_size=1), replace(PAGEDKV, promotion="keep")
    )
    holders = [pool.allocate_mutable() for _ in range(4)]
    for block in holders:
        pool.append_tokens(block, Prefix(), [1])
    content = Prefix().child_hash([1])
    for leaving, next_in_line in pairwise(holders):
        assert pool.lookup(content) == leaving
        pool.free(leaving)
        assert pool.allocate_mutable() == leaving
        assert pool.lookup(content) == next_in_line


def test_a_block_that_loses_its_hash_with_its_last_holder_is_blank() -> None:
    pool = ReferenceBlockPool(
        PoolConfig(num_blocks=2, block_size=1), replace(PAGEDKV, keep_freed_cache=False)
    )
    block = pool.allocate_immutable(Prefix(), [1])
    pool.free(block)
    assert pool.block(block) == BLANK and pool.num_free_blocks() == 2


def test_a_held_block_that_loses_its_hash_to_a_later_holder_keeps_its_holder() -> None:
    pool = ReferenceBlockPool(
        PoolConfig(num_blocks=2, block_size=1),
        replace(PAGEDKV, promotion="keep", duplicates="latest_replaces"),
    )
    first, second = pool.allocate_mutable(), pool.allocate_mutable()
    pool.append_tokens(first, Prefix(), [1])
    pool.append_tokens(second, Prefix(), [1])
    content = Prefix().child_hash([1])
    assert pool.lookup(content) == second
    view = pool.block(first)
    assert (view.ref_count, view.content_hash, view.tokens) == (1, None, (1,))
