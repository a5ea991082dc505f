"""A request-level picture in a terminal: plain lines (pipes, logs, tests) or rich renderables.

Both show, in this order: the counts, the groups, every block that is not blank and free (its
ref count, who holds it where, the key it is cached under), the free queue front to back with
its cached blocks starred, each request's table per group, and the step's KV events.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pagedkv.model_tests.teaching.columns import columns
from pagedkv.model_tests.teaching.request_snapshot import RequestCell, RequestPicture, RequestRow
from pagedkv.specs.request_types import NULL_BLOCK

CELL_HEADERS = ("block", "ref", "state", "held by", "cached as")
STATE_STYLE = {"used": "green", "evictable": "yellow", "null": "dim"}
MAX_QUEUE_SHOWN = 32


def cell_columns(cell: RequestCell) -> list[str]:
    if cell.state == "null":
        return [str(cell.block), "", "null", "", ""]
    cached = cell.key
    if cell.tokens is not None:
        cached += f" [{' '.join(map(str, cell.tokens))}]"
    return [str(cell.block), str(cell.ref_count), cell.state, " ".join(cell.holders), cached]


def queue_text(picture: RequestPicture) -> str:
    shown = " ".join(
        f"{block}*" if cached else str(block)
        for block, cached in picture.free_queue[:MAX_QUEUE_SHOWN]
    )
    rest = len(picture.free_queue) - MAX_QUEUE_SHOWN
    more = f" … and {rest} more" if rest > 0 else ""
    star = "  (* cached: taking it evicts its key)" if any(c for _, c in picture.free_queue) else ""
    return f"    free queue, front first: {shown or 'empty'}{more}{star}"


def table_text(row: RequestRow) -> str:
    return "[" + " ".join("null" if b == NULL_BLOCK else str(b) for b in row.blocks) + "]"


def row_columns(picture: RequestPicture, row: RequestRow, first: bool) -> list[str]:
    several = len(picture.groups) > 1
    shown = [row.request if first else ""]
    if several:
        shown.append(f"g{row.group}")
    shown += [table_text(row), f"{row.num_cached} cached" if picture.caching else ""]
    return shown


def _rows(picture: RequestPicture) -> list[list[str]]:
    out = []
    previous = None
    for row in picture.tables:
        out.append(row_columns(picture, row, row.request != previous))
        previous = row.request
    return out


def plain_request_picture(picture: RequestPicture) -> list[str]:
    lines = [f"pool  {picture.counts()}"]
    lines += ["    " + line for line in picture.group_lines()]
    lines += columns([list(CELL_HEADERS)] + [cell_columns(c) for c in picture.cells], "    ")
    lines.append(queue_text(picture))
    if picture.tables:
        lines.append("requests")
        lines += columns(_rows(picture), "    ")
    else:
        lines.append("requests: none")
    lines += [f"event: {event}" for event in picture.events]
    return lines


def rich_request_picture(picture: RequestPicture) -> RenderableType:
    parts: list[RenderableType] = [
        Text.assemble(("pool", "bold"), "  ", (picture.counts(), "cyan"))
    ]
    parts += [Text("    " + line, "dim") for line in picture.group_lines()]
    cells = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="dim")
    for header in CELL_HEADERS:
        cells.add_column(header, justify="right" if header in ("block", "ref") else "left")
    for cell in picture.cells:
        cells.add_row(*cell_columns(cell), style=STATE_STYLE[cell.state])
    parts.append(Padding(cells, (0, 0, 0, 4)))
    parts.append(Text(queue_text(picture), "dim"))
    parts.append(Text("requests" if picture.tables else "requests: none", "bold"))
    if picture.tables:
        tables = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_header=False)
        rows = _rows(picture)
        for _ in rows[0]:
            tables.add_column()
        for shown in rows:
            tables.add_row(*shown)
        parts.append(Padding(tables, (0, 0, 0, 4)))
    parts += [Text(f"event: {event}", "magenta") for event in picture.events]
    return Group(*parts)
