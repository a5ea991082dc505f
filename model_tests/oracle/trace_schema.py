"""The trace format as a JSON Schema (``specs/trace.schema.json``), so that a program in any
language can check the traces it writes or reads with any JSON Schema validator
(``specs/oracle.md`` §4).

The schema is built here from the tables the reader itself goes by (the operations and their
kinds, the error classes, the configurations' fields and bounds, the policy options, the kinds of
divergence), so it cannot drift from them; the committed file is this module's output, and a test
holds the two equal. ``python -m pagedkv.model_tests.oracle.trace_schema`` writes it again.

One schema takes two shapes of input: one line of a trace (an object: the header, an operation
or the trailer), or the whole trace read as a JSON array of its lines, which also holds every
operation to the header's level and tier.
"""

from __future__ import annotations

import json
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pagedkv.specs as specs_package
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.known import ALL_KINDS
from pagedkv.specs import errors as error_module
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.operations import Operation
from pagedkv.specs.policy import OPERATION_NAMES, OPTIONS
from pagedkv.specs.request_types import AttentionKind
from pagedkv.specs.validation import CONFIG_BOUNDS
from pagedkv.specs.wire import REQUEST_FIELDS, json_form

SCHEMA_FILE = Path(specs_package.__file__).with_name("trace.schema.json")
"""Beside the spec pages: ``specs/trace.schema.json`` (shipped in the wheel)."""

Schema = dict[str, Any]

ERROR_NAMES: tuple[str, ...] = tuple(
    name
    for name, value in vars(error_module).items()
    if isinstance(value, type) and issubclass(value, PagedKVError)
)
"""What ``{"error": ...}`` may name: the classes of ``pagedkv.specs.errors``."""

HEX = {"$ref": "#/$defs/hex"}
INTEGER = {"type": "integer"}
INTEGERS = {"type": "array", "items": INTEGER}
TABLE_KEY = {"type": ["integer", "string"]}
"""A defragmenter's table key: a request's integer id or a string."""


def _ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def _object(required: list[str], properties: Schema) -> Schema:
    """An object with exactly these fields (``required`` among them): unknown fields are refused
    on every line, as the reader refuses them."""
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }


def _or_null(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


# --- values: the kinds of specs/operations.py, as specs/wire.py writes them ----------------------


def _kinds() -> dict[str, Schema]:
    """One schema per JSON form of a kind (``specs/oracle.md`` §3)."""
    extra_key = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "lora_id": {"type": ["integer", "null"]},
            "cache_salt": {"type": ["string", "null"]},
        },
    }
    event = {
        "oneOf": [
            _object(
                [
                    "type",
                    "block_hashes",
                    "parent_hash",
                    "token_ids",
                    "block_size",
                    "lora_id",
                    "group",
                ],
                {
                    "type": {"const": "stored"},
                    "block_hashes": {"type": "array", "items": HEX},
                    "parent_hash": _or_null(HEX),
                    "token_ids": INTEGERS,
                    "block_size": INTEGER,
                    "lora_id": {"type": ["integer", "null"]},
                    "group": INTEGER,
                },
            ),
            _object(
                ["type", "block_hashes", "group"],
                {
                    "type": {"const": "removed"},
                    "block_hashes": {"type": "array", "items": HEX},
                    "group": INTEGER,
                },
            ),
            _object(["type"], {"type": {"const": "cleared"}}),
        ]
    }
    request_fields = list(REQUEST_FIELDS)
    return {
        "int": INTEGER,
        "bool": {"type": "boolean"},
        "float": {
            "anyOf": [
                {"type": "number"},
                _object(["float"], {"float": {"enum": ["nan", "inf", "-inf"]}}),
            ]
        },
        "ids": INTEGERS,
        "tokens": INTEGERS,
        "chains": {"type": "array", "items": INTEGERS},
        "pairs": {
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [INTEGER, INTEGER],
                "items": False,
                "minItems": 2,
            },
        },
        "device": {"enum": ["gpu", "cpu"]},
        "status": {"enum": ["ok", "later", "never"]},
        "none": {"type": "null"},
        "str": {"type": "string"},
        "extra_key": extra_key,
        "prefix": _object(
            ["hash", "num_tokens", "extra_key"],
            {"hash": HEX, "num_tokens": INTEGER, "extra_key": _ref("kind.extra_key")},
        ),
        "request": {
            "description": "a request's fields as given: a request the spec refuses travels too,"
            " for the target to refuse",
            **_object(request_fields, {name: True for name in [*request_fields, "multimodal"]}),
        },
        "hit": _object(
            ["blocks", "num_tokens"], {"blocks": _ref("kind.chains"), "num_tokens": INTEGER}
        ),
        "events": {"type": "array", "items": event},
        "keys": {"type": "array", "items": TABLE_KEY},
        "tables": {
            "description": "a mapping of block tables as [key, [block ids]] pairs, in its order",
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [TABLE_KEY, INTEGERS],
                "items": False,
                "minItems": 2,
            },
        },
    }


def _kind(kind: str) -> list[Schema]:
    """The alternatives a value of ``kind`` may take (a ``?`` admits null)."""
    schema = _ref(f"kind.{json_form(kind)}")
    return [schema, {"type": "null"}] if kind.endswith("?") else [schema]


def _argument(kind: str) -> Schema:
    """An argument: its kind's value, or any JSON value written ``{"raw": ...}``."""
    return {"anyOf": [*_kind(kind), _ref("raw")]}


def _expect(kind: str) -> Schema:
    """What ``expect`` holds for an operation whose result is of ``kind``."""
    alternatives = _kind(kind)
    result = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    return {"oneOf": [_object(["result"], {"result": result}), _ref("error_outcome")]}


# --- lines ----------------------------------------------------------------------------------------


def _operation_rule(operation: Operation) -> Schema:
    """What ``op: <name>`` asks of ``args`` and ``expect``."""
    args: Schema = {"maxItems": 0}  # no parameters (an empty prefixItems is not a schema)
    if operation.params:
        args = {
            "prefixItems": [_argument(p.kind) for p in operation.params],
            "items": False,
            "minItems": operation.min_args,
        }
    expect = _ref(f"expect.{operation.result.replace('?', '_or_null')}")
    return {
        "if": {"properties": {"op": {"const": operation.name}}},
        "then": {"properties": {"args": args, "expect": expect}},
    }


def _operation(level: codec.Level) -> Schema:
    """An operation line of ``level``; ``expect`` is required but in a safety trace."""
    table = codec.OPS[level]
    return {
        **_object(
            ["op", "args"],
            {
                "op": {"enum": list(table)},
                "args": {"type": "array"},
                "expect": {"type": "object"},
            },
        ),
        "allOf": [_operation_rule(operation) for operation in table.values()],
    }


def _config(level: codec.Level) -> Schema:
    """A configuration: the dataclass's fields (those without a default required), each as
    given (a configuration the spec refuses is recorded too, for the target to refuse), but never
    an integer beyond the bounds every implementation enforces."""
    names = [f.name for f in fields(codec.CONFIG_TYPES[level])]
    properties: Schema = {name: True for name in names}
    for name in names:
        if name in CONFIG_BOUNDS:
            properties[name] = {"if": INTEGER, "then": {"maximum": CONFIG_BOUNDS[name]}}
    if level == "request":
        group = _object(
            ["kind", "sliding_window"],
            {"kind": True, "sliding_window": True},
        )
        properties["groups"] = {
            "description": "groups shaped {kind, sliding_window} name a kind of attention",
            "if": {"type": "array"},
            "then": {
                "items": {
                    "if": group,
                    "then": {"properties": {"kind": {"enum": [k.value for k in AttentionKind]}}},
                }
            },
        }
    required = [f.name for f in fields(codec.CONFIG_TYPES[level]) if f.default is MISSING]
    return _object(required, properties)


def _policy() -> Schema:
    """The options whose values differ from pagedkv's own (``specs/policy.md``)."""
    properties: Schema = {}
    for name, option in OPTIONS.items():
        if name == "unsupported":
            names = sorted(OPERATION_NAMES)
            properties[name] = {"type": "array", "items": {"enum": names}, "uniqueItems": True}
        elif option.values == ("true", "false"):
            properties[name] = {"type": "boolean"}
        else:
            properties[name] = {"enum": list(option.values)}
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _header() -> Schema:
    levels = list(codec.LEVELS)
    header = _object(
        ["format", "version", "level", "config"],
        {
            "format": {"const": trace.FORMAT},
            "version": {"enum": list(range(1, trace.VERSION + 1))},
            "level": {"enum": levels},
            "config": {"type": "object"},
            "create": _object(["error"], {"error": _ref("error_name")}),
            "policy": _ref("policy"),
            "tier": {"enum": ["policy", "safety"]},
            "divergence": _object(
                ["operation", "kind"],
                {
                    "operation": {"type": "string"},
                    "kind": {"type": "array", "minItems": 1, "items": {"enum": list(ALL_KINDS)}},
                },
            ),
        },
    )
    assert set(header["properties"]) == trace.HEADER_FIELDS
    header["allOf"] = [
        {
            "if": {"properties": {"level": {"const": level}}},
            "then": {
                "properties": {
                    "config": _ref(f"{level}_config"),
                    "divergence": {
                        "properties": {"operation": {"enum": [*codec.OPS[level], "create"]}}
                    },
                }
            },
        }
        for level in levels
    ]
    return header


def _trailer() -> Schema:
    return _object(
        ["end", "steps"],
        {"end": {"const": trace.FORMAT}, "steps": {"type": "integer", "minimum": 0}},
    )


def _after_header(lines: Schema) -> Schema:
    """``lines`` asked of every line but the first (``items`` alone would hold the header too)."""
    return {"prefixItems": [True], "items": lines}


def _unless_trailer(operation: Schema) -> Schema:
    """``operation`` asked of a line that is not the trailer (told apart as the reader tells it,
    by its ``end``), the trailer's own schema of one that is."""
    return {"if": {"required": ["end"]}, "then": _ref("trailer"), "else": operation}


def _whole_trace() -> Schema:
    """The trace read as an array of its lines: the header first; then operations of the
    header's level (each with ``expect`` unless the tier is safety; none where creation is
    refused); at most one trailer, in version 2 exactly one, and none in version 1."""
    rules: list[Schema] = []
    for level in codec.LEVELS:
        is_level = {"properties": {"level": {"const": level}}}
        rules.append(
            {
                "if": {"prefixItems": [is_level]},
                "then": _after_header(_unless_trailer(_ref(f"{level}_operation"))),
            }
        )
    safety = {"properties": {"tier": {"const": "safety"}}, "required": ["tier"]}
    rules.append(
        {
            "if": {"prefixItems": [{"not": safety}]},
            "then": _after_header(_unless_trailer({"required": ["expect"]})),
        }
    )
    rules.append(
        {
            "if": {"prefixItems": [{"required": ["create"]}]},
            "then": _after_header(_ref("trailer")),
        }
    )
    version_1 = {"properties": {"version": {"const": 1}}}
    rules.append(
        {
            "if": {"prefixItems": [version_1]},
            "then": _after_header({"not": _ref("trailer")}),
            "else": {"contains": _ref("trailer"), "minContains": 1, "maxContains": 1},
        }
    )
    return {
        "description": "a whole trace, its lines read into one JSON array (a trailer must be"
        " the last line, and its steps the number of operations: rules beyond a schema)",
        "type": "array",
        "minItems": 1,
        "prefixItems": [_ref("header")],
        "allOf": rules,
    }


def schema() -> Schema:
    """The trace format as a JSON Schema (draft 2020-12)."""
    defs: Schema = {
        "line": {
            "description": "one line: an operation, the trailer or the header",
            "if": {"required": ["op"]},
            "then": _ref("operation"),
            "else": {"if": {"required": ["end"]}, "then": _ref("trailer"), "else": _ref("header")},
        },
        "header": _header(),
        "trailer": _trailer(),
        "operation": {
            "description": "an operation line of any level (#/$defs/trace holds it to the"
            " header's)",
            "anyOf": [_ref(f"{level}_operation") for level in codec.LEVELS],
        },
    }
    defs |= {f"{level}_operation": _operation(level) for level in codec.LEVELS}
    defs |= {f"{level}_config": _config(level) for level in codec.LEVELS}
    defs["policy"] = _policy()
    results = sorted({op.result for table in codec.OPS.values() for op in table.values()})
    defs |= {f"expect.{kind.replace('?', '_or_null')}": _expect(kind) for kind in results}
    defs["hex"] = {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"}
    defs["error_name"] = {"enum": list(ERROR_NAMES)}
    defs["error_outcome"] = _object(["error"], {"error": _ref("error_name")})
    defs["raw"] = {
        "description": "an argument of the wrong type, on purpose: the JSON value as passed",
        **_object(["raw"], {"raw": True}),
    }
    defs |= {f"kind.{name}": value for name, value in _kinds().items()}
    defs["trace"] = _whole_trace()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pagedkv trace",
        "description": "A pagedkv trace (JSON lines, specs/oracle.md section 4): one line of it"
        " (an object: the header, an operation or the trailer), or the whole trace read as an"
        " array of its lines. Written by model_tests/oracle/trace_schema.py.",
        "if": {"type": "array"},
        "then": _ref("trace"),
        "else": _ref("line"),
        "$defs": defs,
    }


# --- the file -------------------------------------------------------------------------------------

WIDTH = 100


def formatted(value: Any, indent: int = 0, lead: int = 0) -> str:
    """JSON indented by two, a value kept on one line where it fits in ``WIDTH`` columns
    (``lead``: the columns its key takes before it), lists of names filled as prose is."""
    flat = json.dumps(value)
    if indent + lead + len(flat) <= WIDTH or not isinstance(value, dict | list) or not value:
        return flat
    inner = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            head = f"{json.dumps(key)}: "
            items.append(f"{inner}{head}{formatted(item, indent + 2, len(head))}")
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if all(not isinstance(item, dict | list) for item in value):
        rows = [inner]
        for item in value:
            word = json.dumps(item) + ","
            if len(rows[-1]) + len(word) >= WIDTH and rows[-1] != inner:
                rows[-1] = rows[-1].rstrip()
                rows.append(inner)
            rows[-1] += word + " "
        return "[\n" + "\n".join(rows).rstrip(", ") + "\n" + " " * indent + "]"
    items = [f"{inner}{formatted(item, indent + 2)}" for item in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def text() -> str:
    """The file's text, as committed."""
    return formatted(schema()) + "\n"


def main() -> int:
    SCHEMA_FILE.write_text(text(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
