"""What the reference adapters declare to the sessions: the pool that every failed call leaves
unchanged (``specs/safety.md`` S6), the manager as atomic as its policy says, and an operation
the policy does not offer refused before its arguments are read (``specs/policy.md``,
``unsupported``). The sessions trust these declarations, so each is pinned here; found as gaps
by ``make mutate`` (``specs/mutation.md``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.errors import OutOfBlocksError, UnsupportedError
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.types import ManagerConfig, PoolConfig

POOL = PoolConfig(num_blocks=2, block_size=2)
MANAGER = ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2)


def test_the_reference_pool_declares_and_keeps_atomicity() -> None:
    pool = ReferenceBlockPool(POOL)
    pool.allocate_mutable()
    pool.allocate_mutable()
    before = pool.state
    with pytest.raises(OutOfBlocksError):
        pool.allocate_mutable()
    assert pool.atomic is True and pool.state == before


@pytest.mark.parametrize("atomic", [True, False])
def test_the_reference_manager_is_as_atomic_as_its_policy(atomic: bool) -> None:
    assert ReferenceBlockSpaceManager(MANAGER, replace(PAGEDKV, atomic=atomic)).atomic is atomic


def test_the_optimized_manager_declares_and_keeps_atomicity() -> None:
    manager = OptimizedBlockSpaceManager(MANAGER)
    with pytest.raises(OutOfBlocksError):
        manager.allocate(1, [1], list(range(9)))
    assert manager.atomic is True and manager.get_num_free_gpu_blocks() == 4


def test_an_operation_not_offered_is_refused_before_its_arguments_are_read() -> None:
    pool = ReferenceBlockPool(POOL, replace(PAGEDKV, unsupported=frozenset({"allocate_mutable"})))
    with pytest.raises(UnsupportedError, match="allocate_mutable is not offered"):
        pool.allocate_mutable(choice="not an id")  # type: ignore[arg-type]
    assert pool.num_free_blocks() == POOL.num_blocks
    assert ReferenceBlockPool(POOL).allocate_mutable() in POOL.block_ids
