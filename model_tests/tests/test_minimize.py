"""Deleting steps from a failing trace (``model_tests/oracle/minimize.py``): the result still fails
the same way, and no single step can be removed from it."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.independent.manager import IndependentManager
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.minimize import ddmin, minimize
from pagedkv.specs.types import ManagerConfig


def one_minimal(kept: list[int], fails: Any) -> bool:
    return fails(kept) and not any(fails(kept[:i] + kept[i + 1 :]) for i in range(len(kept)))


@given(st.lists(st.integers(0, 30), unique=True, max_size=25), st.integers(0, 2**32))
def test_ddmin_keeps_exactly_what_a_monotone_failure_needs(items: list[int], salt: int) -> None:
    needed = {item for item in items if hashlib.sha256(f"{salt}/{item}".encode()).digest()[0] < 40}

    def fails(kept: list[int]) -> bool:
        return needed <= set(kept)

    kept = ddmin(items, fails)
    assert set(kept) == needed and kept == [item for item in items if item in needed]


@given(st.lists(st.integers(0, 30), unique=True, max_size=14), st.integers(0, 2**32))
def test_ddmin_result_is_1_minimal_for_any_failure(items: list[int], salt: int) -> None:
    """Even for a failure with no structure at all (a hash of the kept items)."""

    def fails(kept: list[int]) -> bool:
        if kept == items:
            return True
        return hashlib.sha256(f"{salt}/{kept}".encode()).digest()[0] < 100

    kept = ddmin(items, fails)
    assert one_minimal(kept, fails)
    assert all(item in items for item in kept) and kept == sorted(kept, key=items.index)


def test_minimize_drops_steps_the_failure_does_not_need() -> None:
    """Padding around a swap that loses a pair: only the steps the swap needs stay, and the
    failure is the same (the last call, a result that differs)."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4, enable_caching=False)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("get_num_free_gpu_blocks", ()),
        ("allocate", (1, [2], [3, 1, 4])),
        ("allocate", (5, [6], [1, 1])),
        ("get_block_table", (2,)),
        ("free", (6,)),
        ("swap_out", (1,)),
        ("get_num_free_cpu_blocks", ()),
        ("swap_in", (1,)),
    ]
    padded = trace.trace_of_calls("manager", config, calls)
    found = minimize(padded, broken.BrokenSwapDropsPair)
    assert found is not None
    kept = [(op.op, op.args) for op in found.trace.ops]
    assert kept == [calls[1], calls[5], calls[7]]
    assert found.verdict.step == 3 and found.verdict.kind == "result" and found.complete
    assert found.before == len(calls)
    assert trace.replay(found.trace, IndependentManager).ok  # the same calls pass without the bug


def test_minimize_leaves_a_trace_that_does_not_fail_at_its_end_alone() -> None:
    config = ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4)
    passing = trace.trace_of_calls("manager", config, [("allocate", (1, [2], [3]))])
    assert minimize(passing, IndependentManager) is None
