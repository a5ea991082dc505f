"""A soak's divergence that ``pagedkv replay`` does not show (exact mode: replay compares
isomorphically, and would PASS) is offered as no replay command, in the report or the verdict
file: a CI job that reran it would turn a known-bad target green."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagedkv import cli
from pagedkv.model_tests.oracle.soak import SoakResult
from pagedkv.specs.types import ManagerConfig


@pytest.mark.parametrize("replays", [True, False])
def test_a_replay_command_is_offered_only_where_replay_shows_the_divergence(
    replays: bool,
) -> None:
    result = SoakResult(
        steps=10,
        episodes=1,
        failure="after free(1): differs",
        config=ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2),
        trace_path=Path("t.jsonl"),
        replays=replays,
    )
    report, hint = cli._soak_report(result, "mine:Target", "manager", (), True, 7, None)
    said = report.plain()
    if replays:
        assert hint is not None and hint.startswith("pagedkv replay t.jsonl")
        assert f"replay: {hint}" in said
    else:
        assert hint is None and "replay: " not in said
        assert "t.jsonl --target mine:Target compares isomorphically and does not show it" in said
        assert "(it would pass)" in said and "seed 7" in said
