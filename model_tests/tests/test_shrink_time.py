"""A check cuts Hypothesis's shrinking short, and puts the limit back after."""

from __future__ import annotations

from hypothesis.internal.conjecture import engine

from model_tests.oracle.shrink_time import SHRINK_SECONDS, shrinking_for


def test_the_limit_holds_inside_and_is_restored_after() -> None:
    before = engine.MAX_SHRINKING_SECONDS
    with shrinking_for(2.5):
        assert engine.MAX_SHRINKING_SECONDS == 2.5
    assert before == engine.MAX_SHRINKING_SECONDS
    assert before > SHRINK_SECONDS  # else the cut would not be a cut


def test_the_limit_is_restored_after_a_failure() -> None:
    before = engine.MAX_SHRINKING_SECONDS
    try:
        with shrinking_for(1.0):
            raise RuntimeError("a failing check")
    except RuntimeError:
        pass
    assert before == engine.MAX_SHRINKING_SECONDS
