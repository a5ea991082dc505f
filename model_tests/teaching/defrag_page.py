"""A defragmenter's picture as HTML, for the page of ``page.py``: its rows as a table, one
column per physical id, cells that changed since the step before outlined."""

from __future__ import annotations

from html import escape

from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def defrag_picture_html(picture: DefragPicture, before: DefragPicture | None) -> str:
    old = dict(before.rows()) if before is not None else {}
    body = []
    for label, cells in picture.rows():
        was = old.get(label)
        row = "".join(
            f'<td class="{"changed" if was is not None and was[i] != cell else ""}">{_e(cell)}</td>'
            for i, cell in enumerate(cells)
        )
        body.append(f"<tr><th>{_e(label)}</th>{row}</tr>")
    tables = "".join(
        f"<tr><th>{_e(key)}</th><td>{_e(list(logical))}</td><td>{_e(list(physical))}</td></tr>"
        for key, logical, physical in picture.tables
    )
    reserved = ", ".join(map(str, sorted(picture.reserved))) or "none"
    return (
        f'<table class="defrag">{"".join(body)}</table>'
        f'<p class="counts">reserved (never move): {_e(reserved)}</p>'
        '<table class="tables"><caption>tables: logical ids, and as the model reads them</caption>'
        f"{tables}</table>"
    )
