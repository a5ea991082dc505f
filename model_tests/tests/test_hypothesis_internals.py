"""What pagedkv relies on in Hypothesis beyond its documented API still exists and still works
(``machines/hypothesis_internals.py`` says what and why), and nothing else reaches for it.

A Hypothesis release that moves one of these fails here, naming the internal, instead of
making ``pagedkv check`` search differently without a word.
"""

from __future__ import annotations

import ast
import re
import tomllib
import unittest
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.internal.conjecture import engine, providers
from hypothesis.internal.constants_ast import Constants
from hypothesis.stateful import RuleBasedStateMachine, rule

from pagedkv.model_tests.lockstep.capture import RunHook, RunRecord
from pagedkv.model_tests.machines import hypothesis_internals
from pagedkv.model_tests.machines.hypothesis_internals import (
    DATA,
    TESTED,
    ScopedDatabase,
    leaving_when,
    run_choices,
    run_search,
    shrinking_for,
)
from pagedkv.model_tests.oracle.check import machine_case
from pagedkv.model_tests.oracle.record import reference_factory
from pagedkv.model_tests.oracle.search import SHRINK_SECONDS

ROOT = Path(__file__).resolve().parents[2]
OWNER = "model_tests/machines/hypothesis_internals.py"
VERSION = metadata.version("hypothesis")


def moved(what: str) -> str:
    return (
        f"Hypothesis {VERSION} no longer has {what}, which {OWNER} relies on: see its docstring"
        " for why, and fix it there (or keep Hypothesis inside the pinned range)"
    )


QUIET = settings(
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
    verbosity=Verbosity.quiet,
)


# --- the pin ----------------------------------------------------------------------------------


def test_the_pin_is_the_tested_range_and_hypothesis_is_inside_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [dep for dep in project["project"]["dependencies"] if dep.startswith("hypothesis")]
    (low, high) = TESTED
    assert pins == [f"hypothesis>={low[0]}.{low[1]},<{high[0]}.{high[1]}"]
    installed = tuple(int(part) for part in re.findall(r"\d+", VERSION)[:2])
    assert low <= installed < high, f"Hypothesis {VERSION} is outside the tested range {pins}"


# --- 1. the local constants pool --------------------------------------------------------------


def test_the_local_constants_pool_is_where_it_was() -> None:
    assert hasattr(providers, "_get_local_constants"), moved("providers._get_local_constants")
    assert hasattr(providers, "CONSTANTS_CACHE"), moved("providers.CONSTANTS_CACHE")
    assert hasattr(providers.CONSTANTS_CACHE, "cache"), moved("CONSTANTS_CACHE.cache")
    assert len(Constants()) == 0, moved("an empty constants_ast.Constants()")


def test_emptying_the_pool_empties_what_generation_reads() -> None:
    """What it does is tested in ``test_profiles.py`` (a module loaded mid-session changes
    nothing drawn); here, that the pool Hypothesis reads is the emptied one."""
    hypothesis_internals.empty_local_constants()
    assert len(providers._get_local_constants()) == 0, moved("the pool behind local constants")


# --- 2. the shrink time limit -----------------------------------------------------------------


def runs_after_a_failure(limit: float) -> int:
    """Test cases Hypothesis runs after the first failure of a list that shrinks a long way."""
    after: list[int] = []

    @settings(QUIET, derandomize=True, max_examples=1000, phases=[Phase.generate, Phase.shrink])
    @given(st.lists(st.integers(0, 10**6), min_size=10))
    def fails_on_a_large_sum(values: list[int]) -> None:
        if after or sum(values) > 10**6:
            after.append(1)
        if sum(values) > 10**6:
            raise ValueError("too large")

    with shrinking_for(limit), pytest.raises(ValueError):
        fails_on_a_large_sum()
    return len(after) - 1


def test_a_shrink_time_limit_takes_effect() -> None:
    assert hasattr(engine, "MAX_SHRINKING_SECONDS"), moved("engine.MAX_SHRINKING_SECONDS")
    shrunk, cut = runs_after_a_failure(60.0), runs_after_a_failure(0.0)
    assert cut < 20 < shrunk, moved(
        f"a working engine.MAX_SHRINKING_SECONDS (shrinking ran {cut} cases with no time"
        f" left, {shrunk} with a minute)"
    )


def test_the_limit_holds_inside_and_is_restored_after() -> None:
    before = engine.MAX_SHRINKING_SECONDS
    with shrinking_for(2.5):
        assert engine.MAX_SHRINKING_SECONDS == 2.5
    assert before == engine.MAX_SHRINKING_SECONDS
    assert before > SHRINK_SECONDS  # else the checks' limit would not be a cut


def test_the_limit_is_restored_after_a_failure() -> None:
    before = engine.MAX_SHRINKING_SECONDS
    with pytest.raises(RuntimeError), shrinking_for(1.0):
        raise RuntimeError("a failing check")
    assert before == engine.MAX_SHRINKING_SECONDS


# --- 3. leaving a search, and the seed (public, relied on the same way) ------------------------


def pool_case() -> Any:
    """The isomorphic pool machine with the reference on both sides (runs of milliseconds)."""
    return machine_case(reference_factory("pool"), "pool")


def test_a_seeded_search_makes_the_same_runs_again() -> None:
    case = pool_case()
    runs: list[RunRecord] = []
    case.on_run_end = staticmethod(runs.append)

    def calls_of(seed: int) -> list[Any]:
        runs.clear()
        run_search(case, seed=seed, settings=settings(QUIET, max_examples=8))
        return [(run.config, run.calls) for run in runs]

    first = calls_of(7)
    assert len(first) >= 8
    assert calls_of(7) == first, "the same seed made other runs: @seed on a machine class?"
    assert calls_of(8) != first


# --- item 6: the rules' interactive draws --------------------------------------------------------


def _drawn_by(data_strategy: st.SearchStrategy[Any], seed: int) -> list[Any]:
    """Every value a seeded search's rules draw through ``data_strategy`` (as ``st.data()``),
    long enough for Hypothesis to mutate runs it made (which reads their spans' labels)."""
    drawn: list[Any] = []

    class Drawing(RuleBasedStateMachine):
        @rule(data=data_strategy)
        def small(self, data: Any) -> None:
            drawn.append(type(data).__name__)
            drawn.append(data.draw(st.integers(0, 9)))

        @rule(data=data_strategy)
        def listed(self, data: Any) -> None:
            size = data.draw(st.integers(0, 3))
            drawn.append(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))

    run_search(Drawing, seed=seed, settings=settings(QUIET, max_examples=60))
    return drawn


def test_data_draws_what_st_data_draws() -> None:
    """``DATA`` makes the same runs as ``st.data()``: the same values, drawn in the same order,
    over a search long enough to mutate (its spans carry ``st.data()``'s label)."""
    assert DATA.label == st.data().label
    for seed in (0, 1):
        quick, plain = _drawn_by(DATA, seed), _drawn_by(st.data(), seed)
        assert "QuickDataObject" in quick, "DATA drew with st.data()'s own object"
        assert [v for v in quick if v != "QuickDataObject"] == [
            v for v in plain if v != "DataObject"
        ]


def test_data_draws_as_st_data_does_where_a_report_lists_the_draws() -> None:
    """A falsifying example replayed for a report (``Verbosity.normal``) still lists each draw."""

    @settings(QUIET, verbosity=Verbosity.normal, max_examples=5)
    @given(DATA)
    def fails(data: Any) -> None:
        data.draw(st.integers(0, 3), label="a number")
        raise ValueError("planted")

    with pytest.raises(ValueError, match="planted") as raised:
        fails()
    assert any("Draw 1 (a number):" in note for note in raised.value.__notes__)


def test_a_search_is_left_after_the_run_the_hook_says_no_to() -> None:
    case = pool_case()
    runs: list[RunRecord] = []

    def three(record: RunRecord) -> bool:
        runs.append(record)
        return len(runs) < 3

    case.on_run_end = staticmethod(leaving_when(three))
    assert run_search(case, seed=1, settings=settings(QUIET, max_examples=20)) is True
    assert len(runs) == 3
    runs.clear()

    def every(record: RunRecord) -> bool:
        runs.append(record)
        return True

    case.on_run_end = staticmethod(leaving_when(every))
    assert run_search(case, seed=1, settings=settings(QUIET, max_examples=5)) is False
    assert len(runs) >= 5


class AlwaysFails(RuleBasedStateMachine):
    """Every run fails; each end of a run tells the class's hook, as a lockstep machine does."""

    on_run_end: ClassVar[RunHook | None] = None
    ended = 0

    @rule()
    def fail(self) -> None:
        raise ValueError("a failure Hypothesis would shrink")

    def teardown(self) -> None:
        AlwaysFails.ended += 1
        hook = type(self).on_run_end
        assert hook is not None
        hook(RunRecord(level="pool", config=None, calls=(), failed_call=True))


def test_leaving_on_a_failing_run_leaves_at_once_without_shrinking() -> None:
    """The failure is not raised, and not one run follows (no shrinking, no report)."""
    AlwaysFails.on_run_end = staticmethod(leaving_when(lambda record: False))
    AlwaysFails.ended = 0
    shrinking = settings(QUIET, max_examples=50, phases=[Phase.generate, Phase.shrink])
    assert run_search(AlwaysFails, seed=0, settings=shrinking) is True, moved(
        "letting a BaseException of its caller's through a search"
    )
    assert AlwaysFails.ended == 1
    AlwaysFails.on_run_end = staticmethod(leaving_when(lambda record: True))
    with pytest.raises(ValueError):
        run_search(AlwaysFails, seed=0, settings=shrinking)


# --- 4. and 5. a run's choices, and where a search reads its failures -------------------------


class FailsPastTen(RuleBasedStateMachine):
    """Fails once its numbers add up past ten; each run's choices are kept at its end."""

    runs: ClassVar[list[tuple[bytes, tuple[int, ...]]]] = []

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[int] = []

    @rule(number=st.integers(0, 6))
    def add(self, number: int) -> None:
        self.drawn.append(number)
        assert sum(self.drawn) <= 10

    def teardown(self) -> None:
        FailsPastTen.runs.append((run_choices(), tuple(self.drawn)))


def test_a_failing_run_s_choices_stored_in_a_scope_are_replayed_first() -> None:
    searching = settings(QUIET, max_examples=200, stateful_step_count=8)
    FailsPastTen.runs.clear()
    with pytest.raises(AssertionError):
        run_search(FailsPastTen, seed=3, settings=searching)
    choices, drawn = FailsPastTen.runs[-1]
    assert sum(drawn) > 10
    shared = InMemoryExampleDatabase()
    scoped = ScopedDatabase(shared, b"one check")
    replaying = settings(searching, database=scoped, phases=[Phase.reuse, Phase.shrink])
    with pytest.raises(unittest.SkipTest):  # nothing stored: no run at all
        run_search(FailsPastTen, seed=4, settings=replaying)
    assert scoped.primary is not None, moved("reading a search's failures under its own key")
    assert scoped.store_failure(choices)
    assert all(key.startswith(b"one check:") for key in shared.data)
    FailsPastTen.runs.clear()
    try:
        run_search(FailsPastTen, seed=4, settings=replaying)
    except unittest.SkipTest:  # pytest would take it for a skip
        pytest.fail(moved("replaying what is stored under the key a search read first"))
    except AssertionError:
        pass
    assert FailsPastTen.runs, "the stored failure was replayed and did not fail"
    assert FailsPastTen.runs[0] == (choices, drawn), moved("a run replayed from its choices")
    other = ScopedDatabase(shared, b"another check")
    with pytest.raises(unittest.SkipTest):  # another scope replays nothing of this one's
        run_search(FailsPastTen, seed=4, settings=settings(replaying, database=other))


# --- nothing else reaches into Hypothesis ---------------------------------------------------------

PRIVATE_NAMES = {"StopTest", "Found", "Frozen", "DidNotReproduce"}
"""Names in ``hypothesis.errors`` that are its own control flow, not its documented API."""


def private_module(module: str) -> bool:
    parts = module.split(".")
    inner = any(part == "internal" or part.startswith("_") for part in parts)
    return parts[0] == "hypothesis" and (inner or parts[1:2] == ["reporting"])


def reaches(path: Path) -> list[str]:
    """Where ``path`` imports a Hypothesis module or name outside the documented API, or
    touches a ``_hypothesis_internal`` attribute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if private_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if private_module(node.module):
                found.append((node.lineno, node.module))
            if node.module == "hypothesis.errors":
                names = sorted(PRIVATE_NAMES & {alias.name for alias in node.names})
                found += [(node.lineno, f"hypothesis.errors.{name}") for name in names]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_hypothesis"):
            found.append((node.lineno, f".{node.attr}"))
    return [f"{path.name}:{line}: {what}" for line, what in found]


def test_only_the_internals_module_reaches_into_hypothesis() -> None:
    allowed = {ROOT / OWNER, Path(__file__).resolve()}
    folders = ("specs", "reference", "optimized", "model_tests", "pagedkv")
    modules = [
        path
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not (folder == "pagedkv" and path.parent != ROOT / "pagedkv")  # not again via links
    ]
    assert len(modules) > 50
    found = [where for path in modules if path not in allowed for where in reaches(path)]
    assert not found, f"only {OWNER} may reach into Hypothesis:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_reach(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from hypothesis.internal.conjecture import engine\n"
        "import hypothesis._settings\n"
        "from hypothesis.reporting import with_reporter\n"
        "from hypothesis.errors import StopTest, Unsatisfiable\n"
        "case._hypothesis_internal_use_seed = 1\n",
        encoding="utf-8",
    )
    assert [where.split(": ")[1] for where in reaches(planted)] == [
        "hypothesis.internal.conjecture",
        "hypothesis._settings",
        "hypothesis.reporting",
        "hypothesis.errors.StopTest",
        "._hypothesis_internal_use_seed",
    ]
