"""An exact-mode soak holds a target's answers to what they said, as ``check`` does
(``lockstep/answers.py``, ``specs/oracle.md`` §1): a list handed back and then overwritten by the
next answer is a divergence, though each answer was right when it was given."""

from __future__ import annotations

from pagedkv.model_tests.lockstep.answers import REUSED
from pagedkv.model_tests.oracle import soak
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED
from pagedkv.model_tests.tests.false_pass_targets import OneTableList
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import Device


def test_a_list_reused_for_the_next_answer_fails_the_exact_soak() -> None:
    result = soak.soak(OneTableList, 5000, 1, exact=True, model=OPTIMIZED)
    assert result.failure is not None and REUSED in result.failure, result.failure


def test_a_correct_target_still_passes() -> None:
    assert soak.soak(OptimizedBlockSpaceManager, 3000, 1, exact=True, model=OPTIMIZED).passed


class HitRateOff(OptimizedBlockSpaceManager):
    """The hit rate ``off`` away from the reference's (where it is strictly between 0 and 1)."""

    off = 1e-16

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        rate = super().get_prefix_cache_hit_rate(device)
        return rate + self.off if 0 < rate < 1 else rate


class HitRateFarOff(HitRateOff):
    off = 1e-6


def test_hit_rates_are_held_to_checks_tolerance() -> None:
    """An ulp away passes, as under ``check`` (``manager_session.RATE_TOLERANCE``); further
    fails."""
    assert soak.soak(HitRateOff, 5000, 1, exact=True, model=OPTIMIZED).passed
    result = soak.soak(HitRateFarOff, 5000, 1, exact=True, model=OPTIMIZED)
    assert result.failure is not None and "get_prefix_cache_hit_rate" in result.failure
