"""Messages a new user meets first (issue 26, item 4): a factory checked at the wrong level names
the level to pass, ``soak`` takes ``--level`` and ``--groups`` as ``check`` does, ``show`` opens at
the divergence, and ``NO_COLOR`` means no escape codes at all.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest

from pagedkv import cli
from pagedkv.model_tests.bench.report import Section, Table
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.request_layouts import layout_of
from pagedkv.model_tests.oracle.soak import soak
from pagedkv.model_tests.tests.teaching_pages import SWAP_TARGET, swap_trace
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.errors import ConfigurationError
from pagedkv.specs.request_types import RequestConfig

POOL = "pagedkv.reference.pool_adapter:ReferenceBlockPool"
MANAGER = "pagedkv.reference.manager_adapter:ReferenceBlockSpaceManager"
REQUEST = "pagedkv.reference.request_adapter:ReferenceRequestKVManager"
DEFRAGMENTER = "pagedkv.optimized.defragmenter:OptimizedDefragmenter"
HERE = "pagedkv.model_tests.tests.test_messages"


def refuses_everything(config: Any) -> Any:
    raise ConfigurationError(f"no configuration suits me, {type(config).__name__} least of all")


def run_cli(*argv: str, stdout: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = stdout or io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- a wrong level names the right one ------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["check", "--target", POOL],
            "it builds pool targets (from a PoolConfig): pass --level pool",
        ),
        (
            ["check", "--target", REQUEST, "--level", "pool"],
            "it builds request targets (from a RequestConfig): pass --level request",
        ),
        (
            ["check", "--target", MANAGER, "--level", "request"],
            "it builds manager targets (from a ManagerConfig): pass --level manager",
        ),
        (
            ["check", "--target", DEFRAGMENTER],
            "it builds defrag targets (from a DefragConfig): pass --level defrag",
        ),
        (["soak", "--target", REQUEST], "pass --level request"),
        (
            ["soak", "--target", POOL],
            "it builds pool targets (from a PoolConfig), not manager ones",
        ),
    ],
)
def test_a_factory_of_another_level_is_named_with_the_option_to_pass(
    argv: list[str], says: str
) -> None:
    code, out, err = run_cli(*argv, "--steps", "5")
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and says in err, err
    assert "the factory raised ConfigurationError: expected a" in err  # its own words stay


def test_a_factory_that_builds_nothing_gets_no_hint() -> None:
    code, _, err = run_cli("check", "--target", f"{HERE}:refuses_everything", "--steps", "5")
    assert code == 2 and "no configuration suits me" in err and "it builds" not in err, err


def test_replay_names_what_the_factory_builds_without_advising_its_level_filter(
    tmp_path: Path,
) -> None:
    path = trace.write(swap_trace(), tmp_path / "swap.jsonl")  # a manager trace
    code, _, err = run_cli("replay", str(path), "--target", POOL)
    assert code == 2 and "it builds pool targets (from a PoolConfig), not manager ones" in err


# --- soak takes --level and --groups ----------------------------------------------------------


def test_soak_draws_only_the_group_layouts_asked_for() -> None:
    seen: list[RequestConfig] = []

    def recording(config: RequestConfig) -> ReferenceRequestKVManager:
        seen.append(config)
        return ReferenceRequestKVManager(config)

    result = soak(recording, 16_000, 3, exact=False, level="request", layouts=("window",))
    assert result.passed and result.episodes >= 8, result.failure
    assert {layout_of(config) for config in seen} == {"window"}
    seen.clear()
    soak(recording, 16_000, 3, exact=False, level="request")
    assert {layout_of(config) for config in seen} == {"full", "window", "hybrid"}


def test_soak_at_the_request_level_names_its_groups() -> None:
    code, out, err = run_cli(
        "soak", "--level", "request", "--groups", "full,hybrid", "--steps", "300", "--seed", "0"
    )
    assert code == 0 and err == "", err
    assert "(request level, groups full,hybrid, exact mode, seed 0)" in out and "PASS" in out
    for groups, message in (
        ("paged", "unknown group layout paged"),
        (",full", "an empty group layout in ',full'"),
        ("full,,hybrid", "an empty group layout"),
        ("full,full", "group layout full given twice"),
    ):
        code, _, err = run_cli("soak", "--level", "request", "--groups", groups)
        assert code == 2 and message in err and err.count("\n") == 1, (groups, err)


# --- show opens at the divergence ------------------------------------------------------------


def test_shows_page_opens_at_the_divergence(tmp_path: Path) -> None:
    path = trace.write(swap_trace(), tmp_path / "swap.jsonl")
    code, out, _ = run_cli("show", str(path), "--target", SWAP_TARGET)
    assert code == 0 and "marked: step 9" in out
    html = (tmp_path / "swap.html").read_text()
    assert '<span id="position">step 9 of 9</span>' in html
    assert '<button type="button" id="to-finding" data-step="9">' in html
    # (the browser test, test_teaching_browser.py, shows the page's script opening there)

    run_cli("show", str(path), "-o", str(tmp_path / "alone.html"))  # nothing marked: step 0
    assert '<span id="position">step 0 of 9</span>' in (tmp_path / "alone.html").read_text()


# --- NO_COLOR ---------------------------------------------------------------------------------


STYLING = re.compile(r"\x1b\[[0-9;]*m")
"""An SGR escape: colour, bold, dim, underline (a spinner's cursor moves are not styling)."""


def test_no_color_means_no_styling_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    code, styled, _ = run_cli("demo", stdout=Terminal())
    assert code == 0 and "\x1b[1m" in styled  # bold, on a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    code, plain, _ = run_cli("demo", stdout=Terminal())
    assert code == 0 and not STYLING.search(plain) and "copies for the kernel: 3 → 5" in plain
    code, verdict, _ = run_cli("soak", "--steps", "200", "--seed", "0", stdout=Terminal())
    assert code == 0 and "PASS" in verdict and not STYLING.search(verdict), verdict
    monkeypatch.setenv("NO_COLOR", "")  # empty: as if unset (no-color.org)
    code, styled, _ = run_cli("demo", stdout=Terminal())
    assert "\x1b[1m" in styled


BENCH = Section(
    "operations",
    [
        Table(
            "per operation: median microseconds, the reference against the optimized manager",
            ["operation", "calls", "reference", "optimized"],
            [["allocate", 120, 12.345, 1.2], ["append_slots", 4000, 120.5, float("nan")]],
            ["load average 1.0"],
        )
    ],
)


def test_a_benchmark_table_is_rich_on_a_terminal_and_plain_text_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same rich table three ways: boxed and styled on a terminal, boxed without a single
    escape code under ``NO_COLOR``, and plain aligned text (title whole, a dashed line under the
    header, numbers to the right) where the output is not a terminal."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    styled = Terminal()
    cli.Output(styled).section(BENCH)
    assert STYLING.search(styled.getvalue()) and "┏━" in styled.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    uncoloured = Terminal()
    cli.Output(uncoloured).section(BENCH)
    assert not STYLING.search(uncoloured.getvalue()) and "┃ operation" in uncoloured.getvalue()
    plain = io.StringIO()
    cli.Output(plain).section(BENCH)
    assert plain.getvalue().splitlines() == [
        "per operation: median microseconds, the reference against the optimized manager",
        "operation     calls  reference  optimized",
        "------------- ------ ---------- ---------",
        "allocate        120       12.3      1.200",
        "append_slots   4000      120.5          -",
        "  load average 1.0",
        "",
    ]


def test_a_label_in_square_brackets_is_printed_not_taken_for_markup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's label names its stream in brackets (``optimized [vllm-v0 stream]``): rich would
    read that as a style tag and drop it, leaving two rows called ``optimized``."""
    table = Table(
        "replay check",
        ["implementation [policy]", "calls"],
        [["optimized", 3], ["optimized [vllm-v0 stream]", 4]],
        [],
    )
    monkeypatch.setenv("NO_COLOR", "1")
    for out in (io.StringIO(), Terminal()):
        cli.Output(out).section(Section("replay", [table]))
        assert "optimized [vllm-v0 stream]" in out.getvalue()
        assert "implementation [policy]" in out.getvalue()
