"""The hash index's second holders (``specs/policy.md``, ``duplicates``): under
``promotion=keep`` two blocks may hold one content; with ``first_stays`` the later ones wait in
line and take the index, in order, when the first lets go. Default-policy runs never make a second
holder, so the lockstep machines cannot see this line; a gap found by ``make mutate``
(``specs/mutation.md``)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.policy import PAGEDKV
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
