"""The pool's batch operations (``specs/block_pool.md`` §5, batches): ``allocate_immutable_chain``
and ``free_blocks`` are exactly the fold of their single operations, all or nothing. Each case
runs the batch on the reference and on the optimized pool, and the single calls on a copy of the
reference: the three must agree on the result (or the error's type and message) and on the
state after; a failed batch must leave the state it started from."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.model_tests.oracle.api import check
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.interface import BlockPool, PoolBatchFree, PoolChainAllocation
from pagedkv.specs.types import MAX_TOKEN, BlockId, ExtraKey, PoolConfig, Token
from pagedkv.specs.validation import in_batch

Outcome = tuple[str, Any]


def outcome(action: Callable[[], Any]) -> Outcome:
    try:
        return ("result", action())
    except PagedKVError as error:
        return (type(error).__name__, str(error))


def singles_chain(pool: BlockPool, prefix: Prefix, token_blocks: Sequence[Any]) -> list[BlockId]:
    """The fold the batch stands for, on a copy of the reference (failures say their item)."""
    taken = []
    for index, tokens in enumerate(token_blocks):
        try:
            taken.append(pool.allocate_immutable(prefix, tokens))
        except PagedKVError as error:
            raise in_batch(error, "token_blocks", index) from None
        prefix = prefix.extend(tokens)
    return taken


def singles_free(pool: BlockPool, blocks: Sequence[Any]) -> None:
    for index, block in enumerate(blocks):
        try:
            pool.free(block)
        except PagedKVError as error:
            raise in_batch(error, "blocks", index) from None


def prepared(config: PoolConfig, prompts: list[list[list[Token]]], frees: list[int]) -> Any:
    """The reference and the optimized pool after the same prompts (a chain each) and frees."""
    pools: list[Any] = [ReferenceBlockPool(config), OptimizedBlockPool(config)]
    for chain in prompts:
        results = {repr(outcome(partial(singles_chain, p, Prefix(), chain))) for p in pools}
        assert len(results) == 1, results
    for pick in frees:
        live = held_blocks(pools[0])
        if live:
            block = live[pick % len(live)]
            for pool in pools:
                pool.free(block)
    return pools


def held_blocks(pool: ReferenceBlockPool) -> list[BlockId]:
    view = pool.view()
    return sorted(b for b, block in view.blocks.items() if block.ref_count)


def agree(
    pools: list[Any],
    batch: Callable[[Any], Any],
    singles: Callable[[Any], Any],
) -> list[str]:
    """What differs between the batch on each pool and the singles on a copy of the reference;
    a failed batch must also leave each pool as it was."""
    reference, optimized = pools
    fold = copy.deepcopy(reference)
    before = [reference.view(), optimized.view()]
    expected = outcome(lambda: singles(fold))
    problems = []
    for name, pool, was in zip(("reference", "optimized"), pools, before, strict=True):
        got = outcome(partial(batch, pool))
        if got != expected:
            problems.append(f"{name}: {got} where the single calls give {expected}")
        elif expected[0] == "result" and pool.view() != fold.view():
            problems.append(f"{name}: the state after differs from the single calls'")
        elif expected[0] != "result" and pool.view() != was:
            problems.append(f"{name}: a failed batch changed the pool")
    return problems


TOKENS = st.integers(0, 3)


@st.composite
def cases(draw: st.DrawFn) -> tuple[PoolConfig, list[list[list[Token]]], list[int]]:
    size = draw(st.integers(1, 3), label="block size")
    config = PoolConfig(
        num_blocks=draw(st.integers(2, 8), label="blocks"),
        block_size=size,
        enable_caching=draw(st.booleans(), label="caching"),
    )
    block = st.lists(TOKENS, min_size=size, max_size=size)
    prompts = draw(st.lists(st.lists(block, max_size=3), max_size=3), label="prompts")
    frees = draw(st.lists(st.integers(0, 20), max_size=6), label="frees")
    return config, prompts, frees


def token_blocks(size: int) -> st.SearchStrategy[list[Any]]:
    """Mostly full blocks, sometimes a bad one anywhere (wrong length, a negative token, a
    token past ``MAX_TOKEN`` that still fits in 64 bits, a bool)."""
    good = st.lists(TOKENS, min_size=size, max_size=size)
    bad = st.sampled_from(
        [
            [-1] * size,
            [0] * (size + 1),
            [0] * (size - 1),
            "not tokens",
            [0] * (size - 1) + [MAX_TOKEN + 1],
            [True] * size,
        ]
    )
    return st.lists(st.one_of(good, good, good, bad), max_size=5)


@settings(max_examples=150, deadline=None)
@given(case=cases(), data=st.data())
def test_allocate_immutable_chain_is_the_fold_of_allocate_immutable(
    case: tuple[PoolConfig, list[list[list[Token]]], list[int]], data: st.DataObject
) -> None:
    config, prompts, frees = case
    pools = prepared(config, prompts, frees)
    blocks = data.draw(token_blocks(config.block_size), label="token blocks")
    prefixes: list[Any] = [Prefix(), Prefix(extra_key=ExtraKey(lora_id=1)), "not a prefix", None]
    prefix = data.draw(st.sampled_from(prefixes))  # a bad one too: each block's error comes first
    problems = agree(
        pools,
        lambda pool: pool.allocate_immutable_chain(prefix, blocks),
        lambda pool: singles_chain(pool, prefix, blocks),
    )
    assert not problems, problems


@settings(max_examples=150, deadline=None)
@given(case=cases(), data=st.data())
def test_free_blocks_is_the_fold_of_free(
    case: tuple[PoolConfig, list[list[list[Token]]], list[int]], data: st.DataObject
) -> None:
    config, prompts, frees = case
    pools = prepared(config, prompts, frees)
    held = held_blocks(pools[0])
    ids = st.sampled_from(held) if held else st.integers(0, config.num_blocks - 1)
    anything = st.one_of(ids, ids, ids, st.integers(-1, config.num_blocks + 1))
    blocks = data.draw(st.lists(anything, max_size=6), label="blocks")
    problems = agree(
        pools,
        lambda pool: pool.free_blocks(blocks),
        lambda pool: singles_free(pool, blocks),
    )
    assert not problems, problems


def drained(pool: Any) -> list[BlockId]:
    """Every block an allocation could take, in the order taken: the free list, then the
    evictor's order (which ``view`` does not show)."""
    return [pool.allocate_mutable() for _ in range(pool.num_free_blocks())]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_free_blocks_leaves_the_eviction_order_of_the_single_frees(data: st.DataObject) -> None:
    """A batch's blocks ranked for eviction as each ``free`` would rank them (the optimized
    pool ranks a batch's hashed blocks together): caching on, the prompts' blocks held, some
    of them given back in one batch, then every block taken."""
    size = data.draw(st.integers(1, 2), label="block size")
    config = PoolConfig(num_blocks=8, block_size=size, enable_caching=True)
    block = st.lists(TOKENS, min_size=size, max_size=size)
    prompts = data.draw(st.lists(st.lists(block, min_size=1, max_size=4), min_size=1, max_size=3))
    frees = data.draw(st.lists(st.integers(0, 20), max_size=2), label="frees")
    reference, optimized = prepared(config, prompts, frees)
    held = held_blocks(reference)
    blocks = data.draw(st.lists(st.sampled_from(held), unique=True) if held else st.just([]))
    fold = copy.deepcopy(reference)
    singles_free(fold, blocks)
    optimized.free_blocks(blocks)
    assert drained(optimized) == drained(fold)


def test_both_pools_offer_the_batches() -> None:
    for pool in (ReferenceBlockPool(PoolConfig(2, 1)), OptimizedBlockPool(PoolConfig(2, 1))):
        assert isinstance(pool, PoolChainAllocation) and isinstance(pool, PoolBatchFree)


def test_a_chain_that_runs_out_midway_changes_nothing() -> None:
    config = PoolConfig(num_blocks=2, block_size=1, enable_caching=True)
    pools: list[Any] = [ReferenceBlockPool(config), OptimizedBlockPool(config)]
    for pool in pools:
        with pytest.raises(OutOfBlocksError, match=r"token_blocks\[2\]"):
            pool.allocate_immutable_chain(Prefix(), [[1], [2], [3]])
        assert pool.num_free_blocks() == 2 and pool.hit_rate() == 0.0


class KeepsWhatItTook(OptimizedBlockPool):
    """A wrong pool: its chain is the single calls with no check first, so a failure midway
    keeps the blocks taken before it."""

    def allocate_immutable_chain(
        self, prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
    ) -> list[BlockId]:
        return singles_chain(self, prefix, token_blocks)


class FreesUpToTheBadOne(OptimizedBlockPool):
    """A wrong pool: its ``free_blocks`` frees until an item fails."""

    def free_blocks(self, blocks: Sequence[BlockId]) -> None:
        singles_free(self, blocks)


def test_the_comparison_catches_a_batch_that_is_not_all_or_nothing() -> None:
    config = PoolConfig(num_blocks=3, block_size=1, enable_caching=True)
    pools: list[Any] = [ReferenceBlockPool(config), KeepsWhatItTook(config)]
    problems = agree(
        pools,
        lambda pool: pool.allocate_immutable_chain(Prefix(), [[1], [2], [-1]]),
        lambda pool: singles_chain(pool, Prefix(), [[1], [2], [-1]]),
    )
    assert problems == ["optimized: a failed batch changed the pool"], problems
    pools = [ReferenceBlockPool(config), FreesUpToTheBadOne(config)]
    for pool in pools:
        pool.allocate_immutable_chain(Prefix(), [[1], [2]])
    problems = agree(
        pools,
        lambda pool: pool.free_blocks([1, 0, 0]),
        lambda pool: singles_free(pool, [1, 0, 0]),
    )
    assert problems == ["optimized: a failed batch changed the pool"], problems


def test_the_oracle_sends_free_blocks_and_catches_one_that_is_not_all_or_nothing() -> None:
    """``free_blocks`` is drawn in isomorphic mode too (``pool_base.batches``): the oracle
    passes the optimized pool and fails the one that frees up to the bad item."""
    assert check("optimized", "pool", seed=0, steps=2000).passed
    failed = check(f"{__name__}:FreesUpToTheBadOne", "pool", seed=0, steps=3000)
    assert not failed.passed
    assert "free_blocks" in failed.message and "changed the target" in failed.message, (
        failed.message
    )
