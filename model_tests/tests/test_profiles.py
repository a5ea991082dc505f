"""The profiles make generation depend on the seed and the strategies alone, not on which
modules other tests (or a target under check) happened to load first."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from pagedkv.model_tests.machines import profiles


def draws() -> list[int]:
    seen: list[int] = []

    @settings(derandomize=True, database=None, max_examples=300, phases=[Phase.generate])
    @given(st.integers(0, 10**12))
    def collect(value: int) -> None:
        seen.append(value)

    collect()
    return seen


def test_a_module_loaded_between_two_runs_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypothesis draws constants from the source of loaded local modules; once the profile is
    loaded, a module full of constants imported mid-session does not change what is drawn."""
    profiles.load()
    before = draws()
    name = f"probe_constants_{tmp_path.name}"
    constants = ", ".join(str(123_456_789 + 1_000_003 * i) for i in range(200))
    (tmp_path / f"{name}.py").write_text(f"VALUES = [{constants}]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(name)
    try:
        assert draws() == before
    finally:
        sys.modules.pop(name, None)


def test_an_unknown_profile_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGEDKV_PROFILE", "quick")
    with pytest.raises(profiles.ProfileError, match="expected one of dev, ci, fuzz"):
        profiles.active_profile()
