"""The teaching tools as a person uses them: ``pagedkv demo`` tells a true story, ``pagedkv show``
writes a page with every step of a trace and the divergence marked with the rule it broke, and
``pagedkv check`` leaves that page next to its trace.

The browser half (a headless Chromium stepping through the page) is ``test_teaching_browser.py``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pagedkv import cli, pages
from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.independent.manager import IndependentManager
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.trace import Trace
from pagedkv.model_tests.teaching import demo, page, rules
from pagedkv.model_tests.teaching.frames import Frame
from pagedkv.model_tests.teaching.snapshot import DevicePicture, Picture
from pagedkv.model_tests.teaching.walkthrough import walk_trace
from pagedkv.model_tests.tests.teaching_pages import (
    SWAP_TARGET,
    drawn_with_rich,
    read_page,
    swap_trace,
)
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.specs.errors import ConfigurationError
from pagedkv.specs.request_types import Request, RequestConfig
from pagedkv.specs.types import CopyPair, ExtraKey, ManagerConfig, PoolConfig

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str, keys: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err, stdin=io.StringIO(keys))
    return code, out.getvalue(), err.getvalue()


# --- the demo -----------------------------------------------------------------------------------


def test_the_demo_tells_what_the_reference_does() -> None:
    """Each sentence's claim, checked against the reference's own state at that step."""
    frames = demo.walk().frames
    assert [f.number for f in frames] == list(range(len(demo.SCENES) + 1))

    def step(n: int) -> Frame:
        return frames[n]

    def picture(n: int) -> Picture:
        drawn = frames[n].picture
        assert isinstance(drawn, Picture)
        return drawn

    def gpu(n: int) -> DevicePicture:
        return picture(n).devices[0]

    def table(n: int, seq: int) -> tuple[int, ...]:
        rows = {row.label.split(" (")[0]: row for row in picture(n).tables}
        return rows[f"seq {seq}"].blocks

    assert {c.block: c.state for c in gpu(0).cells} == {0: "null"}
    assert step(1).outcome == "OK"
    assert table(4, 2)[:2] == table(4, 1)[:2] == (1, 2)  # shared system prompt
    assert {c.block: c.ref_count for c in gpu(4).cells}[1] == 2
    assert (gpu(4).hits, gpu(4).queries) == (2, 4)
    assert step(5).outcome == "8"
    assert {c.block: c.ref_count for c in gpu(6).cells}[1] == 3  # fork: counts rise
    assert step(7).copies == ((3, 5),) and table(7, 1) == (1, 2, 5)  # copy-on-write
    assert step(8).copies == () and table(8, 3) == (1, 2, 3)  # in place
    assert [link.block for link in gpu(9).chain] == [1, 2, 5]  # promoted: third link
    assert (step(10).outcome, step(11).outcome) == ("LATER", "NEVER")
    assert {c.block for c in gpu(14).cells if c.state == "evictable"} == {1, 2, 5}
    assert (len(gpu(14).free), gpu(14).num_evictable) == (4, 3)
    # eviction: the free list first (3, 4, 6, 7), then the chain's tail 5 before 2 and 1
    assert table(16, 4) == (3, 4, 6, 7, 5)
    assert {c.block for c in gpu(16).cells if c.state == "evictable"} == {1, 2}
    assert step(18).copies == ((3, 8), (4, 9), (6, 10), (7, 11), (5, 12))
    assert step(19).copies == ((12, 5),)  # only the tail: the rest were cache hits
    assert table(20, 4)[0] == 0 and demo.CONFIG.sliding_window == 12  # slid to the null block
    assert step(21).outcome == "False" and picture(21).devices[1].chain == ()
    assert step(23).outcome == "True"
    assert [(c.block, c.state) for c in gpu(23).cells] == [(0, "null")]


def test_the_demo_in_plain_text_shows_every_step_and_the_state() -> None:
    code, out, err = run_cli("demo")
    assert (code, err) == (0, "")
    assert "\x1b[" not in out  # not a terminal: no colours
    for number, scene in enumerate(demo.SCENES, 1):
        assert (
            f"step {number} of {len(demo.SCENES)}: {codec.show_call(scene.op, scene.args)}" in out
        )
    for sight in (
        "copies for the kernel: 3 → 5",
        "hash chains:",
        "#520c15 block 1 [11 12 13 14]",
        "free list: 3 4 6 7",
        "seq 4 (group 4)  GPU  19 tokens  [null 4 6 7 5]",
        "evictable",
    ):
        assert sight in out


def test_demo_step_waits_for_enter_and_q_stops_it() -> None:
    code, out, _ = run_cli("demo", "--step", keys="\n\nq\n")
    assert code == 0
    assert "step 2 of 23" in out and "step 3 of 23" not in out
    assert out.count("Enter: next step") == 3
    code, out, _ = run_cli("demo", "--step", keys="")  # input closed: stop at once
    assert code == 0 and "step 0 of 23" in out and "step 1 of 23" not in out


def test_the_demo_draws_with_rich_on_a_terminal() -> None:
    walk = demo.walk()
    text = drawn_with_rich(walk)
    assert "\x1b[" in text and "copies for the kernel: 3 → 5" in text and "#7910d4" in text


def test_the_demo_as_a_page(tmp_path: Path) -> None:
    code, out, _ = run_cli("demo", "-o", str(tmp_path / "demo.html"))
    assert code == 0 and "demo.html" in out
    reader = read_page((tmp_path / "demo.html").read_text())
    assert [s.step for s in reader.sections] == list(range(len(demo.SCENES) + 1))
    assert reader.marked == []
    for section, scene in zip(reader.sections[1:], demo.SCENES, strict=True):
        assert scene.says[:40] in section.content


# --- the page of a divergence ---------------------------------------------------------------------


def test_the_page_of_a_divergence_has_every_step_and_marks_the_one_that_diverges() -> None:
    loaded = swap_trace()
    walk = walk_trace(loaded, "swap.jsonl", broken.BrokenSwapDropsPair, SWAP_TARGET)
    reader = read_page(page.render(walk))

    assert [s.step for s in reader.sections] == list(range(len(loaded.ops) + 1))
    for section, op in zip(reader.sections[1:], loaded.ops, strict=True):
        assert codec.show_call(op.op, op.args) in section.content
        assert "target: what it did" in section.content
    assert reader.marked == [9]
    marked = reader.sections[9].content
    assert "divergence: swap mappings list exactly the copies" in marked
    assert "(oracle §1.5; manager §6)" in marked
    assert "the model returned [(2, 0)] (in target ids [(2, 1)]), the target []" in marked
    assert "returns [(2, 0)]" in marked and "returns []" in marked  # both sides' results
    assert [step for step, classes in reader.index if "diverges" in classes] == [9]
    assert [step for step, _ in reader.index] == list(range(10))
    assert reader.buttons["to-finding"] == "9"
    # self-contained: inline style and script, nothing fetched from anywhere
    assert reader.outside == []
    assert (reader.styles, reader.scripts) == (1, 1)


def test_without_a_target_the_page_shows_the_reference_alone() -> None:
    walk = walk_trace(swap_trace(), "swap.jsonl")
    reader = read_page(page.render(walk))
    assert [s.step for s in reader.sections] == list(range(10)) and reader.marked == []
    assert "returns [(2, 0)]" in reader.sections[9].content
    assert "target" not in reader.sections[9].content
    assert "pass --target" in " ".join(walk.notes)


def test_a_stale_trace_is_marked_where_its_expectation_fails() -> None:
    loaded = swap_trace()
    loaded.ops[6] = trace.TraceOp("swap_out", (1,), {"result": [[0, 1]]})
    for factory in (None, broken.BrokenSwapDropsPair):
        walk = walk_trace(loaded, "stale.jsonl", factory, SWAP_TARGET)
        reader = read_page(page.render(walk))
        assert reader.marked == [7]
        assert "stale: a stale trace" in reader.sections[7].content
        assert walk.verdict.startswith("stale trace at step 7")


# --- the rule each kind of divergence broke -------------------------------------------------------


class CountsOneFreeBlockLess(IndependentManager):
    def get_num_free_gpu_blocks(self) -> int:
        return super().get_num_free_gpu_blocks() - 1


class UntypedFree(IndependentManager):
    def free(self, seq_id: int) -> None:
        raise KeyError(seq_id)


class DropsCowPairs(IndependentManager):
    def append_slots(
        self, seq_id: int, tokens: Sequence[int], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        super().append_slots(seq_id, tokens, num_lookahead_slots)
        return []


def refuses_everything(config: ManagerConfig) -> IndependentManager:
    raise ConfigurationError(f"refused {config}")


def cfg(bs: int, gpu: int, cpu: int = 1, **options: Any) -> ManagerConfig:
    return ManagerConfig(bs, gpu, cpu, **{"watermark": 0.0, **options})


RULE_CASES: dict[str, tuple[Any, ManagerConfig, list[tuple[str, tuple[Any, ...]]], rules.Rule]] = {
    "swap pairs": (
        broken.BrokenSwapDropsPair,
        cfg(2, 2, enable_caching=True),
        [("allocate", (1, [2], [3])), ("swap_out", (1,)), ("swap_in", (1,))],
        rules.SWAP_PAIRS,
    ),
    "promise": (
        broken.BrokenCanAllocateIgnoresWatermark,
        cfg(1, 4, watermark=0.3, sliding_window=1),
        [("can_allocate", ([3], 2))],
        rules.PROMISES,
    ),
    "atomic": (
        broken.BrokenNoUpFrontCheck,
        cfg(1, 2),
        [("allocate", (1, [2], [3, 1, 4]))],
        rules.ATOMIC,
    ),
    "tables": (
        broken.BrokenWindowKeepsExtraBlock,
        cfg(1, 3, sliding_window=1),
        [("allocate", (1, [2], [3])), ("append_slots", (2, [1]))],
        rules.TABLES,
    ),
    "eviction": (
        broken.BrokenEvictsNewest,
        cfg(1, 2, enable_caching=True),
        [
            ("allocate", (1, [1], [5])),
            ("access_all_blocks_in_seq", (1, 1.0)),
            ("free", (1,)),
            ("allocate", (2, [2], [6])),
            ("access_all_blocks_in_seq", (2, 2.0)),
            ("free", (2,)),
            # one block: evicting both in either order leaves the same state, ids aside
            ("allocate", (3, [3], [7])),
        ],
        rules.CHOICES,
    ),
    "computed": (
        broken.BrokenHitMarksComputed,
        cfg(1, 4, enable_caching=True),
        [("allocate", (1, [1], [5])), ("allocate", (2, [2], [5])), ("get_num_cached_tokens", (2,))],
        rules.COMPUTED,
    ),
    "free counts": (
        CountsOneFreeBlockLess,
        cfg(2, 4),
        [("allocate", (1, [1], [5]))],
        rules.FREE_COUNTS,
    ),
    "errors": (UntypedFree, cfg(2, 4), [("free", (99,))], rules.ERRORS),
    "copy-on-write": (
        DropsCowPairs,
        cfg(2, 4),
        [("allocate", (1, [1], [5])), ("fork", (1, 2)), ("append_slots", (1, [6]))],
        rules.COW_PAIRS,
    ),
    "configuration": (refuses_everything, cfg(2, 4), [("can_allocate", ([1],))], rules.CREATE),
}


@pytest.mark.parametrize("case", list(RULE_CASES))
def test_each_kind_of_divergence_names_its_rule(case: str) -> None:
    factory, config, calls, rule = RULE_CASES[case]
    loaded = trace.trace_of_calls("manager", config, calls)
    walk = walk_trace(loaded, f"{case}.jsonl", factory, factory.__name__)
    marked = walk.finding
    assert marked is not None and marked.finding is not None, walk.verdict
    expected_step = 0 if rule is rules.CREATE else len(calls)
    assert marked.number == expected_step, walk.verdict
    assert marked.finding.rule == rule, marked.finding.message
    assert marked.finding.message in walk.verdict
    # the same calls pass for the manager the variant was broken from
    assert trace.replay(loaded, IndependentManager).ok


def test_a_message_of_no_known_shape_still_gets_the_general_rule() -> None:
    assert rules.rule_of("something nobody wrote yet") is rules.GENERAL
    assert rules.rule_of("swap_in(1,): the model returned [] ..., the target [1]", "swap_in") is (
        rules.SWAP_PAIRS
    )
    assert rules.rule_of("get_block_table(1,): the model returned [0], the target [1]") is (
        rules.RESULTS
    )


def test_the_target_side_shows_its_own_tables_and_where_they_differ() -> None:
    factory, config, calls, _ = RULE_CASES["tables"]
    walk = walk_trace(trace.trace_of_calls("manager", config, calls), "t.jsonl", factory, "w")
    last = walk.frames[-1]
    assert last.target is not None and last.picture is not None
    (row,) = last.target.tables
    assert row.label == "seq 2" and row.blocks is not None
    assert row.differs_at()  # the target kept a block the reference released to the null block
    reader = read_page(page.render(walk))
    assert "cell differs" in page.render(walk) and reader.marked == [2]


def test_every_value_on_the_page_is_escaped() -> None:
    """Names that come from a trace (its file, a request's id, a cache salt) are text on the page
    (the templates escape every value), never markup: one script and one style, the page's own,
    and the names read back as written."""
    hostile = '<img src=x onerror="alert(1)">'
    salt = "</section><script>alert('salt')</script>"
    config = RequestConfig(num_blocks=4, block_size=2)
    request = Request(hostile, (1, 2, 3), 3, extra_key=ExtraKey(cache_salt=salt))
    calls = [("allocate_slots", (request, 3, 0, None, 0)), ("free", (hostile,))]
    walk = walk_trace(
        trace.trace_of_calls("request", config, calls),
        f"{hostile}.jsonl",
        RequestManager,
        hostile,
    )
    text = page.render(walk)
    reader = read_page(text)
    assert (reader.scripts, reader.styles, reader.outside) == (1, 1, [])
    assert "<img" not in text and "<script>alert" not in text
    assert hostile in reader.sections[1].content and len(reader.sections) == 3


# --- the command line -----------------------------------------------------------------------------


def write_swap_trace(tmp_path: Path) -> Path:
    return trace.write(swap_trace(), tmp_path / "swap.jsonl")


def test_show_writes_the_page_next_to_the_trace(tmp_path: Path) -> None:
    path = write_swap_trace(tmp_path)
    code, out, err = run_cli("show", str(path), "--target", SWAP_TARGET)
    assert (code, err) == (0, "")
    assert f"wrote {tmp_path / 'swap.html'}: 9 steps; marked: step 9" in out
    assert "divergence at step 9" in out
    assert read_page((tmp_path / "swap.html").read_text()).marked == [9]

    code, out, _ = run_cli("show", str(path), "-o", str(tmp_path / "sub" / "alone.html"))
    assert code == 0 and "marked" not in out
    assert read_page((tmp_path / "sub" / "alone.html").read_text()).marked == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["show", "{dir}/missing.jsonl"], "No such file"),
        (["show", "{dir}/swap.jsonl", "-o", "{dir}/swap.jsonl"], "that is the trace itself"),
        (["show", "{dir}/swap.jsonl", "--target", "no_such_module:f"], "no_such_module"),
        (["show", "{dir}/swap.jsonl", "-o", "{dir}/swap.jsonl/x.html"], "is not a directory"),
        (["show", "{dir}/bad.jsonl"], "not a pagedkv trace"),
        (["demo", "--steps"], "unrecognized arguments"),
    ],
)
def test_show_and_demo_refuse_bad_input_in_one_line(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    write_swap_trace(tmp_path)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"format": "other"}) + "\n")
    code, out, err = run_cli(*[a.format(dir=tmp_path) for a in argv])
    assert code == 2 and out == ""
    assert err.startswith("pagedkv: error: ") and says in err and err.count("\n") == 1
    assert (tmp_path / "swap.jsonl").read_text() == trace.dumps(swap_trace())


def test_show_draws_a_pool_trace_and_a_refused_configuration(tmp_path: Path) -> None:
    pool = trace.trace_of_calls(
        "pool",
        PoolConfig(4, 2, True),
        [("allocate_mutable", ()), ("cow_if_not_appendable", (0,)), ("num_free_blocks", ())],
    )
    path = trace.write(pool, tmp_path / "pool.jsonl")
    code, out, _ = run_cli("show", str(path), "--target", "optimized")
    assert code == 0 and "pass: 3 steps" in out
    reader = read_page((tmp_path / "pool.html").read_text())
    assert [s.step for s in reader.sections] == [0, 1, 2, 3] and "pool" in reader.sections[
        1
    ].content

    refused = trace.trace_of_calls("manager", ManagerConfig(0, 4, 1), [])
    path = trace.write(refused, tmp_path / "refused.jsonl")
    code, out, _ = run_cli("show", str(path), "--target", "optimized")
    assert code == 0
    reader = read_page((tmp_path / "refused.html").read_text())
    assert [s.step for s in reader.sections] == [0]
    assert "refused: ConfigurationError" in reader.sections[0].content


def test_check_writes_the_page_of_its_divergence_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's example, run as it says: the notes it shows are what check prints."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("check", "--target", SWAP_TARGET, "--seed", "0")
    assert code == 1
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = readme.split(f"pagedkv check {SWAP_TARGET} (manager level")[1].split("```")[0]
    notes = example[example.index("trace: ") :].strip().splitlines()
    assert notes == out[out.index("trace: ") :].strip().splitlines()
    assert notes[-1] == "page: pagedkv-divergence.html (both sides, step by step, in a browser)"
    loaded: Trace = trace.read(tmp_path / "pagedkv-divergence.jsonl")
    reader = read_page((tmp_path / "pagedkv-divergence.html").read_text())
    assert [s.step for s in reader.sections] == list(range(len(loaded.ops) + 1))
    assert reader.marked == [len(loaded.ops)]


def test_a_page_that_cannot_be_drawn_leaves_check_s_verdict_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_drawing(*_: Any) -> Any:
        raise RuntimeError("no picture")

    monkeypatch.setattr(pages, "walk_trace", broken_drawing)
    note, written = pages.divergence_page(swap_trace(), tmp_path / "x.jsonl", None, SWAP_TARGET)
    assert note == "page: not written (RuntimeError: no picture)" and written is None
    assert not (tmp_path / "x.html").exists()


def test_check_never_writes_its_page_over_its_trace(tmp_path: Path) -> None:
    path = trace.write(swap_trace(), tmp_path / "odd.html")  # --trace-out odd.html
    note, written = pages.divergence_page(
        swap_trace(), path, broken.BrokenSwapDropsPair, SWAP_TARGET
    )
    assert note.startswith(f"page: {tmp_path / 'odd.html.html'} ")
    assert written == tmp_path / "odd.html.html"
    assert path.read_text() == trace.dumps(swap_trace())
