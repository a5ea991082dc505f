"""A frame drawn in a terminal: plain text (for pipes, logs and tests) or rich renderables.

Both show the same things in the same order: the call and its result, the narration, per device
the counts, the blocks that are not blank (ref count, tokens, hash, computed mark, last access),
the free list and the hash chains, then the block tables and the copies for the kernels.
"""

from __future__ import annotations

import textwrap

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule as RichRule
from rich.table import Table
from rich.text import Text

from pagedkv.model_tests.teaching.columns import columns
from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture
from pagedkv.model_tests.teaching.frames import Frame, Walk
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture
from pagedkv.model_tests.teaching.request_terminal import (
    plain_request_picture,
    rich_request_picture,
)
from pagedkv.model_tests.teaching.snapshot import (
    BlockCell,
    ChainLink,
    DevicePicture,
    Picture,
    TableRow,
)

WIDTH = 96
EMPTY_SLOT = "·"
STATE_STYLE = {"used": "green", "evictable": "yellow", "null": "dim"}


def tokens_text(tokens: tuple[int, ...], capacity: int) -> str:
    shown = [str(t) for t in tokens] + [EMPTY_SLOT] * max(0, capacity - len(tokens))
    return " ".join(shown)


def table_text(row: TableRow) -> str:
    return "[" + " ".join("null" if b == row.null_block else str(b) for b in row.blocks) + "]"


MAX_FREE_SHOWN = 32


def free_text(device: DevicePicture) -> str:
    shown = " ".join(map(str, device.free[:MAX_FREE_SHOWN])) or "empty"
    rest = len(device.free) - MAX_FREE_SHOWN
    return f"    free list: {shown}" + (f" … and {rest} more" if rest > 0 else "")


def copies_text(copies: tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"{s} → {d}" for s, d in copies)


def heading(frame: Frame, total: int) -> str:
    if frame.number == 0:
        return f"step 0 of {total}: the start"
    return f"step {frame.number} of {total}: {frame.call} -> {frame.outcome}"


CELL_HEADERS = ["block", "ref", "state", "tokens", "hash", "computed", "accessed"]


def _with_access(device: DevicePicture) -> bool:
    """Last-access times decide eviction; the column shows once some block has been accessed."""
    return any(cell.accessed != "never" for cell in device.cells if cell.state != "null")


def _headers(device: DevicePicture) -> list[str]:
    return CELL_HEADERS if _with_access(device) else CELL_HEADERS[:-1]


def _cell_columns(cell: BlockCell, with_access: bool) -> list[str]:
    shown = [
        str(cell.block),
        str(cell.ref_count),
        cell.state,
        "" if cell.state == "null" else tokens_text(cell.tokens, cell.capacity),
        cell.content_hash or "",
        "yes" if cell.computed else "",
    ]
    if with_access:
        shown.append(cell.accessed if cell.state != "null" else "")
    return shown


def _chain_line(link: ChainLink) -> str:
    parent = f" (parent {link.parent}, not cached here)" if link.depth == 0 and link.parent else ""
    tag = "  evictable" if link.evictable else ""
    return (
        f"{link.content_hash} block {link.block} [{' '.join(map(str, link.tokens))}]{parent}{tag}"
    )


def _chain_indent(link: ChainLink) -> str:
    return "      " + "   " * (link.depth - 1) + " └ " if link.depth else "      "


# --- plain -------------------------------------------------------------------------------------


def plain_device(device: DevicePicture) -> list[str]:
    lines = [f"{device.name}  {device.counts()}"]
    if device.cells:
        access = _with_access(device)
        rows = [_headers(device)] + [_cell_columns(cell, access) for cell in device.cells]
        lines += columns(rows, "    ")
    lines.append(free_text(device))
    if device.chain:
        lines.append("    hash chains:")
        lines += [_chain_indent(link) + _chain_line(link) for link in device.chain]
    if device.pending:
        lines.append(f"    pending copy-on-write: {copies_text(device.pending)}")
    return lines


def plain_picture(picture: Picture) -> list[str]:
    lines: list[str] = []
    for device in picture.devices:
        lines += plain_device(device)
    if picture.tables:
        lines.append("block tables")
        rows = [
            [row.label, row.device, row.length, table_text(row), row.extra_key]
            for row in picture.tables
        ]
        lines += columns(rows, "    ")
    elif len(picture.devices) > 1:
        lines.append("block tables: none")
    return lines


def plain_frame(frame: Frame, total: int) -> str:
    title = f"── {heading(frame, total)} "
    lines = [title + "─" * max(0, WIDTH - len(title))]
    if frame.narration:
        lines += textwrap.wrap(frame.narration, WIDTH, initial_indent="  ", subsequent_indent="  ")
    lines.append("")
    if isinstance(frame.picture, RequestPicture):
        lines += plain_request_picture(frame.picture)
    elif isinstance(frame.picture, DefragPicture):
        lines += frame.picture.lines()
    elif frame.picture is not None:
        lines += plain_picture(frame.picture)
    if frame.copies:
        lines.append(f"copies for the kernel: {copies_text(frame.copies)}")
    if frame.finding is not None:
        rule = frame.finding.rule
        lines.append(f"!! {frame.finding.kind}: {rule.name} ({rule.cite}): {rule.says}")
        lines.append(f"   {frame.finding.message}")
    return "\n".join(lines)


def plain_opening(walk: Walk) -> str:
    return f"{walk.title}\nconfig: {walk.config}\n"


# --- rich ---------------------------------------------------------------------------------------


def rich_device(device: DevicePicture) -> RenderableType:
    parts: list[RenderableType] = [
        Text.assemble((device.name, "bold"), "  ", (device.counts(), "cyan"))
    ]
    if device.cells:
        table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="dim")
        access = _with_access(device)
        for header in _headers(device):
            table.add_column(header, justify="right" if header in ("block", "ref") else "left")
        for cell in device.cells:
            table.add_row(*_cell_columns(cell, access), style=STATE_STYLE[cell.state])
        parts.append(Padding(table, (0, 0, 0, 4)))
    parts.append(Text(free_text(device), "dim"))
    if device.chain:
        parts.append(Text("    hash chains:", "bold"))
        for link in device.chain:
            style = "yellow" if link.evictable else "green"
            parts.append(Text(_chain_indent(link)) + Text(_chain_line(link), style))
    if device.pending:
        parts.append(Text(f"    pending copy-on-write: {copies_text(device.pending)}", "magenta"))
    return Group(*parts)


def rich_picture(picture: Picture) -> RenderableType:
    parts = [rich_device(device) for device in picture.devices]
    if picture.tables:
        parts.append(Text("block tables", "bold"))
        table = Table(
            box=None,
            pad_edge=False,
            padding=(0, 2, 0, 0),
            show_header=False,
        )
        for _ in range(5):
            table.add_column()
        for row in picture.tables:
            table.add_row(row.label, row.device, row.length, table_text(row), row.extra_key)
        parts.append(Padding(table, (0, 0, 0, 4)))
    return Group(*parts)


def rich_frame(frame: Frame, total: int) -> RenderableType:
    parts: list[RenderableType] = [RichRule(Text(heading(frame, total), "bold"), align="left")]
    if frame.narration:
        parts.append(Text(frame.narration, "italic"))
    parts.append(Text(""))
    if isinstance(frame.picture, RequestPicture):
        parts.append(rich_request_picture(frame.picture))
    elif isinstance(frame.picture, DefragPicture):
        parts.append(Text("\n".join(frame.picture.lines())))
    elif frame.picture is not None:
        parts.append(rich_picture(frame.picture))
    if frame.copies:
        parts.append(Text(f"copies for the kernel: {copies_text(frame.copies)}", "magenta"))
    if frame.finding is not None:
        rule = frame.finding.rule
        parts.append(
            Text(f"{frame.finding.kind}: {rule.name} ({rule.cite}): {rule.says}", "bold red")
        )
        parts.append(Text(frame.finding.message, "red"))
    return Group(*parts)


def rich_opening(walk: Walk) -> RenderableType:
    return Group(Text(walk.title, "bold"), Text.assemble(("config ", "dim"), walk.config))
