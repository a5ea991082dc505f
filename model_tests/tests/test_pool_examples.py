"""The seed's scenarios as concrete cases, on every pool implementation.

Each test reads as a story a newcomer can follow: what was allocated, what got shared, what the
pool did.
"""

from __future__ import annotations

import pytest

from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import errors, invariants
from pagedkv.specs.content_hash import ROOT, Prefix, block_hash
from pagedkv.specs.interface import BlockPool, BlockPoolFactory
from pagedkv.specs.types import ExtraKey, PoolConfig

FACTORIES: list[BlockPoolFactory] = [ReferenceBlockPool]
try:
    from pagedkv.optimized.block_pool import OptimizedBlockPool

    FACTORIES.append(OptimizedBlockPool)
except ImportError:  # pragma: no cover - while the optimized pool is being written
    pass


@pytest.fixture(params=FACTORIES, ids=lambda f: f.__name__)
def make(request: pytest.FixtureRequest) -> BlockPoolFactory:
    factory: BlockPoolFactory = request.param
    return factory


def check(pool: BlockPool) -> None:
    assert invariants.pool_invariants(pool.view()) == []


def test_dedup_on_promotion(make: BlockPoolFactory) -> None:
    """Two sequences write the same block; when the second fills, it switches to the first's."""
    pool = make(PoolConfig(num_blocks=4, block_size=2))
    root = Prefix()
    first = pool.allocate_immutable(root, [7, 8])
    own = pool.allocate_mutable()
    own = pool.append_tokens(own, root, [7])
    assert own != first
    switched = pool.append_tokens(own, root, [8])
    assert switched == first
    assert pool.block(first).ref_count == 2
    assert not pool.block(first).computed  # nobody said its KV was written yet
    assert pool.block(own).ref_count == 0  # released to the free list
    assert pool.num_free_blocks() == 3
    check(pool)


def test_append_to_a_shared_block_that_completes_a_cached_one_needs_no_copy(
    make: BlockPoolFactory,
) -> None:
    pool = make(PoolConfig(num_blocks=3, block_size=2))
    root = Prefix()
    cached = pool.allocate_immutable(root, [1, 2])
    partial = pool.append_tokens(pool.allocate_mutable(), root, [1])
    pool.fork([partial])
    assert pool.append_tokens(partial, root, [2]) == cached
    assert pool.clear_copy_on_writes() == []
    assert pool.block(partial).ref_count == 1


def test_eviction_takes_the_oldest_and_then_the_tail_of_a_chain(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=3, block_size=1))
    root = Prefix()
    head = pool.allocate_immutable(root, [1])
    tail = pool.allocate_immutable(root.extend([1]), [2])
    other = pool.allocate_immutable(root, [9])
    pool.mark_accessed([head, tail], now=5.0)
    pool.mark_accessed([other], now=3.0)
    for block in (head, tail, other):
        pool.free(block)
    assert pool.num_free_blocks() == 3  # all three are evictable, none is blank
    assert pool.allocate_mutable() == other  # oldest access first
    assert pool.allocate_mutable() == tail  # same time: most hashed tokens first
    assert pool.allocate_mutable() == head
    with pytest.raises(errors.OutOfBlocksError):
        pool.allocate_mutable()
    check(pool)


def test_an_evicted_hash_is_forgotten(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=1, block_size=1))
    root = Prefix()
    block = pool.allocate_immutable(root, [4])
    pool.free(block)
    assert pool.allocate_mutable() == block  # evicts it
    pool.free(block)
    assert pool.view().cached == {}
    assert pool.allocate_immutable(root, [4]) == block  # a miss, cached afresh
    assert pool.hit_rate() == 0.0


def test_copy_on_write_after_fork(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=4, block_size=4))
    root = Prefix()
    parent = pool.append_tokens(pool.allocate_mutable(), root, [1, 2])
    pool.fork([parent])
    child = pool.append_tokens(parent, root, [3])
    assert child != parent
    assert pool.block(parent).ref_count == 1
    assert pool.block(child).tokens == (1, 2, 3)
    assert pool.block(parent).tokens == (1, 2)
    assert pool.clear_copy_on_writes() == [(parent, child)]
    assert pool.clear_copy_on_writes() == []
    assert pool.append_tokens(parent, root, [9]) == parent  # no longer shared
    check(pool)


def test_a_copy_from_a_block_still_waiting_for_its_own_copy_reads_its_source(
    make: BlockPoolFactory,
) -> None:
    pool = make(PoolConfig(num_blocks=4, block_size=4))
    root = Prefix()
    x = pool.append_tokens(pool.allocate_mutable(), root, [1])
    pool.fork([x])
    y = pool.cow_if_not_appendable(x)
    pool.fork([y])
    w = pool.cow_if_not_appendable(y)
    assert pool.clear_copy_on_writes() == [(x, y), (x, w)]


def test_a_copy_into_a_released_block_is_dropped(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=3, block_size=4))
    x = pool.append_tokens(pool.allocate_mutable(), Prefix(), [1])
    pool.fork([x])
    y = pool.cow_if_not_appendable(x)
    pool.free(y)
    assert pool.clear_copy_on_writes() == []


def test_salt_and_lora_keep_caches_apart(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=3, block_size=2))
    plain = pool.allocate_immutable(Prefix(), [1, 2])
    salted = pool.allocate_immutable(Prefix(extra_key=ExtraKey(cache_salt="s")), [1, 2])
    lora = pool.allocate_immutable(Prefix(extra_key=ExtraKey(lora_id=3)), [1, 2])
    assert len({plain, salted, lora}) == 3
    assert pool.hit_rate() == 0.0


def test_common_computed_prefix_skips_the_last_block_and_stops_at_a_difference(
    make: BlockPoolFactory,
) -> None:
    pool = make(PoolConfig(num_blocks=6, block_size=1))
    root = Prefix()
    a = pool.allocate_immutable(root, [1])
    b = pool.allocate_immutable(root.extend([1]), [2])
    c = pool.allocate_immutable(root.extend([1]).extend([2]), [3])
    pool.fork([a, b])
    d = pool.allocate_immutable(root.extend([1]).extend([2]), [4])
    pool.mark_computed([a, b, c, d])
    assert pool.common_computed_prefix([[a, b, c]]) == [a, b]
    assert pool.common_computed_prefix([[a, b, c], [a, b, d]]) == [a, b]
    assert pool.common_computed_prefix([[a, b, c], [a]]) == []


def test_reset_only_when_nothing_is_used(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=2, block_size=1))
    block = pool.allocate_immutable(Prefix(), [1])
    assert pool.reset_prefix_cache() is False
    pool.free(block)
    assert pool.reset_prefix_cache() is True
    assert pool.view().cached == {}
    assert pool.num_free_blocks() == 2


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda p: p.free(0), errors.DoubleFreeError),
        (lambda p: p.free(99), errors.ForeignBlockError),
        (lambda p: p.append_tokens(0, Prefix(), [1]), errors.UnallocatedBlockError),
        (lambda p: p.allocate_immutable(Prefix(), [1, 2, 3]), errors.TooManyTokensError),
        (lambda p: p.allocate_immutable(Prefix(), [1]), errors.InvalidArgumentError),
        (lambda p: p.mark_accessed([], float("nan")), errors.InvalidArgumentError),
        # a free block has no contents to mark or share
        (lambda p: p.mark_accessed([0], 1.0), errors.UnallocatedBlockError),
        (lambda p: p.mark_computed([1]), errors.UnallocatedBlockError),
        (lambda p: p.fork([0]), errors.UnallocatedBlockError),
        (lambda p: p.common_computed_prefix([[1]]), errors.UnallocatedBlockError),
    ],
)
def test_errors_name_the_problem_and_change_nothing(
    make: BlockPoolFactory, call: object, error: type[Exception]
) -> None:
    pool = make(PoolConfig(num_blocks=2, block_size=2))
    before = pool.view().comparable()
    with pytest.raises(error) as raised:
        call(pool)  # type: ignore[operator]
    assert str(raised.value)
    assert pool.view().comparable() == before


@pytest.mark.parametrize(
    ("prefix", "says"),
    [
        ("not a prefix", "expected a Prefix"),
        (Prefix(hash=b"short"), "32 bytes"),
        (Prefix(num_tokens=1), "whole blocks of 2"),
        (Prefix(num_tokens=-2), "prefix length"),
        (Prefix(extra_key=ExtraKey(lora_id=-1)), "lora_id"),
    ],
)
def test_append_tokens_refuses_a_malformed_prefix(
    make: BlockPoolFactory, prefix: object, says: str
) -> None:
    """Checked before anything changes, in a live block with room (so only the prefix is wrong):
    the same checks ``allocate_immutable`` makes."""
    pool = make(PoolConfig(num_blocks=2, block_size=2))
    block = pool.allocate_mutable()
    before = pool.view().comparable()
    with pytest.raises(errors.InvalidArgumentError, match=says):
        pool.append_tokens(block, prefix, [1])  # type: ignore[arg-type]
    assert pool.view().comparable() == before


def test_exhausted_pool(make: BlockPoolFactory) -> None:
    pool = make(PoolConfig(num_blocks=2, block_size=2))
    pool.allocate_mutable()
    pool.allocate_mutable()
    with pytest.raises(errors.OutOfBlocksError, match="no free or evictable block"):
        pool.allocate_mutable()


@pytest.mark.parametrize(
    "config",
    [
        PoolConfig(0, 1),
        PoolConfig(1, 0),
        PoolConfig(1, 1, first_id=-1),
        PoolConfig(1, 1, enable_caching=1),  # type: ignore[arg-type]
    ],
)
def test_bad_configuration(make: BlockPoolFactory, config: PoolConfig) -> None:
    with pytest.raises(errors.ConfigurationError):
        make(config)


def test_reference_validates_an_explicit_choice() -> None:
    pool = ReferenceBlockPool(PoolConfig(num_blocks=3, block_size=1))
    assert pool.allocate_mutable(choice=2) == 2
    with pytest.raises(errors.InvalidArgumentError, match="may not be allocated"):
        pool.allocate_mutable(choice=2)
    with pytest.raises(errors.InvalidArgumentError):
        pool.allocate_mutable(choice=True)


def test_hash_encoding_is_pinned() -> None:
    """Traces and other languages depend on these exact bytes."""
    assert ROOT.hex().startswith("8c45c2f9")
    first = block_hash(ROOT, [1, 2], ExtraKey())
    assert first.hex().startswith("259f7cebd4f765b0")
    assert Prefix().extend([1, 2]).hash == first
