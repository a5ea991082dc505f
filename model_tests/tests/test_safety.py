"""The safety tier (``specs/safety.md``): what every correct allocator guarantees, whatever its
policy.

Its broken fixtures (aliasing across extra keys, a leaked block, a promise broken, a table keeping
a given-back block) are each caught under ``--profile safety`` with the default budget, with a
short trace that replays the failure and passes on the same manager without the bug. Correct
allocators pass it under every profile's policy, at both levels; and bugs that are only policy
differences (a different eviction order, a different admission answer) are not flagged: that is
what sets the tier apart from the comparison with the reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.independent.manager import IndependentManager
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.check import budget, check_report, run_check
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.policy import PROFILES, Policy, profile
from pagedkv.specs.types import ManagerConfig

SAFETY = profile("safety")
LEVELS: tuple[Level, ...] = ("manager", "pool")
MAX_STEPS = 12

CAUGHT = {
    # fixture: (seed, what the message must say); each seed measured to find the bug well within
    # the default budget (2000 calls)
    broken.BrokenHashIgnoresExtraKey: (2, r"is shared by .* under different extra keys"),
    broken.BrokenFreeLeaksLastBlock: (2, r"a block is leaked"),
    broken.BrokenCanAppendIgnoresCopies: (
        2,
        r"can_append_slots.* said True, then .*broken promise",
    ),
    broken.BrokenWindowKeepsGivenBackBlock: (2, r"a held block is counted free"),
    broken.BrokenForgetsCowSource: (1, r"a block is leaked"),
    broken.BrokenSwapDropsPair: (5, r"KV"),
    broken.BrokenNoUpFrontCheck: (1, r"which declares itself atomic"),
}

POLICY_ONLY = (
    # differences from pagedkv's choices that are no hazard: the safety tier must let them pass
    broken.BrokenEvictsNewest,
    broken.BrokenCanAllocateIgnoresWatermark,
    broken.BrokenHitMarksComputed,
    broken.BrokenWindowKeepsExtraBlock,
)


def test_every_safety_fixture_is_checked() -> None:
    assert set(broken.SAFETY_BROKEN) <= set(CAUGHT)


@pytest.mark.parametrize("cls", list(CAUGHT), ids=lambda cls: cls.__name__)
def test_safety_fixture_is_caught_with_a_short_replayable_trace(
    cls: type[Any], tmp_path: Path
) -> None:
    seed, says = CAUGHT[cls]
    out = tmp_path / "found.jsonl"
    result = run_check(cls, "manager", seed=seed, trace_out=out, profile=SAFETY)
    assert not result.passed
    assert re.search(says, result.message), result.message
    assert result.found_after is not None  # found by the search the default budget makes
    assert result.trace is not None and result.trace.safety
    assert 1 <= len(result.trace.ops) <= MAX_STEPS
    assert all(op.expect is None for op in result.trace.ops)  # nothing but the tier is expected
    report = check_report(result, str(cls))
    assert report.verdict.startswith("FAIL: the target breaks the safety tier")
    assert report.detail.startswith("what breaks: ")
    loaded = trace.read(out)
    assert loaded.safety and loaded.ops == result.trace.ops
    again = trace.replay(loaded, cls)
    assert again.status == "divergence" and re.search(says, again.message), again.message
    assert trace.replay(loaded, IndependentManager).ok  # the same calls, without the bug


@pytest.mark.parametrize("cls", POLICY_ONLY, ids=lambda cls: cls.__name__)
def test_a_policy_difference_is_no_safety_finding(cls: type[Any]) -> None:
    result = run_check(cls, "manager", steps=600, seed=1, trace_out=None, profile=SAFETY)
    assert result.passed, result.message
    assert result.runs >= budget(600)[0]  # every run the budget asks for


def _reference(level: Level, policy: Policy) -> Callable[[Any], Any]:
    def reference(config: Any) -> Any:
        made = ReferenceBlockSpaceManager if level == "manager" else ReferenceBlockPool
        return made(config, policy)

    return reference


PROFILED_LEVELS = [
    (level, name) for name in PROFILES for level in profile(name).levels if level in LEVELS
]


@pytest.mark.parametrize(("level", "name"), PROFILED_LEVELS)
def test_the_reference_is_safe_under_every_profile(level: Level, name: str) -> None:
    """Each profile's policy, as the reference implements it, keeps every safety guarantee (the
    safety tier checks the policy options themselves); the machine draws only what the profile's
    engine offers (``--profile safety:NAME``)."""
    chosen = profile(name)
    under = profile(f"safety:{name}")
    assert under.safety and under.policy == chosen.policy
    factory = _reference(level, chosen.policy)
    result = run_check(factory, level, steps=400, seed=3, trace_out=None, profile=under)
    assert result.passed, result.message
    assert result.runs >= budget(400)[0]  # every run the budget asks for


@pytest.mark.parametrize(("level", "name"), PROFILED_LEVELS)
def test_the_reference_agrees_with_itself_under_every_profile(level: Level, name: str) -> None:
    """The isomorphic comparison under each profile: a target that is the reference under that
    policy passes (no false alarm from the comparison itself, failed calls included)."""
    chosen = profile(name)
    factory = _reference(level, chosen.policy)
    result = run_check(factory, level, steps=400, seed=4, trace_out=None, profile=chosen)
    assert result.passed, result.message
    assert result.runs >= budget(400)[0]  # every run the budget asks for


@pytest.mark.parametrize(
    ("level", "factory"),
    [
        ("manager", OptimizedBlockSpaceManager),
        ("manager", IndependentManager),
        ("pool", OptimizedBlockPool),
    ],
    ids=["optimized manager", "independent manager", "optimized pool"],
)
def test_correct_allocators_pass_the_safety_tier(level: Level, factory: Any) -> None:
    result = run_check(factory, level, steps=600, seed=5, trace_out=None, profile=SAFETY)
    assert result.passed, result.message
    assert result.runs >= budget(600)[0]  # every run the budget asks for


class WithoutNullBlockHook(IndependentManager):
    """A correct windowed manager that does not name its null block."""

    get_null_block = None  # type: ignore[assignment]


class LeaksWithoutNullBlockHook(broken.BrokenFreeLeaksLastBlock):
    get_null_block = None  # type: ignore[assignment]


def test_a_target_without_the_null_block_hook_is_still_held_to_its_counts() -> None:
    """Without ``get_null_block()`` the GPU free count is bounded rather than known (an entry
    past the window may be the null block or a block not yet released): a correct target passes,
    and a leak still shows."""
    passing = run_check(WithoutNullBlockHook, "manager", steps=600, seed=5, trace_out=None,
                        profile=SAFETY)  # fmt: skip
    assert passing.passed, passing.message
    leaking = run_check(LeaksWithoutNullBlockHook, "manager", seed=2, trace_out=None,
                        profile=SAFETY)  # fmt: skip
    assert not leaking.passed and "a block is leaked" in leaking.message, leaking.message


@pytest.mark.parametrize(
    "factory",
    [IndependentManager, OptimizedBlockSpaceManager, ReferenceBlockSpaceManager],
    ids=["independent", "optimized", "reference"],
)
def test_empty_lookahead_blocks_a_fork_shared_are_no_aliasing(factory: Any) -> None:
    """Found by the stronger search (seed 2, 6000 steps, ``--profile safety``): a fork shares the
    parent's empty lookahead block; parent and child then write different tokens into the block
    before it. Both tables still name the empty block, after different tokens: nobody has written
    into it, and the first write copies it (S1 exempts it)."""
    config = ManagerConfig(2, 7, 1, 0.0, sliding_window=1, enable_caching=False)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2, 3], [3])),
        ("append_slots", (2, [], 3)),
        ("fork", (2, 4)),
        ("append_slots", (2, [1], 0)),
        ("append_slots", (4, [0], 0)),
        ("append_slots", (4, [2], 0)),
    ]
    shared = trace.trace_of_calls("manager", config, calls, safety=True)
    verdict = trace.replay(shared, factory)
    assert verdict.ok, verdict.describe()
