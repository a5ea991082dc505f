"""vLLM 0.6.3 driven natively (``model_tests/peers/vllm_v0_replay.py``) is the same workload as
the adapter the oracle checks: on the ``vllm-v0`` stream its answers, block tables included,
are the adapter's, call for call; a translation that drops the engine's token appends is seen
to answer otherwise; and ``pagedkv bench``'s native section times it beside pagedkv's optimized
manager, end to end and per operation, and draws its panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib import pyplot

from pagedkv.model_tests.bench import manager_sections, plot, streams
from pagedkv.model_tests.bench.report import Spread
from pagedkv.model_tests.bench.scheduler import digest
from pagedkv.model_tests.bench.sections import Context, Options, workload_spec
from pagedkv.model_tests.bench.workload import Workload
from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.vllm_v0_manager import VllmV0Manager
from pagedkv.model_tests.peers.vllm_v0_replay import NativeV0, VllmV0Replay
from pagedkv.model_tests.tests.test_peers import needs


@pytest.fixture(scope="module")
def stream() -> Workload:
    return streams.record(workload_spec(Options(quick=True)), "vllm-v0")[0]


def _adapter_answers(stream: Workload) -> list[Any]:
    adapter = VllmV0Manager(stream.config)
    found: list[Any] = []
    for method, args in stream.calls:
        try:
            found.append(getattr(adapter, method)(*args))
        except Exception as error:
            found.append(type(error).__name__)
    return found


@needs(sources.VLLM_V0)
def test_the_native_replay_answers_as_the_adapter_does(stream: Workload) -> None:
    native = manager_sections.answers(VllmV0Replay(), stream.config, stream.calls)
    methods = {method for method, _ in stream.calls}
    assert {"can_allocate", "allocate", "append_slots", "fork", "free", "swap_out"} <= methods
    assert native == _adapter_answers(stream)


@needs(sources.VLLM_V0)
def test_a_replay_without_the_engine_s_token_appends_answers_otherwise(
    stream: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison above can fail: vLLM's block tables follow the tokens in its sequences."""
    monkeypatch.setattr(NativeV0, "append_tokens", lambda *_: None)
    native = manager_sections.answers(VllmV0Replay(), stream.config, stream.calls)
    assert native != _adapter_answers(stream)


@needs(sources.VLLM_V0)
def test_the_bench_times_vllm_natively_beside_pagedkv(tmp_path: Path) -> None:
    options = Options(quick=True, scaling=(), repetitions=2, requests=False)
    context = Context(options)
    section = manager_sections.native_section(context)
    data = section.data[VllmV0Replay.name]
    managers = data["managers"]
    assert list(managers) == ["pagedkv optimized", VllmV0Replay.name]
    assert managers[VllmV0Replay.name]["ratio_to_pagedkv"]["n"] == 2
    recorded = context.streams["vllm-v0"]  # recorded by the section: no target needed it
    adapter = _adapter_answers(recorded)
    differ = sum(
        digest(mine) != then for mine, then in zip(adapter, recorded.outcomes, strict=True)
    )
    assert managers[VllmV0Replay.name]["answers_differ"] == differ
    operations = data["operations"]
    for op in ("can_allocate", "allocate", "append_slots", "free", "get_block_table"):
        assert operations[op]["ratio_to_pagedkv"]["median"] > 0, op
    assert "ratio_to_pagedkv" not in operations["(request arrives: SequenceGroup made)"]
    whole, per_op = section.tables
    for table in section.tables:
        spreads = [value for row in table.rows for value in row if isinstance(value, Spread)]
        assert spreads and all(s.low <= s.median <= s.high for s in spreads)
        assert "median [min, max]" in table.title
    assert len(whole.rows) == 2 and len(per_op.rows) == len(operations)
    figure = pyplot.figure()
    draw = plot.native_panel({"native": section.data})
    assert draw is not None
    draw(figure.add_subplot())
    at = [list(line.get_xdata()) for line in figure.axes[0].get_lines()]  # type: ignore[arg-type]
    assert [1.0, 1.0] in at  # the line at 1
    pyplot.close(figure)
    assert plot.native_panel({"native": {}}) is None  # no empty panel
