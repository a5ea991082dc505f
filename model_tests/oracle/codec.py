"""JSON for every argument and result of both protocols (manager and pool), for traces and stdio.

The operations, their parameters and the kinds of their arguments and results are the table of
``specs/operations.py``; ``encode_args`` / ``decode_args`` and ``encode_result`` /
``decode_result`` go through it, so an unknown operation, a wrong number of arguments or a
malformed value is a ``CodecError`` naming the operation and the parameter.

Kinds and their JSON:

- ``int``, ``count``, ``seq``, ``group``, ``block``: a JSON integer. ``bool``: ``true`` /
  ``false``. ``float``: a JSON number, or ``{"float": "nan" | "inf" | "-inf"}`` (strict JSON has
  no such numbers).
- ``tokens`` / ``seqs`` / ``blocks``: a list of integers; ``tokens?``: also ``null``. ``chains``:
  a list of lists of integers. ``pairs``: a list of ``[source, destination]``.
- ``device``: ``"gpu"`` / ``"cpu"``; ``device?``: also ``null``. ``status``: ``"ok"`` / ``"later"``
  / ``"never"``. ``none``: ``null``.
- ``extra_key``: ``{"lora_id": int | null, "cache_salt": str | null}``.
- ``prefix``: ``{"hash": "<hex>", "num_tokens": n, "extra_key": {...}}``.

Callers may pass deliberately ill-typed arguments (the machines check that they are refused, e.g.
the string ``"gpu"`` where a ``Device`` belongs). Such a value is written ``{"raw": <json>}`` and
read back as that plain JSON value, so it reaches the target exactly as the caller passed it.
Errors are ``{"error": "<class name in pagedkv.specs.errors>", "message": "..."}``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any

from pagedkv.model_tests.lockstep.show import show_call as show_call  # one way to write a call
from pagedkv.model_tests.lockstep.show import show_value as show_value
from pagedkv.specs import errors as error_module
from pagedkv.specs import operations
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.operations import Operation
from pagedkv.specs.types import AllocStatus, Device, ExtraKey, ManagerConfig, PoolConfig

JSON = Any
Level = operations.Level
LEVELS = operations.LEVELS
OPS = operations.OPERATIONS
ERRORS = operations.ERRORS


class CodecError(ValueError):
    """A value that does not fit its operation's table, or an unknown operation."""


MAX_DEPTH = 16
"""How deeply a line of JSON may nest (the protocol's deepest value, chains in ``args``, is 4)."""


def parse_json(text: str) -> JSON:
    """One line of strict JSON (no NaN, no Infinity), nested at most ``MAX_DEPTH`` deep."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        why = error.msg.removesuffix(" at")
        raise CodecError(f"not JSON ({why}, column {error.colno})") from None
    except RecursionError:
        raise CodecError(f"not a protocol value: nested deeper than {MAX_DEPTH} levels") from None
    except CodecError:
        raise  # the constant hook's own (NaN, Infinity)
    except ValueError:  # Python reads at most sys.get_int_max_str_digits() digits of a number
        raise CodecError(
            f"not a protocol value: a number longer than {sys.get_int_max_str_digits()} digits"
        ) from None
    if _depth(value) > MAX_DEPTH:
        raise CodecError(f"not a protocol value: nested deeper than {MAX_DEPTH} levels")
    return value


def dumps(value: JSON) -> str:
    """One line of strict JSON, as traces are written."""
    return json.dumps(value, allow_nan=False, separators=(", ", ": "))


def _no_constant(name: str) -> Any:
    raise CodecError(f'{name} is not JSON (write {{"float": "nan"}} and the like)')


def _depth(value: JSON) -> int:
    """How deeply ``value`` nests (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[JSON, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth + 1)
            if depth + 1 <= MAX_DEPTH:
                stack.extend((child, depth + 1) for child in item)
    return deepest


def level_of(text: object) -> Level:
    try:
        return operations.level_of(text)
    except ValueError as error:
        raise CodecError(str(error)) from None


def op_spec(level: Level, op: object) -> Operation:
    table = OPS[level]
    if not isinstance(op, str) or op not in table:
        raise CodecError(f"unknown {level} operation {op!r} (known: {', '.join(sorted(table))})")
    return table[op]


# --- kinds ----------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int_list(value: object) -> bool:
    return isinstance(value, list | tuple) and all(_is_int(v) for v in value)


def _is_key(value: object) -> bool:
    return (
        isinstance(value, ExtraKey)
        and (value.lora_id is None or _is_int(value.lora_id))
        and (value.cache_salt is None or isinstance(value.cache_salt, str))
    )


_JSON_KIND = {"count": "int", "seq": "int", "group": "int", "block": "int"}
_JSON_KIND |= {"seqs": "ids", "blocks": "ids"}
"""Kinds of the operation table that share a JSON form: ids and counts are integers."""


def _base(kind: str) -> str:
    """The JSON form of ``kind``, without its ``?``."""
    bare = kind.rstrip("?")
    return _JSON_KIND.get(bare, bare)


def _fits(kind: str, value: object) -> bool:
    """Whether ``value`` has the typed JSON form of ``kind`` (else it is written raw)."""
    if kind.endswith("?") and value is None:
        return True
    kind = _base(kind)
    checks: dict[str, Callable[[object], bool]] = {
        "int": _is_int,
        "bool": lambda v: isinstance(v, bool),
        "float": _is_number,
        "tokens": _is_int_list,
        "ids": _is_int_list,
        "chains": lambda v: isinstance(v, list | tuple) and all(_is_int_list(c) for c in v),
        "pairs": lambda v: (
            isinstance(v, list | tuple)
            and all(isinstance(p, list | tuple) and len(p) == 2 and _is_int_list(p) for p in v)
        ),
        "device": lambda v: isinstance(v, Device),
        "status": lambda v: isinstance(v, AllocStatus),
        "none": lambda v: v is None,
        "extra_key": _is_key,
        "prefix": lambda v: (
            isinstance(v, Prefix)
            and isinstance(v.hash, bytes)
            and _is_int(v.num_tokens)
            and _is_key(v.extra_key)
        ),
    }
    if kind not in checks:
        raise CodecError(f"unknown kind {kind!r}")
    return checks[kind](value)


def _float_json(value: float | int) -> JSON:
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def _key_json(key: ExtraKey) -> JSON:
    return {"lora_id": key.lora_id, "cache_salt": key.cache_salt}


def _plain(value: object, where: str) -> JSON:
    """A plain JSON value (for ``raw``), or a CodecError."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CodecError(f"{where}: cannot write the non-finite {value!r} as plain JSON")
        return value
    if isinstance(value, list | tuple):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, where) for k, v in value.items()}
    raise CodecError(f"{where}: {value!r} has no JSON form")


def encode_value(kind: str, value: object, where: str = "value") -> JSON:
    if not _fits(kind, value):
        return {"raw": _plain(value, where)}
    if value is None:
        return None
    base = _base(kind)
    if base in {"int", "bool"}:
        return value
    if base == "float":
        assert isinstance(value, int | float)
        return _float_json(value)
    if base in {"tokens", "ids"}:
        assert isinstance(value, list | tuple)
        return list(value)
    if base in {"chains", "pairs"}:
        assert isinstance(value, list | tuple)
        return [list(v) for v in value]
    if base in {"device", "status"}:
        assert isinstance(value, Device | AllocStatus)
        return value.value
    if base == "extra_key":
        assert isinstance(value, ExtraKey)
        return _key_json(value)
    assert isinstance(value, Prefix)
    return {
        "hash": value.hash.hex(),
        "num_tokens": value.num_tokens,
        "extra_key": _key_json(value.extra_key),
    }


def _fail(where: str, expected: str, got: JSON) -> CodecError:
    return CodecError(f"{where}: expected {expected}, got {_short(got)}")


def _short(value: JSON) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(value: JSON, where: str) -> int:
    if not _is_int(value):
        raise _fail(where, "an integer", value)
    assert isinstance(value, int)
    return value


def _int_list(value: JSON, where: str, what: str) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise _fail(where, f"a list of {what}", value)
    return list(value)


def _decode_key(value: JSON, where: str) -> ExtraKey:
    if not isinstance(value, dict) or set(value) - {"lora_id", "cache_salt"}:
        raise _fail(where, 'an extra key {"lora_id": ..., "cache_salt": ...}', value)
    lora, salt = value.get("lora_id"), value.get("cache_salt")
    if lora is not None and not _is_int(lora):
        raise _fail(f"{where}.lora_id", "an integer or null", lora)
    if salt is not None and not isinstance(salt, str):
        raise _fail(f"{where}.cache_salt", "a string or null", salt)
    return ExtraKey(lora_id=lora, cache_salt=salt)


def decode_value(kind: str, value: JSON, where: str = "value", *, allow_raw: bool = True) -> Any:
    if isinstance(value, dict) and set(value) == {"raw"}:
        if not allow_raw:
            raise _fail(where, f"a {kind} (raw values are for arguments only)", value)
        return value["raw"]
    if kind.endswith("?") and value is None:
        return None
    base = _base(kind)
    if base == "int":
        return _int(value, where)
    if base == "bool":
        if not isinstance(value, bool):
            raise _fail(where, "true or false", value)
        return value
    if base == "float":
        if isinstance(value, dict) and set(value) == {"float"}:
            special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if value["float"] not in special:
                raise _fail(where, 'a number or {"float": "nan"|"inf"|"-inf"}', value)
            return special[value["float"]]
        if not _is_number(value):
            raise _fail(where, "a number", value)
        return value
    if base == "tokens":
        return _int_list(value, where, "token ids")
    if base == "ids":
        return _int_list(value, where, "integers")
    if base == "chains":
        if not isinstance(value, list):
            raise _fail(where, "a list of chains (lists of block ids)", value)
        return [_int_list(c, f"{where}[{i}]", "block ids") for i, c in enumerate(value)]
    if base == "pairs":
        if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(_is_int(x) for x in p) for p in value
        ):
            raise _fail(where, "a list of [source, destination] pairs", value)
        return [(p[0], p[1]) for p in value]
    if base == "device":
        if value not in ("gpu", "cpu"):
            raise _fail(where, '"gpu" or "cpu"', value)
        return Device(value)
    if base == "status":
        if value not in ("ok", "later", "never"):
            raise _fail(where, '"ok", "later" or "never"', value)
        return AllocStatus(value)
    if base == "none":
        if value is not None:
            raise _fail(where, "null", value)
        return None
    if base == "extra_key":
        return _decode_key(value, where)
    if base == "prefix":
        if not isinstance(value, dict) or set(value) != {"hash", "num_tokens", "extra_key"}:
            raise _fail(where, 'a prefix {"hash", "num_tokens", "extra_key"}', value)
        try:
            digest = bytes.fromhex(value["hash"])
        except (TypeError, ValueError):
            raise _fail(f"{where}.hash", "a hex string", value["hash"]) from None
        return Prefix(
            digest,
            _int(value["num_tokens"], f"{where}.num_tokens"),
            _decode_key(value["extra_key"], f"{where}.extra_key"),
        )
    raise CodecError(f"unknown kind {kind!r}")


# --- operations -----------------------------------------------------------------------------------


def _check_arity(level: Level, op: str, spec: Operation, count: int) -> None:
    if not spec.min_args <= count <= len(spec.params):
        wanted = (
            str(len(spec.params))
            if spec.min_args == len(spec.params)
            else f"{spec.min_args} to {len(spec.params)}"
        )
        names = ", ".join(p.name for p in spec.params) or "none"
        raise CodecError(f"{level} operation {op} takes {wanted} arguments ({names}), got {count}")


def encode_args(level: Level, op: str, args: Sequence[object]) -> list[JSON]:
    spec = op_spec(level, op)
    _check_arity(level, op, spec, len(args))
    return [
        encode_value(p.kind, a, f"{op} argument {p.name}")
        for p, a in zip(spec.params, args, strict=False)
    ]


def decode_args(level: Level, op: str, args: JSON) -> tuple[Any, ...]:
    spec = op_spec(level, op)
    if not isinstance(args, list):
        raise _fail(f"{op} arguments", "a list", args)
    _check_arity(level, op, spec, len(args))
    return tuple(
        decode_value(p.kind, a, f"{op} argument {p.name}")
        for p, a in zip(spec.params, args, strict=False)
    )


def encode_result(level: Level, op: str, result: object) -> JSON:
    spec = op_spec(level, op)
    if not _fits(spec.result, result):
        raise CodecError(f"{op} result: {_short(result)} is not a {spec.result}")
    return encode_value(spec.result, result, f"{op} result")


def decode_result(level: Level, op: str, value: JSON) -> Any:
    return decode_value(op_spec(level, op).result, value, f"{op} result", allow_raw=False)


# --- errors ---------------------------------------------------------------------------------------


def error_class(name: object) -> type[PagedKVError]:
    found = getattr(error_module, name, None) if isinstance(name, str) else None
    if not (isinstance(found, type) and issubclass(found, PagedKVError)):
        raise CodecError(f"{_short(name)} is not an error class of pagedkv.specs.errors")
    return found


def encode_error(error: BaseException) -> JSON:
    return {"error": type(error).__name__, "message": str(error)}


def decode_error(value: JSON) -> PagedKVError:
    if not isinstance(value, dict) or "error" not in value:
        raise _fail("error", '{"error": "<class>", "message": "..."}', value)
    message = value.get("message", "")
    return error_class(value["error"])(message if isinstance(message, str) else repr(message))


# --- configurations -------------------------------------------------------------------------------

ConfigType = ManagerConfig | PoolConfig
CONFIG_TYPES: dict[Level, type[ManagerConfig] | type[PoolConfig]] = {
    "manager": ManagerConfig,
    "pool": PoolConfig,
}


def encode_config(config: ConfigType) -> JSON:
    """The configuration's fields as given (bad configurations included: they are checked)."""
    return {f.name: _plain(getattr(config, f.name), "config") for f in fields(config)}


def decode_config(level: Level, value: JSON) -> Any:
    cls = CONFIG_TYPES[level]
    if not isinstance(value, Mapping):
        raise _fail(f"{level} config", "an object", value)
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise CodecError(f"{level} config: unknown field(s) {', '.join(unknown)}")
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [n for n in required if n not in value]
    if missing:
        raise CodecError(f"{level} config: missing field(s) {', '.join(missing)}")
    return cls(**value)


def config_level(config: object) -> Level:
    if isinstance(config, ManagerConfig):
        return "manager"
    if isinstance(config, PoolConfig):
        return "pool"
    raise CodecError(f"{config!r} is neither a ManagerConfig nor a PoolConfig")
