"""What a benchmark section hands back: tables to print and data for the JSON file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


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
    """A table cell: floats to three significant decimals where small, two otherwise."""
    if isinstance(value, float):
        if value != value:  # NaN: no figure
            return "-"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
