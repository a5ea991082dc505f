"""What the ``pagedkv`` command draws on a terminal, with rich.

Its own module so that a command whose output is not a terminal (CI, a pipe, a file) never
loads rich: ``pagedkv.cli`` imports it only once it has seen a terminal (start-up,
``specs/oracle.md`` §6).
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pagedkv.model_tests.oracle.check import Report


def console(stream: IO[str], styled: bool) -> Any:
    """A console on ``stream``; without styling (``NO_COLOR``) no escape codes at all."""
    return Console(file=stream, highlight=False, color_system="auto" if styled else None)


def line(on: Any, text: str, style: str) -> None:
    on.print(f"[{style}]{escape(text)}[/]" if style and text else escape(text))


def report(on: Any, report: Report) -> None:
    """A verdict: the title, the verdict boxed, the steps as a table, the notes."""
    on.print(Text(report.title, style="bold"))
    on.print(Panel(Text(report.verdict), style="green" if report.ok else "red", expand=False))
    for known in report.known:
        on.print(Text(known, style="magenta"))
    if report.config:
        on.print(Text.assemble(("config ", "dim"), report.config))
    if report.steps:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("#", justify="right")
        table.add_column("operation")
        table.add_column("reference")
        table.add_column("")
        for step in report.steps:
            style = "bold red" if step.failed else ""
            table.add_row(
                str(step.number),
                Text(step.call, style=style),
                Text(step.outcome),
                Text("✗ diverges" if step.failed else "", style=style),
            )
        on.print(table)
    if report.detail:
        on.print(Text(report.detail, style="yellow"))
    for note in report.notes:
        on.print(Text(note, style="cyan"))
