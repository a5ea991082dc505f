"""Plain-text columns: rows of cells padded to each column's widest, for the terminal drawings."""

from __future__ import annotations

from collections.abc import Sequence


def columns(rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    """One line per row, each cell left-aligned to its column's width, trailing spaces cut."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(text.ljust(widths[i]) for i, text in enumerate(row))).rstrip()
        for row in rows
    ]
