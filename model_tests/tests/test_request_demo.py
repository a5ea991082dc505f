"""``pagedkv demo --level request`` as a learner uses it: it runs to the end whatever the
terminal can print, each step's sentence claims only what the reference did at that step, and
its page is valid HTML that reaches nothing outside the file."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import html5lib
import pytest

from pagedkv import cli
from pagedkv.model_tests.lockstep.show import show_value
from pagedkv.model_tests.teaching import request_demo
from pagedkv.model_tests.teaching.pictures import picture_of
from pagedkv.model_tests.teaching.request_demo import PARTS, Scene
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture
from pagedkv.model_tests.tests.teaching_pages import drawn_with_rich, read_page
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import NULL_BLOCK, BlockRemoved, BlockStored, KVEvent, Request
from pagedkv.specs.request_view import CachedKey, RequestManagerView

TOTAL = sum(len(part.scenes) + 1 for part in PARTS) - 1


def run_cli(*argv: str, keys: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err, stdin=io.StringIO(keys))
    return code, out.getvalue(), err.getvalue()


class Replayed:
    """The demo's scenes replayed on fresh reference managers, independently of the demo's
    frames: what each step answered, the view after it and the events it emitted."""

    def __init__(self) -> None:
        self.steps: dict[int, tuple[Scene, Any, RequestManagerView, list[KVEvent]]] = {}
        number = 0
        for part in PARTS:
            manager = ReferenceRequestKVManager(part.config)
            for scene in part.scenes:
                number += 1
                result = scene.call.method(manager)(*scene.call.args)
                self.steps[number] = (scene, result, manager.view(), manager.take_events())
            number += 1

    def result(self, n: int) -> Any:
        return self.steps[n][1]

    def view(self, n: int) -> RequestManagerView:
        return self.steps[n][2]

    def events(self, n: int) -> list[KVEvent]:
        return self.steps[n][3]

    def says(self, n: int) -> str:
        return self.steps[n][0].says

    def table(self, n: int, request_id: str, group: int = 0) -> tuple[int, ...]:
        return self.view(n).requests[request_id].blocks[group]

    def cached(self, n: int, block: int) -> CachedKey | None:
        return self.view(n).blocks[block].cached

    def keyed(self, n: int, key: CachedKey) -> list[int]:
        return [b for b, seen in self.view(n).blocks.items() if seen.cached == key]

    def queue(self, n: int) -> tuple[int, ...]:
        return self.view(n).free_queue


def keys(request: Request, group: int, block_size: int = 4) -> list[CachedKey]:
    return [CachedKey(group, h) for h in request_block_hashes(request, block_size)]


# --- it runs ------------------------------------------------------------------------------------


def test_the_demo_runs_to_the_end_on_a_utf8_stdout() -> None:
    code, out, err = run_cli("demo", "--level", "request")
    assert (code, err) == (0, "")
    assert "\x1b[" not in out  # not a terminal: no colours
    assert f"step {TOTAL} of {TOTAL}" in out
    for frame in request_demo.walk().frames[1:]:
        assert f"step {frame.number} of {TOTAL}: {frame.call} -> {frame.outcome}" in out
    for sight in (
        "free queue, front first: 9 7*",
        "[null null null 9 10 14]",
        "event: BlockRemoved(group 1: ",
        "[specs/request_level.md §3]",
    ):
        assert sight in out


def test_the_demo_runs_to_the_end_on_an_ascii_only_stdout() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    code = cli.main(["demo", "--level", "request"], stdout=stream, stderr=io.StringIO())
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert code == 0 and f"step {TOTAL} of {TOTAL}" in text
    assert "-- step 1 of" in text and "[specs/request_level.md S3]" in text


def test_the_demo_draws_with_rich_on_a_terminal() -> None:
    walk = request_demo.walk()
    text = drawn_with_rich(walk)
    assert "\x1b[" in text and "free queue, front first" in text and "event: BlockStored" in text


def test_demo_step_waits_for_enter_and_q_stops_it() -> None:
    code, out, _ = run_cli("demo", "--level", "request", "--step", keys="\n\nq\n")
    assert code == 0
    assert f"step 2 of {TOTAL}" in out and f"step 3 of {TOTAL}" not in out


# --- it tells the truth ---------------------------------------------------------------------------


def test_each_frame_shows_the_reference_s_answer_state_and_events() -> None:
    """The frames are drawn from the reference: the same answers, views and events as a replay."""
    replayed = Replayed()
    frames = request_demo.walk().frames
    assert [f.number for f in frames] == list(range(TOTAL + 1))
    for frame in frames:  # every sentence, the parts' openings too, cites its clause
        assert re.search(
            r" \[specs/request_level\.md §\d+(\.\d)?(, §\d+(\.\d)?)*\]$", frame.narration
        )
    for number, (scene, result, view, events) in replayed.steps.items():
        frame = frames[number]
        assert frame.outcome == show_value(result)
        assert frame.narration.startswith(scene.says)
        assert frame.narration.endswith(f"[specs/request_level.md {scene.cite}]")
        assert isinstance(frame.picture, RequestPicture)
        assert frame.picture.free_queue == tuple(
            (b, view.blocks[b].cached is not None) for b in view.free_queue
        )
        assert [(r.request, r.group, r.blocks) for r in frame.picture.tables] == [
            (request_id, g, blocks)
            for request_id in sorted(view.requests)
            for g, blocks in enumerate(view.requests[request_id].blocks)
        ]
        assert len(frame.picture.events) == len(events)


def test_part_1_says_what_the_reference_does() -> None:
    """Each sentence's claim about hits, caching, None, preemption, free order and eviction,
    checked against the reference's own answer and state at that step."""
    r = Replayed()
    a_keys = keys(request_demo.A_FIRST_CHUNK, 0)
    assert r.result(1) == ([[]], 0) and "a hit of 0" in r.says(1)
    # chunked prefill: two blocks, cached, then two more
    assert r.result(2) == [[1, 2]] and [r.cached(2, b) for b in (1, 2)] == a_keys[:2]
    assert isinstance(r.events(2)[0], BlockStored)
    assert r.result(3) == [[3, 4]] and r.table(3, "a") == (1, 2, 3, 4)
    assert [r.cached(3, b) for b in (1, 2, 3, 4)] == a_keys
    # a shared system prompt
    assert r.result(4) == ([[1, 2]], 8) and "2 blocks, 8 tokens" in r.says(4)
    assert r.result(5) == [[5, 6]] and r.view(5).blocks[1].ref_count == 2
    assert r.cached(5, 5) is not None and r.cached(5, 6) is None
    # the cap: every block of c's prompt is cached, yet the hit is one block short
    c_keys = keys(request_demo.C_PREFILL, 0)
    assert len(c_keys) == 3 and all(r.keyed(5, key) for key in c_keys)
    assert r.result(6) == ([[1, 2]], 8) and "2 blocks, 8 tokens" in r.says(6)
    assert r.result(7) == [[7]] and r.keyed(7, c_keys[2]) == [3, 7]  # a duplicate
    # the draft's block is not cached; after the rejection it is
    assert r.result(8) == [[]] and r.cached(8, 6) is None
    assert r.result(9) == [[8]] and r.cached(9, 6) is not None and r.cached(9, 8) is None
    # None changes nothing, preemption, retry
    assert r.result(10) == [[9]] and r.queue(10) == ()
    assert r.result(11) is None and r.view(11) == r.view(10)
    assert r.queue(12) == (9, 7) and r.cached(12, 7) is not None and r.cached(12, 9) is None
    assert r.view(12).blocks[1].ref_count == 2 and "c" not in r.view(12).requests
    assert r.result(13) == [[9]]
    # the re-hit: longer than before, through the key's earliest block
    assert r.result(14) == ([[1, 2, 3]], 12) and "3 blocks, 12 tokens" in r.says(14)
    assert r.result(15) == [[7]] and r.events(15) == [BlockRemoved((c_keys[2].block_hash,), 0)]
    assert r.keyed(15, c_keys[2]) == [3]
    # tail first: uncached to the front, cached to the back
    assert r.queue(16) == (8, 6, 5) and r.cached(16, 8) is None
    assert r.result(17) == [[8, 6]] and isinstance(r.events(17)[0], BlockRemoved)
    assert r.cached(17, 5) is not None


def test_part_2_says_what_the_reference_does() -> None:
    r = Replayed()
    first = len(PARTS[0].scenes) + 1  # part 2's opening frame
    x_full, x_window = keys(request_demo.X_PREFILL, 0), keys(request_demo.X_PREFILL, 1)

    def n(step: int) -> int:
        return first + step

    assert r.result(n(1)) == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert r.result(n(2)) == ([[1, 2], [6, 7]], 8) and "a hit of 8 tokens" in r.says(n(2))
    assert r.result(n(3)) == [[11], [12]]
    # the window releases x's blocks 0-2 to the null block; 8 to the back, 7 and 6 still v's
    assert r.table(n(4), "x", 1)[:3] == (NULL_BLOCK,) * 3
    assert r.table(n(4), "x", 0)[:3] == (1, 2, 3)
    assert r.queue(n(4)) == (15, 8) and r.view(n(4)).blocks[8].ref_count == 0
    assert r.view(n(4)).blocks[7].ref_count == 1 and r.view(n(4)).blocks[6].ref_count == 1
    assert r.result(n(4)) == [[13], [14]]
    # the eviction of the window group's key of x's third block
    assert r.result(n(5)) == [[15], [8]]
    assert r.events(n(5)) == [BlockRemoved((x_window[2].block_hash,), 1)]
    # the hybrid hit: the full group alone serves 3 blocks, both agree on 2
    y_full = keys(request_demo.Y_PREFILL, 0)
    assert y_full == x_full[:3] and all(r.keyed(n(5), key) for key in y_full)
    assert r.keyed(n(5), x_window[2]) == []
    assert r.result(n(6)) == ([[1, 2], [6, 7]], 8) and "2 blocks, 8 tokens" in r.says(n(6))
    assert r.result(n(7)) is None and r.view(n(7)) == r.view(n(5))
    # free: per group, tail first
    assert r.queue(n(8)) == (14, 13, 5, 4, 3, 10, 9)
    assert r.result(n(9)) == [[14, 13], [5, 4]]
    removed = [e for e in r.events(n(9)) if isinstance(e, BlockRemoved)]
    assert removed == [
        BlockRemoved((x_full[4].block_hash,), 0),
        BlockRemoved((x_full[3].block_hash,), 0),
    ]
    assert r.keyed(n(9), x_full[2]) == [3, 14]


def test_a_request_level_view_draws_without_tokens_for_show() -> None:
    """``pagedkv show`` draws a trace's steps with ``picture_of``: the request level too."""
    manager = ReferenceRequestKVManager(request_demo.HYBRID)
    manager.allocate_slots(request_demo.X_PREFILL, 20)
    drawn = picture_of(manager.view())
    assert isinstance(drawn, RequestPicture)
    assert drawn.cells[1].holders == ("x g0[0]",) and drawn.cells[1].tokens is None
    assert drawn.cells[1].key.startswith("g0 #") and drawn.usage == pytest.approx(10 / 15)


# --- the page -------------------------------------------------------------------------------------


def test_the_demo_as_a_page_is_valid_html(tmp_path: Path) -> None:
    code, out, _ = run_cli("demo", "--level", "request", "-o", str(tmp_path / "demo.html"))
    assert code == 0 and "demo.html" in out and f"{TOTAL} steps" in out
    text = (tmp_path / "demo.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True).parse(text)  # raises at the first parse error
    reader = read_page(text)
    assert [s.step for s in reader.sections] == list(range(TOTAL + 1))
    assert reader.marked == [] and reader.outside == []
    scenes = [scene for part in PARTS for scene in (None, *part.scenes)][1:]
    for section, scene in zip(reader.sections[1:], scenes, strict=True):
        if scene is not None:
            assert " ".join(scene.says.split())[:60] in section.content
    assert "free queue, front first" in reader.sections[1].content


def test_the_html_check_rejects_a_broken_page() -> None:
    """The strict parse above can fail: a page with a stray end tag does."""
    with pytest.raises(html5lib.html5parser.ParseError):
        html5lib.HTMLParser(strict=True).parse("<!doctype html><title>t</title><p>x</div>")
