"""The pool-level bench (``python -m pagedkv.model_tests.bench.pool``) as a smoke run: the
stream it derives from the workload replays on every caller, vLLM v1's real pool included,
without running out, and every table has its rows. Its figures mean nothing here (benchmarks are
never tests). Skipped without vLLM 0.33.0's files (``make peers-fetch``), failed under
``CI=true``."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest
from matplotlib import pyplot

from pagedkv.model_tests.bench import plot, pool
from pagedkv.model_tests.bench.pool_drivers import DRIVERS, PagedkvPublic
from pagedkv.model_tests.bench.pool_stream import DECODE, FREE, PROMPT, derive
from pagedkv.model_tests.bench.workload import build
from pagedkv.model_tests.peers import sources


def require_v1() -> None:
    if sources.VLLM_V1.fetched:
        return
    reason = f"{sources.VLLM_V1.name} not fetched (make peers-fetch)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-peer tests, but {reason}")
    pytest.skip(reason)


def test_the_stream_holds_every_kind_of_event_and_sizes_its_pool() -> None:
    stream = derive(build(pool.quick_spec()))
    kinds = {kind for kind, _, _ in stream.events}
    assert kinds == {PROMPT, DECODE, FREE}
    counts = stream.counts()
    assert counts["prompts"] >= counts["frees"] > 0
    assert stream.peak_blocks > 0 and stream.prompt_blocks > 0 and stream.freed_blocks > 0


def test_a_smoke_run_times_every_caller_on_the_same_stream() -> None:
    require_v1()
    section = pool.pool_section(quick=True)
    stream, end_to_end, per_operation = section.tables
    assert stream.rows
    assert [row[0] for row in end_to_end.rows] == [*DRIVERS, pool.VLLM]
    assert [row[0] for row in per_operation.rows] == list(pool.OPERATIONS)
    assert section.data["end_to_end"][pool.VLLM]["vllm_over_this"]["median"] == 1.0
    over = section.data["per_operation_vllm_over_this"]
    assert list(over) == list(pool.OPERATIONS)
    assert all(set(by_caller) == {*DRIVERS} for by_caller in over.values())
    draw_pool_panel(section.data)


def draw_pool_panel(data: dict[str, Any]) -> None:
    """The plot's pool panel: each of pagedkv's callers end to end, then the headline caller per
    operation, every bar a ratio to vLLM v1 with its line at 1."""
    draw = plot.pool_panel({"pool": data})
    assert draw is not None and plot.pool_panel({}) is None
    figure = pyplot.figure()
    axes = figure.add_subplot()
    draw(axes)
    labels = [tick.get_text() for tick in axes.get_yticklabels()]
    expected = [f"{name}, end to end" for name in DRIVERS]
    expected += [f"{plot.POOL_HEADLINE}, {op}" for op in pool.OPERATIONS]
    assert [label.replace("\n", " ") for label in labels] == expected
    assert [1.0, 1.0] in [list(cast(list[float], line.get_xdata())) for line in axes.get_lines()]
    pyplot.close(figure)


def test_a_run_per_block_leaves_the_pool_as_a_call_per_token_does() -> None:
    """The headline caller hands a block its tokens only when they fill it: it must take, share,
    cache and free the same blocks as the caller that appends every token, or its timing
    compares different work."""
    stream = derive(build(pool.quick_spec()))
    num_blocks = pool.pool_size(stream, pool.quick_spec().num_gpu_blocks)
    runs = DRIVERS[pool.PAGEDKV](num_blocks, stream.block_size)
    per_token = DRIVERS[pool.PER_TOKEN](num_blocks, stream.block_size)
    assert isinstance(runs, PagedkvPublic) and isinstance(per_token, PagedkvPublic)
    for kind, seq, payload in stream.events:
        runs.handlers[kind](seq, payload)
        per_token.handlers[kind](seq, payload)
        assert [s.blocks for s in runs.seqs.values()] == [s.blocks for s in per_token.seqs.values()]
    ours, theirs = runs.pool.view(), per_token.pool.view()
    assert (ours.free, ours.evictable, ours.cached) == (
        theirs.free,
        theirs.evictable,
        theirs.cached,
    )
    assert (ours.hits, ours.queries) == (theirs.hits, theirs.queries)
