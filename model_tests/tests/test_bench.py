"""The benchmark and the soak, run small so that they cannot rot. No test here asserts a time:
benchmarks print, they do not judge.

What is asserted is what the figures rest on: the workload is the same for a seed, every
implementation answers its calls as recorded (so a replay is the same work everywhere), the
control loop replays it, an earlier commit can be exported beside today's, ``pagedkv bench``
writes every section, its JSON and its plot, every implementation is timed (one that answers
otherwise too, its differences counted; one under another profile on that profile's stream),
every timing table carries its spread, the plot draws implementations only and no empty panel,
the request level replays on vLLM 0.33.0's own ``KVCacheManager`` alike, and ``pagedkv soak``
passes the optimized manager, and finds and shrinks a broken one in either mode.
"""

from __future__ import annotations

import functools
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
from matplotlib import pyplot

from pagedkv import cli
from pagedkv.model_tests.bench import baseline, plot, replay, request_sections, runner
from pagedkv.model_tests.bench.control import ControlLoop
from pagedkv.model_tests.bench.report import Section, Spread
from pagedkv.model_tests.bench.sections import Context, Options, Target, workload_spec
from pagedkv.model_tests.bench.workload import build, to_trace
from pagedkv.model_tests.independent.broken import BrokenForgetsCowSource
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.soak import shrink, soak
from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.tests.test_peers import needs
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.policy import PROFILES

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def small() -> Any:
    return build(workload_spec(Options(quick=True)))


def test_the_workload_is_the_same_for_a_seed(small: Any) -> None:
    again = build(workload_spec(Options(quick=True)))
    assert again.calls == small.calls and again.outcomes == small.outcomes
    other = build(workload_spec(Options(quick=True, seed=1)))
    assert other.calls != small.calls
    methods = {method for method, _ in small.calls}
    assert {"allocate", "append_slots", "fork", "free", "swap_out", "swap_in"} <= methods
    assert small.totals.scheduled_tokens > 0 and small.totals.preempted_by_swap > 0


def test_every_implementation_answers_the_stream_as_recorded(small: Any) -> None:
    """The scheduler's stream is itself a conformance run: the reference gives every recorded
    answer, and the control loop replays it without an error."""
    for factory in (ReferenceBlockSpaceManager, OptimizedBlockSpaceManager):
        replay.check(factory, small.config, small.calls, small.outcomes)
    control = ControlLoop(small.config)
    for method, args in small.calls:
        getattr(control, method)(*args)


def test_a_replay_that_answers_otherwise_is_refused(small: Any) -> None:
    outcomes = list(small.outcomes)
    index = next(i for i, (m, _) in enumerate(small.calls) if m == "can_append_slots")
    outcomes[index] = not outcomes[index]
    with pytest.raises(replay.ReplayError, match=f"call {index + 1}, can_append_slots"):
        replay.check(OptimizedBlockSpaceManager, small.config, small.calls, outcomes)


def test_the_workload_as_a_trace_replays(small: Any, tmp_path: Path) -> None:
    cut = to_trace(replace_calls(small, small.calls[:600]))
    path = trace.write(cut, tmp_path / "workload.jsonl")
    code, out, err = run_cli("replay", str(path), "--target", "optimized")
    assert (code, err) == (0, ""), out
    assert "PASS: 600 steps" in out


def replace_calls(workload: Any, calls: list[Any]) -> Any:
    workload.calls, saved = calls, workload.calls
    try:
        return type(workload)(workload.spec, calls, [], workload.totals, workload.hit_rate)
    finally:
        workload.calls = saved


def test_an_earlier_commit_is_exported_under_its_own_name(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    root, spec = baseline.export("HEAD", tmp_path)
    package = baseline.package_name("HEAD")
    assert spec == f"{package}.optimized.block_manager:OptimizedBlockSpaceManager"
    source = (root / package / "optimized" / "block_manager.py").read_text()
    assert f"from {package}.optimized.block_pool import" in source
    assert "from pagedkv.specs.types import" in source  # the value types stay shared
    assert f"from {package}.specs.validation import" in source
    with pytest.raises(baseline.BaselineError, match="no-such-revision"):
        baseline.export("no-such-revision", tmp_path / "other")


BEFORE_ONE_NAME = "9640793"
"""The last commit whose modules import ``specs.x`` and ``optimized.x`` (before the one import
name): ``make bench``'s default baseline is older still."""


def test_a_commit_from_before_the_one_import_name_is_exported_too(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    try:
        root, spec = baseline.export(BEFORE_ONE_NAME, tmp_path)
    except baseline.BaselineError as error:
        if "rev-parse" in str(error):  # a shallow clone without that commit
            pytest.skip(str(error))
        raise
    package = baseline.package_name(BEFORE_ONE_NAME)
    source = (root / package / "optimized" / "block_manager.py").read_text()
    assert f"from {package}.optimized.block_pool import" in source
    assert "from pagedkv.specs.types import" in source  # today's value types, shared
    assert "\nfrom specs." not in source and "\nfrom optimized." not in source
    assert spec == f"{package}.optimized.block_manager:OptimizedBlockSpaceManager"


def test_pagedkv_bench_writes_every_section(tmp_path: Path) -> None:
    json_out, plot_out = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["bench", "--quick", "--kernels", "--json", str(json_out), "--plot", str(plot_out)]
    if shutil.which("git") is not None and (ROOT / ".git").exists():
        argv += ["--baseline", "HEAD"]
    code, out, err = run_cli(*argv)
    assert (code, err) == (0, ""), out
    document = json.loads(json_out.read_text())
    for section in ("machine", "workload", "check", "operations", "end_to_end", "memory"):
        assert document[section], section
    assert document["queries"]["optimized"]["access_all_blocks_in_seq"]
    assert document["scaling"]["every_call"]["control_us"]
    assert document["kernels"]["rows"], document["kernels"]
    assert plot_out.read_bytes().startswith(b"\x89PNG")
    assert "per operation" in out and "growth with the pool" in out and "block kernels" in out
    assert "request level" in out and document["requests"]["managers"]
    assert "GPU blocks, median [min, max] of 1 pass(es)" in out  # growth, with its spread
    if sources.VLLM_V0.fetched:  # the manager level against vLLM 0.6.3 driven natively
        assert document["native"] and "manager level per operation, CPU µs" in out


def test_pagedkv_bench_no_native_leaves_the_native_section_out(tmp_path: Path) -> None:
    json_out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--no-native", "--no-requests", "--scaling", ""]
    code, out, err = run_cli(*argv, "--json", str(json_out))
    assert (code, err) == (0, ""), out
    assert json.loads(json_out.read_text())["native"] == {}
    assert "manager level per operation" not in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["bench", "--reps", "0"], "argument --reps: expected a whole number from 1, got '0'"),
        (
            ["bench", "--scaling", "10,x"],
            "argument --scaling: expected comma-separated block counts",
        ),
        (["bench", "--target", "nosuch.module:factory"], "cannot import nosuch.module"),
        (["bench", "--baseline", "no-such-revision"], "--baseline no-such-revision"),
        (["bench", "--profile", "vllm-v1"], "--profile: profile vllm-v1 is for the pool and"),
        (["soak", "--steps", "0"], "argument --steps: expected a whole number from 1, got '0'"),
        (["check", "--workers", "100000"], "argument --workers: expected at most"),
        (["soak", "--json", ""], "'': an empty path names no file"),
        (["soak", "--groups", "window"], "--groups is for the request level (--level request)"),
        (
            ["check", "--target", "reference", "--groups", "window"],
            "--groups is for the request level (--level request)",
        ),
        (
            ["soak", "--target", "reference", "--reference-model"],
            "--reference-model is for exact mode (--exact)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and says in err and len(err.splitlines()) == 1, err


# --- every target timed, every table with its spread, the plot's panels ---------------------------


class MiscountsCachedTokens(OptimizedBlockSpaceManager):
    """Answers ``get_num_cached_tokens`` one too high: every such call differs."""

    def get_num_cached_tokens(self, seq_id: int) -> int:
        return super().get_num_cached_tokens(seq_id) + 1


class LacksCachedTokens(OptimizedBlockSpaceManager):
    """Raises where the recording has an answer (as vLLM 0.6.3 does)."""

    def get_num_cached_tokens(self, seq_id: int) -> int:
        raise UnsupportedError("no get_num_cached_tokens here")


def bench_quietly(*targets: Target) -> dict[str, Section]:
    options = Options(
        quick=True, targets=list(targets), scaling=(), requests=False, native_sides=()
    )
    return {section.name: section for section in runner.run(options, lambda _: None)}


@pytest.fixture(scope="module")
def answering_otherwise() -> dict[str, Section]:
    return bench_quietly(
        Target("miscounts", MiscountsCachedTokens), Target("lacks", LacksCachedTokens)
    )


def test_a_target_that_answers_otherwise_is_timed_and_its_differences_counted(
    small: Any, answering_otherwise: dict[str, Section]
) -> None:
    """It was dropped from every timing table without a word."""
    asked = sum(1 for method, _ in small.calls if method == "get_num_cached_tokens")
    first = 1 + next(i for i, (m, _) in enumerate(small.calls) if m == "get_num_cached_tokens")
    check = answering_otherwise["check"].data
    for name, raised in (("miscounts", 0), ("lacks", asked)):
        found = check[name]
        assert (found["differ"], found["raised"]) == (asked, raised), found
        assert found["first"]["number"] == first and found["first"]["method"] == (
            "get_num_cached_tokens"
        )
        assert found["per_operation"] == {"get_num_cached_tokens": asked}
        assert answering_otherwise["end_to_end"].data[name]["answers_differ"] == asked
        assert answering_otherwise["end_to_end"].data[name]["ratio_to_optimized"]["median"] > 0
        assert name in answering_otherwise["operations"].data["implementations"]
        assert name in answering_otherwise["memory"].data
        assert name in answering_otherwise["queries"].data
    assert check["optimized"]["differ"] == 0


def test_every_timing_table_carries_median_min_and_max(
    answering_otherwise: dict[str, Section],
) -> None:
    for name in ("operations", "end_to_end", "queries"):
        (table,) = answering_otherwise[name].tables
        spreads = [value for row in table.rows for value in row if isinstance(value, Spread)]
        assert spreads and all(s.low <= s.median <= s.high for s in spreads), name
        assert "median [min, max]" in table.title, table.title


def test_the_plot_draws_implementations_only_and_no_empty_panel(
    answering_otherwise: dict[str, Section], tmp_path: Path
) -> None:
    """It drew ``allocate_us_per_prompt_block`` as a fourth implementation, and left a panel
    empty where a section had no data."""
    document = {name: section.data for name, section in answering_otherwise.items()}
    assert document["operations"]["allocate_us_per_prompt_block"]  # kept, not as a series
    figure = pyplot.figure()
    draw = plot.operations_panel(document)
    assert draw is not None
    draw(figure.add_subplot())
    legend = figure.axes[0].get_legend()
    assert legend is not None
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == ["optimized", "miscounts", "lacks"]
    ratios = plot.end_to_end_panel(document)
    assert ratios is not None
    ratios(figure.add_subplot())
    at = [list(cast(list[float], line.get_xdata())) for line in figure.axes[1].get_lines()]
    assert [1.0, 1.0] in at  # the line at 1
    pyplot.close(figure)
    assert "pool" in document  # the quick run has the pool section: its panel is drawn
    assert plot.draw(document, tmp_path / "bench.png") == 3  # operations, end to end, pool
    assert plot.kernels_panel(document) is None and plot.scaling_panel(document) is None


def test_a_target_under_another_profile_replays_that_profile_s_stream() -> None:
    """vLLM 0.6.3's policy asks other questions: its target replays the stream the scheduler
    makes over the reference under ``vllm-v0``, and is held to that recording."""
    model = functools.partial(ReferenceBlockSpaceManager, policy=PROFILES["vllm-v0"])
    found = bench_quietly(Target("vllm-v0 model", model, profile="vllm-v0"))
    streams = found["workload"].data["streams"]
    assert set(streams) == {"pagedkv", "vllm-v0"}
    check = found["check"].data
    assert check["vllm-v0 model [vllm-v0 stream]"]["differ"] == 0
    assert check["optimized [vllm-v0 stream]"]["differ"] > 0  # the policies differ
    assert check["vllm-v0 model [vllm-v0 stream]"]["calls"] == streams["vllm-v0"]["calls"]
    assert "vllm-v0 model [vllm-v0 stream]" in found["end_to_end"].data


@needs(sources.VLLM_V1)
def test_the_request_level_replays_alike_on_vllm_s_own_kv_cache_manager() -> None:
    options = Options(quick=True, scaling=(), repetitions=2)
    context = Context(options)
    section = request_sections.requests_section(context)
    managers = section.data["managers"]
    assert list(managers) == ["pagedkv optimized", "vLLM 0.33.0 KVCacheManager"]
    assert managers["vLLM 0.33.0 KVCacheManager"]["answers_differ"] == 0
    assert managers["vLLM 0.33.0 KVCacheManager"]["ratio_to_pagedkv"]["n"] == 2


def test_a_request_side_that_answers_otherwise_is_counted() -> None:
    options = Options(
        quick=True,
        request_sides=("pagedkv.model_tests.tests.test_bench:ShiftedRequestSide",),
    )
    section = request_sections.requests_section(Context(options))
    found = section.data["managers"]["shifted"]
    assert found["answers_differ"] > 0 and found["ratio_to_pagedkv"]["median"] > 0


class ShiftedRequestSide(request_sections.PagedkvSide):
    """pagedkv's request manager, each answer's block ids shifted by one."""

    name = "shifted"

    def digest(self, name: str, answer: Any) -> Any:
        found = request_sections.digest(name, answer)
        if name != "allocate_slots" or found is None:
            return found
        return tuple(tuple(block + 1 for block in group) for group in found)


def test_soak_passes_the_optimized_manager() -> None:
    code, out, err = run_cli("soak", "--steps", "3000", "--seed", "5")
    assert (code, err) == (0, ""), out
    assert "exact mode" in out and re.search(r"PASS: 300\d steps", out), out


def test_soak_finds_and_shrinks_a_broken_manager(tmp_path: Path) -> None:
    target = "pagedkv.model_tests.independent.broken:BrokenForgetsCowSource"
    path = tmp_path / "soak.jsonl"
    code, out, _ = run_cli(
        "soak", "--target", target, "--steps", "20000", "--seed", "1", "--trace-out", str(path)
    )
    assert code == 1 and "isomorphic mode" in out and "<-- diverges" in out, out
    steps = trace.read(path).ops
    assert 1 <= len(steps) <= 6, out
    assert not trace.replay(trace.read(path), BrokenForgetsCowSource).ok


class ForgetsARepeatedAccess(OptimizedBlockSpaceManager):
    """A laziness bug the protocol cannot see: a second access of a sequence is dropped."""

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        table = self._tables.get(seq_id)
        if table is not None and table.access_stamp and now > 1:
            return
        super().access_all_blocks_in_seq(seq_id, now)


def test_exact_soak_finds_what_only_the_state_shows() -> None:
    result = soak(ForgetsARepeatedAccess, 30_000, 2, exact=True)
    assert not result.passed and result.config is not None
    assert "last_accessed" in (result.failure or ""), result.failure
    assert len(result.calls) <= 4, result.calls
    assert shrink(ForgetsARepeatedAccess, result.config, result.calls, True) == result.calls
