"""``pagedkv soak --level request`` must reach a reset that succeeds (``request_soak.py``): a
manager whose ``reset_prefix_cache`` is broken only where it succeeds (it answers right, and when
it answers True clears nothing, or sends ``AllBlocksCleared`` and keeps every cached block) FAILs
the soak in a modest number of steps, not only ``check``."""

from __future__ import annotations

import random

import pytest

from pagedkv.model_tests.oracle.request_soak import RequestLockstep, RequestWalk
from pagedkv.model_tests.oracle.soak import soak
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.specs.call import Call
from pagedkv.specs.request_types import AllBlocksCleared, RequestConfig

CATCH_WITHIN = 6_000
"""Steps a broken reset may survive: three episodes of the walk (seed 0 catches both at about
2,600; over seeds 0-19 the most any took was about 5,300)."""


class ResetDoesNothing(RequestManager):
    """Answers as the spec does (True only when every block is free) and then clears nothing and
    sends no event."""

    def reset_prefix_cache(self) -> bool:
        return len(self._queue) == self._num_blocks - 1


class ResetKeepsTheCache(RequestManager):
    """Answers as the spec does and sends ``AllBlocksCleared``, but keeps every cached block
    findable."""

    def reset_prefix_cache(self) -> bool:
        if len(self._queue) != self._num_blocks - 1:
            return False
        if self._caching:
            self._events.append(AllBlocksCleared())
        return True


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (ResetDoesNothing, "reset_prefix_cache(), then take_events()"),
        (ResetKeepsTheCache, "allocate_slots("),
    ],
)
def test_a_broken_reset_fails_the_request_soak(broken: type[RequestManager], says: str) -> None:
    """Isomorphic mode, as for any target of the user's: only results and events compared."""
    result = soak(broken, CATCH_WITHIN, 0, exact=False, level="request")
    assert not result.passed, f"{broken.__name__} passed {result.steps} steps"
    assert result.own_bug is None and result.replays, result.own_bug
    assert (result.failure or "").startswith(says), result.failure
    assert any(method == "reset_prefix_cache" for method, _ in result.calls), result.calls


def test_the_correct_manager_passes_the_request_soak() -> None:
    for exact in (False, True):
        result = soak(RequestManager, CATCH_WITHIN, 0, exact=exact, level="request")
        assert result.passed, result.failure


class Counting(RequestLockstep):
    """Counts the resets the walk makes and the ones that succeed."""

    resets = 0
    succeeded = 0

    def call(self, call: Call[object, object]) -> object:  # type: ignore[override]
        answer = super().call(call)
        if call.name == "reset_prefix_cache":
            Counting.resets += 1
            Counting.succeeded += answer is True
        return answer


def test_the_walk_reaches_resets_that_succeed_and_ones_that_fail() -> None:
    Counting.resets = Counting.succeeded = 0
    rng = random.Random(0)
    for _ in range(5):
        config = RequestConfig(num_blocks=8, block_size=2, enable_caching=True)
        side = Counting(RequestManager, config, exact=True)
        side.begin()
        walk = RequestWalk(rng, side)
        while len(side.calls) < 2_000:
            walk.step()
    assert Counting.succeeded >= 10, (Counting.resets, Counting.succeeded)
    assert Counting.resets - Counting.succeeded >= 10, (Counting.resets, Counting.succeeded)
