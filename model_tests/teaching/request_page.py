"""A request-level picture as HTML, for the page of ``page.py``: the pool's blocks as boxes
(the style of the manager level's: used, evictable, null), the free queue as a row front to back,
each request's tables per group, and the step's KV events. Blocks that changed since the step
before are outlined."""

from __future__ import annotations

from html import escape

from pagedkv.model_tests.teaching.request_snapshot import RequestCell, RequestPicture, RequestRow
from pagedkv.specs.request_types import NULL_BLOCK


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _block(cell: RequestCell, changed: bool) -> str:
    classes = f"block {cell.state}" + (" changed" if changed else "")
    details = [f"block {cell.block}", cell.state]
    body = [f'<span class="id">{cell.block}</span>']
    if cell.state == "null":
        body.append('<span class="tokens">null</span>')
    else:
        details.append(f"ref count {cell.ref_count}")
        body.append(f'<span class="ref" title="ref count">×{cell.ref_count}</span>')
        held = " ".join(cell.holders) or "in the free queue"
        body.append(f'<span class="tokens">{_e(held)}</span>')
        if cell.key:
            details.append(f"cached as {cell.key}")
            tokens = "" if cell.tokens is None else f" [{' '.join(map(str, cell.tokens))}]"
            body.append(f'<span class="hash">{_e(cell.key + tokens)}</span>')
    return f'<div class="{classes}" title="{_e(", ".join(details))}">{"".join(body)}</div>'


def _queue(picture: RequestPicture) -> str:
    items = []
    for block, cached in picture.free_queue:
        state = "evictable" if cached else "free"
        tip = f"block {block}: " + ("cached, evicted when taken" if cached else "blank")
        items.append(
            f'<div class="block {state}" title="{_e(tip)}"><span class="id">{block}</span></div>'
        )
    shown = "".join(items) or '<span class="empty">empty</span>'
    return (
        '<h5 class="queue">free queue, front first (taken next)</h5>'
        f'<div class="blocks queue">{shown}</div>'
    )


def _cells(row: RequestRow) -> str:
    return "".join(
        '<span class="cell null">null</span>'
        if block == NULL_BLOCK
        else f'<span class="cell">{block}</span>'
        for block in row.blocks
    )


def _tables(picture: RequestPicture) -> str:
    if not picture.tables:
        return '<p class="tables none">no requests hold blocks</p>'
    several = len(picture.groups) > 1
    rows = []
    for row in picture.tables:
        group = f"<td>g{row.group}</td>" if several else ""
        cached = f"{row.num_cached} cached" if picture.caching else ""
        rows.append(
            f"<tr><th>{_e(row.request)}</th>{group}"
            f'<td class="table">{_cells(row)}</td><td>{cached}</td></tr>'
        )
    return f'<table class="tables"><caption>requests</caption>{"".join(rows)}</table>'


def request_picture_html(picture: RequestPicture, before: RequestPicture | None) -> str:
    old = {} if before is None else {cell.block: cell for cell in before.cells}
    blocks = "".join(
        _block(cell, before is not None and old.get(cell.block) != cell) for cell in picture.cells
    )
    groups = " · ".join(picture.group_lines())
    events = "".join(f'<p class="events">event: {_e(event)}</p>' for event in picture.events)
    return (
        f'<div class="devices"><div class="device"><h4>pool</h4>'
        f'<p class="counts">{_e(picture.counts())}<br>{_e(groups)}</p>'
        f'<div class="blocks">{blocks}</div>{_queue(picture)}</div></div>'
        f"{_tables(picture)}{events}"
    )
