"""What a benchmark section hands back: tables to print and data for the JSON file."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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
