"""The mutation tool is honest: its mutants are the modules the killers import, its controls
refuse a score when they are not, and its arithmetic counts only what it should
(``model_tests/formal/mutate.py``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from types import CodeType

import pytest

from pagedkv.model_tests.formal import mutate
from pagedkv.model_tests.formal.mutant_runner import Outcome
from pagedkv.model_tests.formal.mutants import (
    ROOT,
    Mutant,
    files_to_mutate,
    module_path,
    mutants_of,
    mutated_code,
)
from pagedkv.model_tests.formal.mutation_equivalents import EQUIVALENT, HOST_ONLY, TWINS


def _python(code: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout


def test_the_tool_imports_nothing_it_mutates() -> None:
    loaded = _python(
        """
        import sys
        from pagedkv.model_tests.formal import mutate
        print(sorted(m for m in sys.modules if m.startswith(("pagedkv.reference",
                                                             "pagedkv.optimized"))))
        """
    )
    assert loaded.strip() == "[]"


def test_every_module_of_both_folders_is_mutated() -> None:
    every = {
        f"{p.parent.name}/{p.name}"
        for d in ("reference", "optimized")
        for p in (ROOT / d).glob("*.py")
    }
    assert set(files_to_mutate()) == {f for f in every if not f.endswith("/__init__.py")}


def test_every_equivalent_entry_names_a_mutant_and_every_control_one() -> None:
    for file, source, description in {**EQUIVALENT, **HOST_ONLY}:
        assert any((m.source, m.description) == (source, description) for m in mutants_of(file)), (
            file,
            source,
            description,
        )
    for file, source, description, rank in TWINS:
        twins = [m for m in mutants_of(file) if (m.source, m.description) == (source, description)]
        assert len(twins) > rank and mutate.twin_rank(twins[rank]) == rank, (file, source, rank)
        assert mutate.equivalence(twins[rank]) == TWINS[(file, source, description, rank)]
        assert all(mutate.equivalence(m) is None for m in twins if m is not twins[rank])
    for control in mutate.CONTROLS:
        assert (mutate.equivalence(control.mutant()) is not None) == control.must_survive


def _lines(code: CodeType) -> set[int]:
    inner = (c for c in code.co_consts if isinstance(c, CodeType))
    return {line for *_, line in code.co_lines() if line} | set().union(*map(_lines, inner))


def test_a_mutant_keeps_the_files_name_and_lines() -> None:
    mutant = mutate.CONTROLS[1].mutant()
    path = module_path(mutant.file)
    real = _lines(compile(path.read_text(encoding="utf-8"), str(path), "exec"))
    code = mutated_code(mutant)
    assert code.co_filename == str(path)
    assert mutant.line + 1 in real - _lines(code)  # the deleted raise's message; none moved
    assert _lines(code) <= real and max(_lines(code)) == max(real)


def _outcome(mutant: Mutant, status: str) -> Outcome:
    return Outcome(mutant, status, 1.0, "")


def test_the_score_counts_gaps_and_leaves_out_only_equivalent_survivors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    evictor = mutants_of("optimized/evictor.py")
    equivalent = [m for m in evictor if mutate.equivalence(m)]
    other = [m for m in evictor if not mutate.equivalence(m)]
    results = [
        _outcome(equivalent[0], "survived"),
        _outcome(other[0], "killed"),
        _outcome(other[1], "timeout"),
        _outcome(other[2], "survived"),
        _outcome(other[3], "error"),
    ]
    assert mutate.score(results) == pytest.approx(50.0)
    assert mutate.report(results) == 1
    out = capsys.readouterr().out
    assert "GAP (survived)" in out and "GAP (error)" in out and "equivalent:" in out
    assert mutate.report(results[:3]) == 0
    # an "equivalent" mutant that a test kills is reported, and fails the run
    assert mutate.report([_outcome(equivalent[0], "killed"), *results[1:3]]) == 1
    assert "KILLED though EQUIVALENT" in capsys.readouterr().out


def test_the_first_pass_is_a_prefix_of_every_files_killers_without_the_machines() -> None:
    """So a mutant the first pass kills is killed by the whole set, which runs the same files
    first (pytest ``-x``)."""
    for file in files_to_mutate():
        first, every = mutate.first_pass_killers(file), mutate.killers_for(file)
        assert every[: len(first)] == first and len(first) < len(every)
        assert not any("lockstep" in k or "exhaustive" in k for k in first)


def test_a_result_from_an_earlier_version_of_its_file_scores_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mutant whose line has moved since it ran is no mutant of the file now: ``--rescore``
    leaves it out (and says so) rather than count a kill the current file never had."""
    current = mutants_of("optimized/evictor.py")[0]
    moved = replace(current, line=current.line + 1)
    kept = mutate.current_results(
        {current: _outcome(current, "killed"), moved: _outcome(moved, "killed")}
    )
    assert [o.mutant for o in kept] == [current]
    assert "optimized/evictor.py: 1 results from an earlier version" in capsys.readouterr().out


def test_a_misbehaving_control_refuses_the_score() -> None:
    behaved = [
        _outcome(c.mutant(), "survived" if c.must_survive else "killed") for c in mutate.CONTROLS
    ]
    assert mutate.control_refusal(behaved) is None
    for position, control in enumerate(mutate.CONTROLS):
        wrong = "killed" if control.must_survive else "survived"
        outcomes = [
            *behaved[:position],
            _outcome(control.mutant(), wrong),
            *behaved[position + 1 :],
        ]
        refusal = mutate.control_refusal(outcomes)
        assert refusal is not None and control.mutant().name in refusal


def test_the_controls_refuse_the_old_import_order() -> None:
    """The controls, run for real with one fast killer file: in the honest order they behave; with
    the real modules imported before the mutant (the old tool's order) they refuse, by the import
    checks, and by the controls alone when those checks are off."""
    verdicts = _python(
        """
        from pagedkv.model_tests.formal import mutate
        from pagedkv.model_tests.formal.mutant_runner import Child
        killers = ["pagedkv/model_tests/tests/test_pool_examples.py"]
        early = ("pagedkv.model_tests.machines.explorer",)
        print(mutate.check_controls(killers, 2, 600))
        print(mutate.check_controls(killers, 2, 600, Child(before_install=early)))
        print(mutate.check_controls(killers, 2, 600, Child(early, check_imports=False)))
        """
    ).splitlines()
    assert verdicts[0] == "None"
    assert verdicts[1].startswith("refused, no score:")
    assert "imported before the mutant was installed" in verdicts[1]
    assert verdicts[2].startswith(
        "refused, no score: the control reference/allocation.py:"
    ) and verdicts[2].endswith("delete the raise must be killed but was survived")
