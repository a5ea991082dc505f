"""Shared by the teaching tests: the documented divergence trace, and a page read back with
``html.parser`` into what a reader would see: its steps, the marked one, its index, and anything
that would reach out of the file."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from html.parser import HTMLParser

from rich.console import Console

from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.trace import Trace
from pagedkv.model_tests.teaching import terminal
from pagedkv.model_tests.teaching.frames import Walk
from pagedkv.specs.request_types import Request, RequestConfig
from pagedkv.specs.types import ManagerConfig

SWAP_TRACE = """\
{"format": "pagedkv-trace", "version": 1, "level": "manager", "config": {"block_size": 2, \
"num_gpu_blocks": 2, "num_cpu_blocks": 1, "watermark": 0.0, "sliding_window": null, \
"enable_caching": true}}
{"op": "can_allocate", "args": [[3], 0, null], "expect": {"result": "ok"}}
{"op": "allocate", "args": [1, [2], [3], {"lora_id": null, "cache_salt": null}, null], \
"expect": {"result": null}}
{"op": "get_common_computed_block_ids", "args": [[2]], "expect": {"result": []}}
{"op": "get_num_cached_tokens", "args": [2], "expect": {"result": 0}}
{"op": "mark_blocks_as_computed", "args": [1], "expect": {"result": null}}
{"op": "can_swap_out", "args": [1], "expect": {"result": "ok"}}
{"op": "swap_out", "args": [1], "expect": {"result": [[0, 2]]}}
{"op": "can_swap_in", "args": [1, 0], "expect": {"result": "ok"}}
{"op": "swap_in", "args": [1], "expect": {"result": [[2, 0]]}}
"""
"""The trace ``pagedkv check`` writes for ``BrokenSwapDropsPair``, seed 0 (``specs/oracle.md``
§4): that manager answers the last call with ``[]``."""

SWAP_TARGET = "pagedkv.model_tests.independent.broken:BrokenSwapDropsPair"


def swap_trace() -> Trace:
    loaded = trace.loads(SWAP_TRACE)
    assert loaded.config == ManagerConfig(2, 2, 1, 0.0, None, True)
    return loaded


def request_order_trace() -> Trace:
    """A request-level trace on which a manager that gives blocks back head first evicts the
    head of a cached chain where vLLM v1 evicts its tail: request ``a`` caches two blocks and
    goes; request ``b`` takes the two blank blocks, then the first cached one."""
    config = RequestConfig(num_blocks=5, block_size=2)
    a, b = Request("a", (1, 2, 3, 4, 5), 5), Request("b", (7,) * 6, 6)
    calls = [
        ("allocate_slots", (a, 5, 0, None, 0)),
        ("free", ("a",)),
        ("allocate_slots", (b, 6, 0, None, 0)),
    ]
    return trace.trace_of_calls("request", config, calls)


@dataclass
class Section:
    step: int
    classes: set[str]
    text: list[str] = field(default_factory=list)

    @property
    def content(self) -> str:
        return " ".join(" ".join(self.text).split())


class PageReader(HTMLParser):
    """The steps of a page and everything in it that points outside the file."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.index: list[tuple[int, set[str]]] = []
        self.outside: list[str] = []
        self.scripts = 0
        self.styles = 0
        self.buttons: dict[str, str] = {}
        self._open: Section | None = None
        self._item: set[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        classes = set(values.get("class", "").split())
        for name in ("src", "href", "action", "data", "poster"):
            link = values.get(name, "")
            if link and not link.startswith("#"):
                self.outside.append(f"<{tag} {name}={link!r}>")
        if tag == "link":
            self.outside.append(f"<link {values}>")
        if tag == "script":
            self.scripts += 1
        if tag == "style":
            self.styles += 1
        if tag == "button":
            self.buttons[values.get("id", "")] = values.get("data-step", "")
        if tag == "section" and "step" in classes:
            self._open = Section(int(values["data-step"]), classes)
            self.sections.append(self._open)
        if tag == "li" and self._open is None:
            self._item = classes
        if tag == "a" and self._item is not None and "data-step" in values:
            self.index.append((int(values["data-step"]), self._item))
            self._item = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open.text.append(data)

    @property
    def marked(self) -> list[int]:
        return [s.step for s in self.sections if "diverges" in s.classes]


def read_page(text: str) -> PageReader:
    reader = PageReader()
    reader.feed(text)
    reader.close()
    return reader


def drawn_with_rich(walk: Walk) -> str:
    """Every frame of ``walk`` as a colour terminal 110 columns wide shows it."""
    stream = io.StringIO()
    console = Console(file=stream, width=110, force_terminal=True, color_system="standard")
    console.print(terminal.rich_opening(walk))
    for frame in walk.frames:
        console.print(terminal.rich_frame(frame, len(walk.frames) - 1))
    return stream.getvalue()
