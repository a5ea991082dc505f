"""The pool's own null block (policy ``pool_null_block``, ``specs/policy.md``) is held by the
pool and by no caller: to a caller it is not allocated, so freeing it is a double free and a call
that needs a held block refuses it. Default-policy runs have no such block, so the lockstep
machines cannot see this rule; a gap found by ``make mutate`` (``specs/mutation.md``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import DoubleFreeError, UnallocatedBlockError
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.types import PoolConfig


def test_no_caller_holds_the_pools_null_block() -> None:
    pool = ReferenceBlockPool(
        PoolConfig(num_blocks=3, block_size=1), replace(PAGEDKV, pool_null_block=True)
    )
    null = pool.get_null_block()
    assert null is not None
    with pytest.raises(DoubleFreeError):
        pool.free(null)
    with pytest.raises(UnallocatedBlockError):
        pool.append_tokens(null, Prefix(), [1])
    assert pool.get_null_block() == null and pool.num_free_blocks() == 2
