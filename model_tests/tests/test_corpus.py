"""The corpus (``specs/corpus.md``): every clause of the spec has a wrong variant, and each variant
fails ``pagedkv check`` with the default budget, shrunk to at most 12 steps, with a trace that
replays the failure.

``make test`` checks each variant with one seed of 0, 1 and 2 (its place in the registry,
modulo 3, so that all three are in use); ``make corpus`` checks every variant with all three
(``python -m model_tests.corpus.measure``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from model_tests.corpus.measure import BEGIN, END, MAX_SHRUNK_STEPS, SEEDS, check, table
from model_tests.corpus.registry import CLAUSES, OUT_OF_REACH, VARIANTS, Variant, uncovered
from model_tests.oracle import trace

SPECS = Path(__file__).resolve().parents[2] / "specs"


def test_every_clause_has_a_wrong_variant() -> None:
    assert uncovered() == []
    assert set(OUT_OF_REACH) <= set(CLAUSES)
    assert all(clause in CLAUSES for each in VARIANTS for clause in each.clauses)


def test_at_least_twenty_named_variants() -> None:
    names = [each.name for each in VARIANTS]
    assert len(names) == len(set(names)) >= 20
    assert all(each.bug for each in VARIANTS), [e.name for e in VARIANTS if not e.bug]


def test_each_clause_cites_a_page_of_the_spec() -> None:
    for clause, where in CLAUSES.items():
        page = where.split(" ")[0]
        assert (SPECS / page).is_file(), (clause, where)


def test_the_page_shows_every_variant_with_its_clauses() -> None:
    """The page's table is the registry's (its figures come from ``make corpus``)."""
    page = (SPECS / "corpus.md").read_text(encoding="utf-8")
    shown = page.split(BEGIN + "\n")[1].split("\n" + END)[0].splitlines()
    expected = table({}, SEEDS).splitlines()
    assert [_without_figures(row) for row in shown] == [_without_figures(r) for r in expected]


def _without_figures(row: str) -> str:
    cells = row.split(" | ")
    return " | ".join(cells[:3]) if len(cells) >= 5 else row


def _one_seed(index: int) -> int:
    return SEEDS[index % len(SEEDS)]


@pytest.mark.parametrize(
    ("each", "seed"),
    [(each, _one_seed(i)) for i, each in enumerate(VARIANTS)],
    ids=lambda value: value.name if isinstance(value, Variant) else f"seed {value}",
)
def test_the_default_check_catches_the_variant(each: Variant, seed: int) -> None:
    result = check(each, seed)
    assert not result.passed, f"{each.name} passed seed {seed}: the oracle misses {each.clauses}"
    assert result.found_after is not None and result.trace is not None, result.message
    assert len(result.trace.ops) <= MAX_SHRUNK_STEPS, (each.name, len(result.trace.ops))
    assert result.replayed is not None and result.replayed.status == "divergence", result.message
    assert not re.search(r"Traceback", result.message)
    again = trace.loads(trace.dumps(result.trace))  # the trace as written, read back
    assert trace.replay(again, each.factory).status == "divergence"
    passed = trace.replay(again, each.correct)  # the same calls, without the bug
    assert passed.ok, f"{each.name}: {passed.describe()}"
