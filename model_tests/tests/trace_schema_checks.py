"""Traces held to ``specs/trace.schema.json`` in tests: the conftest wraps ``trace.dumps`` and
``trace.parse`` with these, so that every trace a test writes (``check``, ``record``, ``soak``,
the corpus, the bench) and every trace the reader accepts (stored traces, fixtures) is also
checked against the schema that other languages validate their traces with.

Not done on every read outside tests: Python's ``jsonschema`` takes about 25 times as long as
the reader (``specs/oracle.md`` §4), and the reader's own checks say more precisely what is
wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jsonschema
import jsonschema_rs

from pagedkv.model_tests.oracle.trace import Trace
from pagedkv.model_tests.oracle.trace_schema import SCHEMA_FILE

SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
"""Python's validator: the readable messages."""
FAST = jsonschema_rs.validator_for(SCHEMA)
"""The Rust one (``jsonschema-rs``): a few hundred times as fast, so that every trace of the
suite can be checked (the corpus's 600 lines: 5 ms against 0.9 s)."""


def lines_of(text: str) -> list[Any]:
    """A trace's lines as JSON values (blank lines skipped, as the reader skips them)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def problems(values: Any) -> list[str]:
    """Where ``values`` (one line, or a whole trace as a list of lines) breaks the schema, each
    place named by its line (``line 3: $.args[0]: ...``)."""
    found = []
    for error in VALIDATOR.iter_errors(values):
        where = list(error.absolute_path)
        if isinstance(values, list) and where:
            path = "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where[1:])
            found.append(f"line {int(where[0]) + 1}: {path}: {error.message}")
        else:
            found.append(f"{error.json_path}: {error.message}")
    return found


def check_text(text: str) -> None:
    """An AssertionError naming each place where the trace ``text`` breaks the schema."""
    values = lines_of(text)
    if FAST.is_valid(values):
        return
    found = problems(values) or [f"{error.message}" for error in FAST.iter_errors(values)]
    assert not found, "the trace breaks specs/trace.schema.json:\n" + "\n".join(found)


def checked_dumps(dumps: Callable[[Trace], str]) -> Callable[[Trace], str]:
    def dumps_and_check(trace: Trace) -> str:
        text = dumps(trace)
        check_text(text)
        return text

    return dumps_and_check


def checked_parse(parse: Callable[[Iterable[str]], Trace]) -> Callable[[Iterable[str]], Trace]:
    """``parse`` that also checks what it accepted (the lines as it read them, so that it
    refuses a trace exactly where and how it would alone)."""

    def parse_and_check(lines: Iterable[str]) -> Trace:
        seen: list[str] = []

        def kept() -> Iterator[str]:
            for line in lines:
                seen.append(line)
                yield line

        trace = parse(kept())
        check_text("\n".join(seen))
        return trace

    return parse_and_check
