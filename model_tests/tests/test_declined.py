"""Declared limits (``specs/oracle.md`` §2): a factory may decline a configuration with
``UnsupportedError``; the check skips it, draws another, lists what was not covered, and fails
only if nothing could be covered."""

from __future__ import annotations

from typing import Any

from pagedkv.model_tests.oracle.check import NothingCovered, check_report, run_check
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.types import ManagerConfig

WHY = "prefix caching with a sliding window"


def declines_caching_with_a_window(config: ManagerConfig) -> Any:
    """The reference, except for one kind of configuration (as vLLM 0.6.3 refuses this one)."""
    if config.enable_caching and config.sliding_window is not None:
        raise UnsupportedError(WHY)
    return ReferenceBlockSpaceManager(config)


def declines_everything(config: ManagerConfig) -> Any:
    raise UnsupportedError("nothing at all")


def test_a_declined_configuration_is_skipped_and_listed() -> None:
    result = run_check(declines_caching_with_a_window, steps=600, seed=0, trace_out=None)
    assert result.passed, result.message
    assert result.declined, "the search drew no such configuration: the test shows nothing"
    assert all(why == WHY for why in result.declined.values())
    assert all("sliding_window=None" not in config for config in result.declined)
    report = check_report(result, "declines_caching_with_a_window")
    assert report.ok and "configurations it declines" in report.verdict, report.verdict
    assert any(line.startswith("not covered: ") and WHY in line for line in report.notes)


def test_a_target_that_declines_everything_fails() -> None:
    result = run_check(declines_everything, steps=300, seed=0, trace_out=None)
    assert not result.passed and isinstance(result.failure, NothingCovered)
    report = check_report(result, "declines_everything")
    assert not report.ok and "declined every configuration" in report.plain(), report.plain()
