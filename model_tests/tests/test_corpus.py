"""The corpus (``specs/corpus.md``): every clause of the spec has a wrong variant, and each variant
fails ``pagedkv check`` with the default budget, shrunk to at most 12 steps, with a trace that
replays the failure.

``make test`` replays each variant's stored trace (``model_tests/corpus/traces/``, written by
``make corpus``) and searches for a few variants live; ``make corpus`` searches for every variant
with all three seeds (``python -m pagedkv.model_tests.corpus.measure``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagedkv.model_tests.corpus.measure import (
    BEGIN,
    END,
    MAX_SHRUNK_STEPS,
    SEEDS,
    check,
    table,
    trace_path,
)
from pagedkv.model_tests.corpus.registry import (
    CLAUSES,
    OUT_OF_REACH,
    VARIANTS,
    Variant,
    uncovered,
    variant,
)
from pagedkv.model_tests.oracle import trace

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


LIVE = (
    "BrokenSwapDropsPair",
    "BrokenNoUpFrontCheck",
    "BrokenFreeLeaksLastBlock (safety)",
    "PoolForkForgetsLastBlock",
    "PoolMarkComputedSkipsCached",
    "reference with window_release=computed_blocks",
    "RequestFreeHeadFirst",
)
"""Variants ``make test`` searches for live, one of each kind (a broken manager, one under the
safety tier, a wrong pool, another policy choice, a broken request manager), each with one of
the three seeds; ``make corpus`` searches for every variant with all three."""


UNCAUGHT: dict[str, str] = {}
"""Variants no seed caught (so ``make corpus`` stored no trace): each a gap of the oracle, kept
as a strict expected failure that turns into a failure once a trace exists."""


def _stored(each: Variant) -> object:
    if each.name in UNCAUGHT:
        return pytest.param(each, marks=pytest.mark.xfail(reason=UNCAUGHT[each.name], strict=True))
    return each


@pytest.mark.parametrize("each", [_stored(each) for each in VARIANTS], ids=lambda each: each.name)
def test_the_stored_trace_fails_the_variant_and_passes_without_the_bug(each: Variant) -> None:
    """The trace ``make corpus`` stored for the variant still shows its bug, and only its bug."""
    path = trace_path(each.name)
    assert path.is_file(), f"{each.name}: no stored trace; run make corpus"
    stored = trace.loads(path.read_text(encoding="utf-8"))
    assert len(stored.ops) <= MAX_SHRUNK_STEPS, (each.name, len(stored.ops))
    failed = trace.replay(stored, each.factory)
    assert failed.status == "divergence", f"{each.name}: {failed.describe()}"
    passed = trace.replay(stored, each.correct)
    assert passed.ok, f"{each.name}: {passed.describe()}"


@pytest.mark.parametrize(
    ("name", "seed"),
    [(name, SEEDS[i % len(SEEDS)]) for i, name in enumerate(LIVE)],
    ids=lambda value: value if isinstance(value, str) else f"seed {value}",
)
def test_the_default_check_catches_the_variant(name: str, seed: int) -> None:
    each = variant(name)
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
