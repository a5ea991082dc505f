"""Atomicity at the pool level (invariant I6; ``specs/oracle.md`` §1): after a raising call,
everything the protocol can read of a pool must be as before: its free count, each held block
through ``block()``, the hash lookup of the cached hashes and of the one the call would cache.
A failed call that corrupts any of these is caught at that call, not blamed on a later one."""

from __future__ import annotations

from typing import Any

import pytest

from pagedkv.model_tests.corpus.pools import CowDropsTheSourceFirst, RecordsTheHashFirst
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.check import run_check
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.policy import profile
from pagedkv.specs.types import PoolConfig

ONE_BLOCK = PoolConfig(num_blocks=1, block_size=1, enable_caching=True)
SHARED_THEN_COPIED: list[tuple[str, tuple[Any, ...]]] = [
    ("allocate_mutable", ()),
    ("fork", ([0],)),
    ("cow_if_not_appendable", (0,)),  # no block left for the copy: OutOfBlocksError
    ("free", (0,)),
    ("free", (0,)),
]
"""Where a main that compared only the free count first saw the damage: at the last free."""


@pytest.mark.parametrize("safety", [False, True], ids=["isomorphic", "safety tier"])
def test_a_failed_copy_on_write_that_drops_a_reference_is_caught_at_that_call(
    safety: bool,
) -> None:
    made = trace.trace_of_calls("pool", ONE_BLOCK, SHARED_THEN_COPIED, safety=safety)
    verdict = trace.replay(made, CowDropsTheSourceFirst)
    assert (verdict.status, verdict.step, verdict.kind) == ("divergence", 3, "atomicity"), (
        verdict.describe()
    )
    assert "cow_if_not_appendable(0) raised OutOfBlocksError" in verdict.message
    assert "block 0" in verdict.message and "ref count 2 -> 1" in verdict.message
    assert trace.replay(made, OptimizedBlockPool).ok  # the same calls, without the bug


@pytest.mark.parametrize("safety", [False, True], ids=["isomorphic", "safety tier"])
def test_a_failed_allocation_that_leaves_its_hash_cached_is_caught_at_that_call(
    safety: bool,
) -> None:
    prefix = Prefix()
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate_mutable", ()),
        ("allocate_immutable", (prefix, [7])),  # the pool is full: OutOfBlocksError
    ]
    made = trace.trace_of_calls("pool", ONE_BLOCK, calls, safety=safety)
    verdict = trace.replay(made, RecordsTheHashFirst)
    assert (verdict.status, verdict.step, verdict.kind) == ("divergence", 2, "atomicity"), (
        verdict.describe()
    )
    assert f"lookup({prefix.child_hash((7,)).hex()[:8]}…) gave no block before" in verdict.message
    assert trace.replay(made, OptimizedBlockPool).ok


@pytest.mark.parametrize(("tier", "seed", "per_run"), [("pagedkv", 3, 10), ("safety", 2, 30)])
def test_the_search_blames_the_failed_call(tier: str, seed: int, per_run: int) -> None:
    """``pagedkv check`` finds the corruption, shrunk to the call that did it (seeds measured
    to find it quickly; should the machine change, the others are tried)."""
    for tried in (seed, *sorted({1, 2, 3} - {seed})):
        result = run_check(
            CowDropsTheSourceFirst,
            "pool",
            steps=1000,
            seed=tried,
            trace_out=None,
            profile=profile(tier),
            steps_per_run=per_run,
        )
        if not result.passed:
            break
    else:
        pytest.fail("seeds 1 to 3 missed the corruption")
    assert result.record is not None, result.message
    last = result.record.calls[-1][0]
    assert last in ("cow_if_not_appendable", "append_tokens"), result.message
    assert "ref count 2 -> 1" in result.message, result.message
