"""The trace format as a JSON Schema (``specs/trace.schema.json``, issue 26 item 6): written
from the tables the reader goes by, met by every stored trace and every trace pagedkv writes,
and refusing what the reader refuses: broken variants of real traces, each refused by both (the
schema through two validators: Python's ``jsonschema`` and the Rust ``jsonschema-rs``). The rules
no schema can state (a trailer's count, its place, an integer's spelling) are the reader's
alone, and said so here as in ``specs/oracle.md`` §4.

Every trace the other tests write or read is checked too (``conftest.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pagedkv.model_tests.oracle import codec, trace, trace_schema
from pagedkv.model_tests.oracle.record import record_level
from pagedkv.model_tests.tests.trace_schema_checks import (
    FAST,
    SCHEMA,
    VALIDATOR,
    lines_of,
    problems,
)
from pagedkv.specs import wire
from pagedkv.specs.request_types import Request, RequestConfig

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "model_tests" / "corpus" / "traces"
PEERS = ROOT / ".peers" / "traces"

Lines = list[Any]


def refused_by_schema(values: Any) -> bool:
    """Refused by both validators (they must agree)."""
    python, rust = VALIDATOR.is_valid(values), FAST.is_valid(values)
    assert python == rust, f"jsonschema says {python}, jsonschema-rs says {rust}: {values}"
    return not python


def text_of(lines: Lines) -> str:
    return "\n".join(codec.dumps(line) for line in lines) + "\n"


def refused_by_reader(lines: Lines) -> str:
    with pytest.raises(trace.TraceError) as refused:
        trace.loads(text_of(lines))
    return str(refused.value)


# --- the file -------------------------------------------------------------------------------------


def test_the_committed_schema_is_the_one_the_tables_give() -> None:
    """``python -m pagedkv.model_tests.oracle.trace_schema`` writes it again."""
    assert trace_schema.SCHEMA_FILE.read_text(encoding="utf-8") == trace_schema.text()


def test_it_is_a_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_it_has_a_form_for_every_kind_and_a_rule_for_every_operation() -> None:
    defs = SCHEMA["$defs"]
    assert {name.removeprefix("kind.") for name in defs if name.startswith("kind.")} == set(
        wire.JSON_FORMS
    )
    for level in codec.LEVELS:
        operation = defs[f"{level}_operation"]
        assert operation["properties"]["op"]["enum"] == list(codec.OPS[level])
        ruled = [rule["if"]["properties"]["op"]["const"] for rule in operation["allOf"]]
        assert ruled == list(codec.OPS[level])
        assert set(operation["properties"]) == trace.OPERATION_FIELDS
    assert set(defs["header"]["properties"]) == trace.HEADER_FIELDS
    assert set(defs["trailer"]["properties"]) == trace.TRAILER_FIELDS


# --- what pagedkv stores and writes ---------------------------------------------------------------


def stored_traces() -> list[Path]:
    """The corpus's traces and, where fetched, the real peers' (``.peers/traces``)."""
    found = sorted(CORPUS.glob("*.jsonl")) + sorted(PEERS.glob("*.jsonl"))
    assert len(found) >= 100
    return found


def test_every_stored_trace_meets_the_schema_line_by_line_and_whole() -> None:
    broken = {}
    for path in stored_traces():
        lines = lines_of(path.read_text(encoding="utf-8"))
        found = [f"line {n}: {p}" for n, line in enumerate(lines, 1) for p in problems(line)]
        found += problems(lines)
        if found or not FAST.is_valid(lines):
            broken[path.name] = found or ["jsonschema-rs refuses it"]
    assert not broken, broken


def events_trace() -> trace.Trace:
    """A request-level trace whose KV events hold each type of event (a stored block with its
    parent, a removed one, the cache cleared)."""
    config = RequestConfig(num_blocks=3, block_size=2)
    a, b = Request("a", (1, 2, 3, 4), 4), Request("b", (5, 6, 7, 8), 4)
    calls = [
        ("allocate_slots", (a, 4, 0, None, 0)),
        ("free", ("a",)),
        ("allocate_slots", (b, 4, 0, None, 0)),
        ("reset_prefix_cache", ()),
        ("free", ("b",)),
        ("reset_prefix_cache", ()),
        ("take_events", ()),
        ("get_computed_blocks", (b,)),
        ("usage", ()),
    ]
    return trace.trace_of_calls("request", config, calls)


def test_the_events_trace_holds_every_type_of_event() -> None:
    (events,) = [op.expect for op in events_trace().ops if op.op == "take_events"]
    assert events is not None
    assert {event["type"] for event in events["result"]} == {"stored", "removed", "cleared"}
    assert not problems(lines_of(trace.dumps(events_trace())))


@pytest.mark.parametrize("level", codec.LEVELS)
def test_a_recorded_corpus_meets_the_schema(level: codec.Level, tmp_path: Path) -> None:
    """``pagedkv record`` covers every operation and error type of the level: each of its
    traces, and the configurations it records refused, meet the schema."""
    corpus = record_level(level, tmp_path, runs=4, seed=0)
    assert corpus.complete, corpus.summary()
    for path in corpus.files:
        lines = lines_of(path.read_text(encoding="utf-8"))
        assert FAST.is_valid(lines), (path.name, problems(lines))
        assert all(FAST.is_valid(line) for line in lines), path.name


# --- what it refuses ------------------------------------------------------------------------------


def stored(name: str) -> Lines:
    return lines_of((CORPUS / name).read_text(encoding="utf-8"))


BASES: dict[str, Callable[[], Lines]] = {
    "manager": lambda: stored("reference-with-computed-list-swap-starts-over.jsonl"),
    "safety": lambda: stored("brokenfreeleakslastblock-safety.jsonl"),
    "pool": lambda: stored("poolhashignoresextrakey.jsonl"),
    "request": lambda: stored("requestcountskipsevictablehits.jsonl"),
    "events": lambda: lines_of(trace.dumps(events_trace())),
}
"""Real traces: a manager's under a policy, the safety tier's, a pool's with a prefix, a
request-level one with two groups, and one with KV events."""


def _set(path: str, value: Any) -> Callable[[Lines], None]:
    """Set the field at ``path`` (``0.config.num_gpu_blocks``; ``-1`` is the trailer)."""

    def mutate(lines: Lines) -> None:
        *parents, last = path.split(".")
        node: Any = lines
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Callable[[Lines], None]:
    def mutate(lines: Lines) -> None:
        *parents, last = path.split(".")
        node: Any = lines
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[int(last) if isinstance(node, list) else last]

    return mutate


def _append(line: Any) -> Callable[[Lines], None]:
    """Add ``line`` before the trailer, and count it there."""

    def mutate(lines: Lines) -> None:
        lines.insert(-1, line)
        lines[-1]["steps"] += 1

    return mutate


def _version_1(lines: Lines) -> None:
    lines[0]["version"] = 1


def _two_trailers(lines: Lines) -> None:
    lines.append(dict(lines[-1]))


def _ops_after_refused_creation(lines: Lines) -> None:
    lines[0]["create"] = {"error": "ConfigurationError"}


def _not_an_object(lines: Lines) -> None:
    lines[1] = [lines[1]["op"], lines[1]["args"]]


HIT_RATE_NAN = {"op": "hit_rate", "args": [], "expect": {"result": {"float": "NaN"}}}
MUTATIONS: list[tuple[str, str, Callable[[Lines], None]]] = [
    ("manager", "another format", _set("0.format", "pagedkv-trace-2")),
    ("manager", "a newer version", _set("0.version", 3)),
    ("manager", "an unknown header field", _set("0.comment", "by hand")),
    ("manager", "an unknown level", _set("0.level", "device")),
    ("manager", "a configuration field missing", _drop("0.config.num_gpu_blocks")),
    ("manager", "an unknown configuration field", _set("0.config.num_tpu_blocks", 4)),
    ("manager", "blocks beyond the bound", _set("0.config.num_gpu_blocks", 2**24 + 1)),
    ("manager", "an unknown policy option", _set("0.policy.colour", "red")),
    ("manager", "a policy value no engine has", _set("0.policy.null_block", "never")),
    ("manager", "an unknown tier", _set("0.tier", "strict")),
    ("manager", "creation refused with a non-error", _set("0.create", {"error": "KeyError"})),
    (
        "manager",
        "an unknown kind of divergence",
        _set("0.divergence", {"operation": "free", "kind": ["odd"]}),
    ),
    (
        "manager",
        "a divergence at another level's call",
        _set("0.divergence", {"operation": "hit_rate", "kind": ["result"]}),
    ),
    ("manager", "a divergence of no kind", _set("0.divergence", {"operation": "free", "kind": []})),
    ("manager", "an unknown operation", _set("1.op", "allocate_everything")),
    ("manager", "another level's operation", _set("2.op", "common_computed_prefix")),
    ("manager", "an argument too many", _set("3.args", [1, 2])),
    ("manager", "an argument too few", _set("1.args", [1, [2]])),
    ("manager", "an argument of the wrong type", _set("1.args.0", "1")),
    ("manager", "a raw argument with more", _set("1.args.0", {"raw": 1, "why": "test"})),
    ("manager", "no expectation", _drop("2.expect")),
    (
        "manager",
        "a result and an error",
        _set("2.expect", {"result": [], "error": "OutOfBlocksError"}),
    ),
    ("manager", "an error of no class", _set("2.expect", {"error": "Oops"})),
    ("manager", "a result of another kind", _set("3.expect.result", [[0, 3, 5]])),
    ("manager", "an unknown operation field", _set("2.why", "by hand")),
    ("manager", "an unknown trailer field", _set("-1.at", 5)),
    ("manager", "a count that is text", _set("-1.steps", "5")),
    ("manager", "no trailer", _drop("-1")),
    ("manager", "two trailers", _two_trailers),
    ("manager", "a trailer in version 1", _version_1),
    ("manager", "operations after a refused creation", _ops_after_refused_creation),
    ("manager", "a line that is not an object", _not_an_object),
    ("safety", "an unknown operation", _set("1.op", "alloc")),
    ("safety", "a sequence list that is not one", _set("1.args.1", 2)),
    ("pool", "a hash that is not hex", _set("2.args.1.hash", "not hex")),
    ("pool", "a prefix without its length", _drop("2.args.1.num_tokens")),
    ("pool", "an extra key with more", _set("2.args.1.extra_key.adapter", 1)),
    ("pool", "a float of no such kind", _append(HIT_RATE_NAN)),
    ("request", "a group of no kind of attention", _set("0.config.groups.1.kind", "mamba")),
    ("request", "a request without its tokens", _drop("1.args.0.tokens")),
    ("request", "a request with more", _set("1.args.0.priority", 1)),
    ("request", "blocks per group that are not lists", _set("1.expect.result", [1, 2])),
    ("events", "an event of no type", _set("7.expect.result.0.type", "moved")),
    ("events", "a stored event without its parent", _drop("7.expect.result.0.parent_hash")),
    ("events", "a hit without its tokens", _drop("8.expect.result.num_tokens")),
]


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_real_traces_pass_both(base: str) -> None:
    lines = BASES[base]()
    trace.loads(text_of(lines))
    assert not refused_by_schema(lines)
    assert not any(refused_by_schema(line) for line in lines)


@pytest.mark.parametrize(
    ("base", "mutation"),
    [(base, mutate) for base, _, mutate in MUTATIONS],
    ids=[f"{base}: {name}" for base, name, _ in MUTATIONS],
)
def test_a_broken_trace_is_refused_by_the_reader_and_the_schema(
    base: str, mutation: Callable[[Lines], None]
) -> None:
    original = BASES[base]()
    lines = copy.deepcopy(original)
    mutation(lines)
    assert lines != original
    refused_by_reader(lines)
    assert refused_by_schema(lines), f"the schema accepts it: {text_of(lines)}"


LINE_BY_ITSELF = {
    "an unknown header field",
    "an unknown configuration field",
    "blocks beyond the bound",
    "a policy value no engine has",
    "an argument too many",
    "an argument of the wrong type",
    "an error of no class",
    "a result of another kind",
    "a hash that is not hex",
    "a group of no kind of attention",
    "an event of no type",
}
"""Mutations a validator of single lines (the schema's root, given one line) sees as well."""


@pytest.mark.parametrize(
    ("base", "name", "mutation"),
    [each for each in MUTATIONS if each[1] in LINE_BY_ITSELF],
    ids=[name for _, name, _ in MUTATIONS if name in LINE_BY_ITSELF],
)
def test_a_broken_line_is_refused_by_itself(
    base: str, name: str, mutation: Callable[[Lines], None]
) -> None:
    lines = BASES[base]()
    mutation(lines)
    assert any(refused_by_schema(line) for line in lines), name


# --- what only the reader checks ------------------------------------------------------------------


def _miscounted(lines: Lines) -> None:
    lines[-1]["steps"] += 1


def _trailer_early(lines: Lines) -> None:
    """The trailer after the first operation, counting it: the rest follows it."""
    trailer = lines.pop()
    trailer["steps"] = 1
    lines.insert(2, trailer)


def _integer_spelt_as_float(lines: Lines) -> None:
    lines[1]["args"][0] = 1.0


@pytest.mark.parametrize(
    ("mutation", "says"),
    [
        (_miscounted, "the trailer says 6 steps but the trace has 5"),
        (_trailer_early, "nothing may follow the trailer"),
        (_integer_spelt_as_float, "expected an integer, got 1.0"),
    ],
    ids=["a miscounted trailer", "a trailer not last", "an integer written 1.0"],
)
def test_what_no_schema_states_is_the_readers(mutation: Callable[[Lines], None], says: str) -> None:
    """A schema sees values, not their order or their spelling: a trailer's count and place,
    and ``1.0`` where an integer belongs (an integer to JSON Schema), are checked by the reader
    alone (``specs/oracle.md`` §4 lists them for writers of other readers)."""
    lines = BASES["manager"]()
    mutation(lines)
    assert says in refused_by_reader(lines)
    assert not refused_by_schema(lines)
