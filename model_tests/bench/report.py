"""What a benchmark section hands back: tables to print and data for the JSON file; a table
drawn with rich, boxed on a terminal and as plain aligned text for a log or a pipe."""

from __future__ import annotations

import io
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import rich.table
from rich import box
from rich.console import Console
from rich.text import Text


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements, with the smallest and largest: a figure's cell
    reads ``median [min, max]``."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def scaled(self, factor: float) -> Spread:
        """The same measurements in another unit (µs per call from seconds per replay)."""
        return Spread(self.median * factor, self.low * factor, self.high * factor, self.count)

    def as_json(self) -> dict[str, float]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.count}


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    """One part of the benchmark: its tables, and its figures as JSON-able data."""

    name: str
    tables: list[Table] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def load_average() -> float:
    """The one-minute load average: other work on the machine skews every figure."""
    return round(os.getloadavg()[0], 2)


def cell(value: Any) -> str:
    """A table cell: floats to three significant decimals where small, two otherwise; a
    ``Spread`` as ``median [min, max]``."""
    if isinstance(value, Spread):
        return f"{cell(value.median)} [{cell(value.low)}, {cell(value.high)}]"
    if isinstance(value, float):
        if value != value:  # NaN: no figure
            return "-"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def is_figure(value: Any) -> bool:
    """Whether a cell is a number (right-aligned)."""
    return isinstance(value, int | float | Spread)


PLAIN = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
"""No frame: a dashed line under the header, the columns apart (plain text for a log)."""
PLAIN_WIDTH = 10_000
"""Columns wide enough that no table is wrapped: a log keeps each row on one line."""


def rich_table(table: Table, *, plain: bool = False) -> rich.table.Table:
    """``table`` for rich: numbers right-aligned, every cell as literal text (a label such as
    ``optimized [vllm-v0 stream]`` is not markup); ``plain``, without a frame (``PLAIN``) or a
    title (rich would wrap it to the table's width; ``plain_text`` prints it whole)."""
    numeric = [
        all(is_figure(row[i]) for row in table.rows if i < len(row))
        for i in range(len(table.columns))
    ]
    drawn = (
        rich.table.Table(box=PLAIN, show_edge=False, pad_edge=False, collapse_padding=True)
        if plain
        else rich.table.Table(title=Text(table.title), title_justify="left")
    )
    for name, right in zip(table.columns, numeric, strict=True):
        drawn.add_column(Text(name), justify="right" if right else "left")
    for row in table.rows:
        drawn.add_row(*(Text(cell(value)) for value in row))
    return drawn


def plain_text(table: Table) -> str:
    """``table`` as plain aligned text, no styling at all: its title, the header, a dashed line,
    the rows (each line without trailing spaces)."""
    out = io.StringIO()
    console = Console(file=out, color_system=None, force_terminal=False, width=PLAIN_WIDTH)
    console.print(rich_table(table, plain=True))
    return "\n".join([table.title, *(line.rstrip() for line in out.getvalue().splitlines())])
