"""A check cuts whatever Hypothesis does after a failure (the shrink time limit itself, a
Hypothesis internal, is tested in ``test_hypothesis_internals.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import check


def test_a_search_going_on_after_a_failure_is_cut(monkeypatch: Any, tmp_path: Path) -> None:
    """With no time left after a failure, the check stops at the failing run itself and reports
    it: its failure, its trace (minimized as ever), replayed. With the time, Hypothesis shrinks
    the same failure over more runs."""

    def checked() -> check.CheckResult:
        out = tmp_path / "t.jsonl"
        return check.run_check(broken.BrokenSwapDropsPair, steps=3000, seed=1, trace_out=out)

    shrunk = checked()
    monkeypatch.setattr(check, "AFTER_FAILURE_SECONDS", -1.0)
    cut = checked()
    for result in (shrunk, cut):
        assert isinstance(result.failure, Divergence), result.message
        assert result.replayed is not None and result.replayed.status == "divergence"
        assert result.trace is not None and len(result.trace.ops) <= 12
    assert cut.found_after is not None and cut.found_after == shrunk.found_after
    assert cut.runs == cut.found_after[0] < shrunk.runs  # not one run past the failing one
