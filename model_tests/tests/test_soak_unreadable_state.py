"""A target whose own ``view`` or ``compact`` fails, or whose ``view`` is not a view, fails an
exact-mode soak with a divergence that says so: the soak reads the whole state through them, so
their failure is the target's, never ``pagedkv: internal error``."""

from __future__ import annotations

import random

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import soak
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.compact_state import CompactManager
from pagedkv.specs.manager_view import ManagerView


class ViewRaises(OptimizedBlockSpaceManager):
    def view(self) -> ManagerView:
        raise RuntimeError("no view for you")


class ViewIsNotAView(OptimizedBlockSpaceManager):
    def view(self) -> ManagerView:
        return 42  # type: ignore[return-value]


class CompactRaises(OptimizedBlockSpaceManager):
    def compact(self) -> CompactManager:
        raise RuntimeError("no compact")


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (
            ViewRaises,
            "reading the target's whole state (its view(), or compact()) raised"
            " RuntimeError: no view for you",
        ),
        (ViewIsNotAView, "the target's view() returned 42, not a ManagerView"),
        (
            CompactRaises,
            "reading the target's whole state (its view(), or compact()) raised"
            " RuntimeError: no compact",
        ),
    ],
)
def test_the_targets_failure_to_show_its_state_is_a_divergence(
    target: type[OptimizedBlockSpaceManager], says: str
) -> None:
    result = soak.soak(target, 500, 1, exact=True, model=OPTIMIZED)
    assert result.failure is not None and says in result.failure, result.failure


def test_a_view_that_is_not_a_view_is_named_where_the_views_are_compared() -> None:
    side = soak.Lockstep(ViewIsNotAView, soak.random_config(random.Random(1)), exact=True)
    with pytest.raises(Divergence, match="view\\(\\) returned 42, not a ManagerView"):
        side.check_state("at the checkpoint")
