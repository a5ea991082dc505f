"""One self-contained HTML page that steps through a walk: no network, no server.

Every step is a ``<section class="step" data-step="N">`` holding the call, its outcome, the
reference's state after it and, with a target, the target's side; a marked step (a divergence, a
stale expectation) also has the class ``diverges`` and the rule it broke. The style and the
script (``page.css``, ``page.js``, beside this file) are inlined. Without JavaScript every step
is shown one after the other; with it, one at a time, with buttons and the arrow keys.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from pathlib import Path

from pagedkv.model_tests.oracle.trace import write_text
from pagedkv.model_tests.teaching.defrag_page import defrag_picture_html
from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture
from pagedkv.model_tests.teaching.frames import Frame, TargetSide, Walk
from pagedkv.model_tests.teaching.request_page import request_picture_html
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture
from pagedkv.model_tests.teaching.snapshot import BlockCell, DevicePicture, Picture, TableRow
from pagedkv.model_tests.teaching.terminal import copies_text, heading, tokens_text

MAX_BLOCKS_DRAWN = 256
"""Larger pools draw only their non-blank blocks (and the count of the rest)."""


def _asset(name: str) -> str:
    return (
        resources.files("pagedkv.model_tests.teaching").joinpath(name).read_text(encoding="utf-8")
    )


def _e(text: object) -> str:
    return escape(str(text), quote=True)


# --- the reference's state ------------------------------------------------------------------------


def _cell_key(cell: BlockCell) -> tuple[object, ...]:
    return (cell.state, cell.ref_count, cell.tokens, cell.content_hash, cell.computed)


def _block(cell: BlockCell, changed: bool) -> str:
    classes = f"block {cell.state}" + (" changed" if changed else "")
    details = [f"block {cell.block}", cell.state, f"ref count {cell.ref_count}"]
    if cell.content_hash:
        details.append(f"hash {cell.content_hash}")
    if cell.computed:
        details.append("computed")
    if cell.state == "evictable":
        details.append(f"last accessed {cell.accessed}")
    body = [f'<span class="id">{cell.block}</span>']
    if cell.state == "null":
        body.append('<span class="tokens">null</span>')
    else:
        body.append(f'<span class="ref" title="ref count">×{cell.ref_count}</span>')
        body.append(f'<span class="tokens">{_e(tokens_text(cell.tokens, cell.capacity))}</span>')
        if cell.content_hash:
            mark = " ✓" if cell.computed else ""
            body.append(f'<span class="hash">{_e(cell.content_hash)}{mark}</span>')
    return f'<div class="{classes}" title="{_e(", ".join(details))}">{"".join(body)}</div>'


def _device(device: DevicePicture, before: DevicePicture | None) -> str:
    old = {} if before is None else {c.block: _cell_key(c) for c in before.cells}
    old_free = set() if before is None else set(before.free)
    cells = {cell.block: cell for cell in device.cells}
    ids = sorted(set(cells) | set(device.free))
    parts = [
        f'<div class="device"><h4>{_e(device.name)}</h4>',
        f'<p class="counts">{_e(device.counts())}</p><div class="blocks">',
    ]
    draw_free = len(ids) <= MAX_BLOCKS_DRAWN
    for block in ids:
        cell = cells.get(block)
        if cell is not None:
            changed = before is not None and old.get(block) != _cell_key(cell)
            parts.append(_block(cell, changed))
        elif draw_free:
            changed = before is not None and block not in old_free
            classes = "block free" + (" changed" if changed else "")
            parts.append(
                f'<div class="{classes}" title="block {block}: free">'
                f'<span class="id">{block}</span></div>'
            )
    if not draw_free:
        parts.append(f'<p class="more">and {len(device.free)} free blocks</p>')
    parts.append("</div>")
    if device.chain:
        parts.append('<div class="chain"><h5>hash chains</h5>')
        for link in device.chain:
            parent = (
                f' <span class="parent">parent {_e(link.parent)} not cached here</span>'
                if link.depth == 0 and link.parent
                else ""
            )
            state = "evictable" if link.evictable else "used"
            parts.append(
                f'<p class="link {state}" style="margin-left: {1.4 * link.depth:g}em">'
                f"{'└ ' if link.depth else ''}<code>{_e(link.content_hash)}</code>"
                f" block {link.block}"
                f' <span class="tokens">[{_e(" ".join(map(str, link.tokens)))}]</span>{parent}</p>'
            )
        parts.append("</div>")
    if device.pending:
        parts.append(
            f'<p class="pending">pending copy-on-write: {_e(copies_text(device.pending))}</p>'
        )
    parts.append("</div>")
    return "".join(parts)


def _table_cells(row: TableRow) -> str:
    cells = []
    for block in row.blocks:
        if block == row.null_block:
            cells.append('<span class="cell null">null</span>')
        else:
            cells.append(f'<span class="cell">{block}</span>')
    return "".join(cells)


def _tables(picture: Picture) -> str:
    if not picture.tables:
        return "" if len(picture.devices) == 1 else '<p class="tables none">no block tables</p>'
    rows = [
        f"<tr><th>{_e(row.label)}</th><td>{_e(row.device)}</td><td>{row.length}</td>"
        f'<td class="table">{_table_cells(row)}</td><td>{_e(row.extra_key)}</td></tr>'
        for row in picture.tables
    ]
    return f'<table class="tables"><caption>block tables</caption>{"".join(rows)}</table>'


def _picture(picture: Picture, before: Picture | None) -> str:
    olds = {} if before is None else {d.name: d for d in before.devices}
    devices = "".join(_device(d, olds.get(d.name)) for d in picture.devices)
    return f'<div class="devices">{devices}</div>{_tables(picture)}'


# --- the target's side ----------------------------------------------------------------------------


def _target(side: TargetSide, reference_outcome: str | None, name: str) -> str:
    """The target's side; ``reference_outcome`` None under the safety tier (no reference)."""
    differs = " differs" if reference_outcome not in (None, side.outcome) else ""
    alone = reference_outcome is None
    heading = "what it did, held to the safety tier" if alone else "what it did"
    parts = [
        f'<div class="side target"><h3>target: {heading} <code>{_e(name)}</code></h3>',
        f'<p class="outcome{differs}">{_returns(side.outcome)}</p>',
        '<table class="free"><tr><th></th><th>target</th>'
        + ("" if alone else "<th>reference</th>")
        + "</tr>",
    ]
    for count in side.free:
        cls = ' class="differs"' if count.differs else ""
        shown = "?" if count.target is None else str(count.target)
        theirs = "" if count.reference is None else f"<td>{count.reference}</td>"
        parts.append(f"<tr{cls}><th>free {_e(count.device)}</th><td>{shown}</td>{theirs}</tr>")
    parts.append("</table>")
    if side.tables:
        hint = (
            ""
            if alone
            else '<p class="hint">small: the reference\'s block at that position, in the'
            ' target\'s ids ("new": not matched yet)</p>'
        )
        parts.append(
            f'<h5 class="tables">block tables, in the target\'s ids</h5>{hint}'
            '<table class="tables">'
        )
        for row in side.tables:
            wrong = row.differs_at()
            expected = row.expected
            if row.blocks is None:
                cells = f'<span class="cell differs">{_e(row.error or "missing")}</span>'
            elif expected is None:
                cells = "".join(f'<span class="cell">{block}</span>' for block in row.blocks)
            else:
                cells = "".join(
                    f'<span class="cell{" differs" if i in wrong else ""}">{block}'
                    f"<sub>{_expected(expected, i)}</sub></span>"
                    for i, block in enumerate(row.blocks)
                )
                if len(expected) > len(row.blocks):
                    cells += '<span class="cell differs">missing</span>' * (
                        len(expected) - len(row.blocks)
                    )
            parts.append(f'<tr><th>{_e(row.label)}</th><td class="table">{cells}</td></tr>')
        parts.append("</table>")
    parts.append("</div>")
    return "".join(parts)


def _returns(outcome: str) -> str:
    if outcome.startswith("raises"):
        return f"<code>{_e(outcome)}</code>"
    return f"returns <code>{_e(outcome)}</code>"


def _expected(expected: tuple[int | None, ...], index: int) -> str:
    if index >= len(expected):
        return "none"
    value = expected[index]
    return "new" if value is None else str(value)


# --- a step ---------------------------------------------------------------------------------------


def _step(
    frame: Frame, total: int, before: Frame | None, target_name: str | None, safety: bool = False
) -> str:
    marked = " diverges" if frame.finding is not None else ""
    parts = [
        f'<section class="step{marked}" id="step-{frame.number}" data-step="{frame.number}">',
        f"<h2>{_e(heading(frame, total))}</h2>",
    ]
    if frame.narration:
        parts.append(f'<p class="narration">{_e(frame.narration)}</p>')
    if frame.finding is not None:
        rule = frame.finding.rule
        parts.append(
            f'<div class="finding" role="alert"><p><strong>{_e(frame.finding.kind)}:'
            f' {_e(rule.name)}</strong> <span class="cite">({_e(rule.cite)})</span></p>'
            f'<p class="rule">{_e(rule.says)}</p>'
            f'<p class="message">{_e(frame.finding.message)}</p></div>'
        )
    if safety:
        parts.append('<div class="sides">')
        if frame.target is not None:
            parts.append(_target(frame.target, None, target_name or "target"))
        else:
            parts.append(
                '<div class="side target"><h3>the call</h3>'
                f'<p class="outcome">{_e(frame.outcome)}</p></div>'
            )
        parts.append("</div></section>")
        return "".join(parts)
    title = "reference: what the spec expects" if frame.target is not None else "reference"
    parts.append(f'<div class="sides"><div class="side reference"><h3>{title}</h3>')
    if frame.number:
        parts.append(f'<p class="outcome">{_returns(frame.outcome)}</p>')
    else:
        parts.append(f'<p class="outcome">{_e(frame.outcome)}</p>')
    if frame.copies:
        parts.append(
            f'<p class="copies">copies for the kernel: {_e(copies_text(frame.copies))}</p>'
        )
    previous = None if before is None else before.picture
    if isinstance(frame.picture, RequestPicture):
        earlier = previous if isinstance(previous, RequestPicture) else None
        parts.append(request_picture_html(frame.picture, earlier))
    elif isinstance(frame.picture, DefragPicture):
        earlier_defrag = previous if isinstance(previous, DefragPicture) else None
        parts.append(defrag_picture_html(frame.picture, earlier_defrag))
    elif frame.picture is not None:
        parts.append(_picture(frame.picture, previous if isinstance(previous, Picture) else None))
    parts.append("</div>")
    if frame.target is not None:
        parts.append(_target(frame.target, frame.outcome, target_name or "target"))
    parts.append("</div></section>")
    return "".join(parts)


def _index(walk: Walk) -> str:
    items = []
    for frame in walk.frames:
        cls = ' class="diverges"' if frame.finding is not None else ""
        text = frame.call or "start"
        items.append(
            f'<li{cls}><a href="#step-{frame.number}" data-step="{frame.number}">'
            f"{frame.number}. {_e(text)}</a></li>"
        )
    return f'<ol class="index" start="0">{"".join(items)}</ol>'


def render(walk: Walk) -> str:
    total = len(walk.frames) - 1
    marked = walk.finding
    verdict_class = "verdict fail" if marked is not None else "verdict"
    jump = ""
    if marked is not None:
        jump = (
            f'<button type="button" id="to-finding" data-step="{marked.number}">'
            f"⚠ step {marked.number}: the {_e(marked.finding.kind if marked.finding else '')}"
            "</button>"
        )
    steps = "".join(
        _step(frame, total, walk.frames[i - 1] if i else None, walk.target, walk.safety)
        for i, frame in enumerate(walk.frames)
    )
    notes = "".join(f'<p class="note">{_e(note)}</p>' for note in walk.notes)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(walk.title)}</title>
<style>{_asset("page.css")}</style>
</head>
<body>
<header>
<h1>{_e(walk.title)}</h1>
<p class="config">{walk.level} level · <code>{_e(walk.config)}</code></p>
<p class="{verdict_class}">{_e(walk.verdict)}</p>
{notes}
<p class="legend"><span class="block used">used</span> <span class="block evictable">evictable:
cached, ref count 0</span> <span class="block free">free</span> <span class="block null">null</span>
<span class="block changed">changed by this step</span> ×n ref count · ✓ computed</p>
<nav>
<button type="button" id="first" title="first step (Home)">« first</button>
<button type="button" id="prev" title="previous step (←)">◀ previous</button>
<span id="position">step {0 if marked is None else marked.number} of {total}</span>
<button type="button" id="next" title="next step (→)">next ▶</button>
<button type="button" id="last" title="last step (End)">last »</button>
{jump}
</nav>
</header>
<div class="layout">
<aside>{_index(walk)}</aside>
<main>{steps}</main>
</div>
<script>{_asset("page.js")}</script>
</body>
</html>
"""


def write(walk: Walk, path: str | Path) -> Path:
    return write_text(path, render(walk))
