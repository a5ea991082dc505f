"""A check's runs are counted against its budget, and the search stops when it should: the
budget spent with no failure, or a failure's aftermath cut."""

from __future__ import annotations

from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle.search import Search, epoch_seed
from pagedkv.specs.types import PoolConfig

CONFIG = PoolConfig(block_size=2, num_blocks=4)


def run(calls: int = 1, error: BaseException | None = None, config: object = CONFIG) -> RunRecord:
    made = tuple(("free", (n,)) for n in range(calls))
    return RunRecord("pool", config, made, failed_call=error is not None, error=error)


def test_the_budget_stops_the_check_after_its_runs() -> None:
    search = Search(runs_allowed=3)
    assert [search.go_on(run(calls=2)) for _ in range(3)] == [True, True, False]
    assert (search.runs, search.calls, search.found_after, search.cut) == (3, 6, None, False)


def test_a_run_declined_before_it_began_is_not_counted() -> None:
    search = Search(runs_allowed=1)
    assert search.go_on(run(config=None)) is True
    assert search.runs == 0


def test_after_a_failure_the_budget_no_longer_stops_shrinking() -> None:
    search = Search(runs_allowed=2, cut_after=60.0)
    failure = ValueError("diverges")
    assert search.go_on(run(calls=4)) is True
    assert search.go_on(run(calls=5, error=failure)) is True
    assert search.found_after == (2, 9)
    assert search.go_on(run(calls=3, error=failure)) is True  # past the budget: shrinking
    assert search.go_on(run(calls=7, error=failure)) is True
    assert search.shortest is not None and len(search.shortest.calls) == 3
    assert (search.runs, search.found_after, search.cut) == (4, (2, 9), False)


def test_a_failure_with_no_error_of_its_own_still_lifts_the_budget() -> None:
    """A run that ended comparing a configuration's acceptance failed (Hypothesis shrinks it)
    even where it holds no error to report."""
    search = Search(runs_allowed=1)
    comparing = RunRecord("pool", CONFIG, (), failed_call=False, checking_config=CONFIG)
    assert search.go_on(comparing) is True
    assert search.found_after == (1, 0) and search.shortest is None


def test_a_failure_s_aftermath_is_cut_and_the_shortest_failing_run_kept() -> None:
    search = Search(runs_allowed=100, cut_after=-1.0)
    assert search.go_on(run(calls=2)) is True
    assert search.go_on(run(calls=3, error=ValueError("diverges"))) is False
    assert search.cut and search.shortest is not None and len(search.shortest.calls) == 3


def test_the_first_search_has_the_check_s_own_seed() -> None:
    assert epoch_seed(42, 0) == 42
    assert len({epoch_seed(42, epoch) for epoch in range(10)}) == 10
