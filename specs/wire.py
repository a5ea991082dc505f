"""The protocol's values on the wire: every argument and result of both levels as JSON, for traces
and for ``exec:`` targets (``specs/oracle.md`` §3), and the exact reading of an answer a Python
target returned, through the same kinds (§1, "Values, not objects").

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
- The request level (``specs/request_types.py``): ``request_id``: a string. ``request``:
  ``{"id": "r1", "tokens": [...], "num_prompt_tokens": n, "num_computed_tokens": n, "extra_key":
  {...}, "multimodal": [{"offset": n, "length": n, "identifier": "..."}]}`` (its fields as given:
  a request the spec refuses still travels, for the target to refuse). ``group_blocks``: a list
  (one per group) of lists of block ids; ``group_blocks?``: also ``null``. ``hit``:
  ``{"blocks": <group_blocks>, "num_tokens": n}``. ``events``: a list of ``{"type": "stored",
  "block_hashes": ["<hex>", ...], "parent_hash": "<hex>" | null, "token_ids": [...],
  "block_size": n, "lora_id": n | null, "group": g}``, ``{"type": "removed", "block_hashes":
  [...], "group": g}`` and ``{"type": "cleared"}``. A request configuration's ``groups`` are
  ``[{"kind": "full" | "sliding_window", "sliding_window": n | null}, ...]``.
- The defrag level (``specs/defragmenter.md``): a table key is an integer or a string. ``tables``
  (``update_state``'s ``changed``, a mapping in Python): a list of ``[key, [block ids]]`` in the
  mapping's order (JSON objects have string keys only, and a request's key may be an integer).
  ``keys`` (``finished``): a list of keys. A defragmenter's configuration writes ``pad_sizes``
  and ``reserved`` as lists of integers (``reserved`` sorted); they are read back as a tuple and
  a frozenset.

A live Python value has a kind's form only when it *is* that value, not when it merely compares
like one: ``type(x) is int`` (not a ``bool``, a float, ``numpy.int64``, ``unittest.mock.ANY`` or a
subclass of ``int`` with an ``__eq__`` of its own), the enum's own members, and lists or tuples
read from their own storage (a subclass's methods are not called), item by item. So
``encode_result`` refuses what a program could never send as JSON, and ``exact_result`` (a
result encoded and read back) is what a session compares: the same value, in the same builtin
types, as an ``exec:`` target's answer would be, and a copy that the target cannot change later.

Callers may pass deliberately ill-typed arguments (the machines check that they are refused, e.g.
the string ``"gpu"`` where a ``Device`` belongs). Such a value is written ``{"raw": <json>}`` and
read back as that plain JSON value, so it reaches the target exactly as the caller passed it.
Errors are ``{"error": "<class name in pagedkv.specs.errors>", "message": "..."}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from functools import cache
from typing import Any, cast

from pagedkv.specs import errors as error_module
from pagedkv.specs import operations
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.operations import Operation
from pagedkv.specs.request_types import (
    AllBlocksCleared,
    AttentionKind,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import (
    AllocStatus,
    DefragConfig,
    Device,
    ExtraKey,
    ManagerConfig,
    PoolConfig,
)

JSON = Any
Level = operations.Level
LEVELS = operations.LEVELS
OPS = operations.OPERATIONS
ERRORS = operations.ERRORS


class CodecError(ValueError):
    """A value that does not fit its operation's table, or an unknown operation."""


class NotExact(CodecError):
    """A live value that is not of its kind's exact type; ``phrase`` says what it is instead
    (``numpy.int64, not int``; ``float at [1][0], not int``)."""

    def __init__(self, phrase: str, where: str = "value") -> None:
        super().__init__(f"{where}: {phrase}")
        self.phrase = phrase


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


# --- kinds: the exact value of a live one ---------------------------------------------------------

_JSON_KIND = {"count": "int", "seq": "int", "group": "int", "block": "int"}
_JSON_KIND |= {"seqs": "ids", "blocks": "ids", "group_blocks": "chains", "request_id": "str"}
_JSON_KIND |= {"token_blocks": "chains"}
"""Kinds of the operation table that share a JSON form: ids and counts are integers, a request's
blocks per group are lists of ids as chains are, and so are a chain's blocks of tokens."""

JSON_FORMS = frozenset(
    {"int", "bool", "float", "tokens", "ids", "chains", "pairs", "device", "status", "none"}
    | {"extra_key", "prefix", "str", "request", "hit", "events", "tables", "keys"}
)
"""The JSON form of every kind (``specs/trace.schema.json`` has one definition for each)."""

_EXACT_TYPES: dict[str, type] = {
    "int": int,
    "bool": bool,
    "str": str,
    "device": Device,
    "status": AllocStatus,
}


def json_form(kind: str) -> str:
    """The JSON form of ``kind``, without its ``?``."""
    bare = kind.rstrip("?")
    return _JSON_KIND.get(bare, bare)


def type_name(value: object) -> str:
    """``int``, ``numpy.int64``, ``unittest.mock._ANY``: a value's own class, as a reader finds
    it (``type``, which no object can disguise, unlike ``__class__``)."""
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _not(value: object, at: str, wanted: str) -> NotExact:
    return NotExact(f"{type_name(value)}{f' at {at}' if at else ''}, not {wanted}")


def _items(value: object, at: str) -> list[Any]:
    """What a list or tuple holds, read from its own storage: a subclass's ``__iter__`` or
    ``__getitem__`` is not called."""
    if issubclass(type(value), list):
        return list.copy(cast(list[Any], value))
    if issubclass(type(value), tuple):
        return list(tuple.__getitem__(cast(tuple[Any, ...], value), slice(None)))
    raise _not(value, at, "a list")


def _exact_key(value: object, at: str) -> ExtraKey:
    if type(value) is not ExtraKey:
        raise _not(value, at, "ExtraKey")
    lora, salt = value.lora_id, value.cache_salt
    if lora is not None and type(lora) is not int:
        raise _not(lora, f"{at}.lora_id", "int or None")
    if salt is not None and type(salt) is not str:
        raise _not(salt, f"{at}.cache_salt", "str or None")
    return value


def exact_value(kind: str, value: object, at: str = "") -> Any:
    """``value`` as the exact value of ``kind`` (a plain copy of a list, pairs as tuples), or
    ``NotExact`` naming what it is (``at``: where inside the value it is, ``[2]``)."""
    if kind.endswith("?") and value is None:
        return None
    base = json_form(kind)
    if base in _EXACT_TYPES:
        if type(value) is not _EXACT_TYPES[base]:
            raise _not(value, at, _EXACT_TYPES[base].__name__)
        return value
    if base == "float":
        if type(value) is not float and type(value) is not int:
            raise _not(value, at, "float")
        return value
    if base == "none":
        if value is not None:
            raise _not(value, at, "None")
        return None
    if base in ("tokens", "ids"):
        return [exact_value("int", v, f"{at}[{i}]") for i, v in enumerate(_items(value, at))]
    if base == "chains":
        return [exact_value("ids", c, f"{at}[{i}]") for i, c in enumerate(_items(value, at))]
    if base == "pairs":
        pairs = []
        for i, pair in enumerate(_items(value, at)):
            both = _items(pair, f"{at}[{i}]")
            if len(both) != 2:
                raise NotExact(f"{len(both)} items at {at}[{i}], not a (source, destination) pair")
            pairs.append(
                (
                    exact_value("int", both[0], f"{at}[{i}][0]"),
                    exact_value("int", both[1], f"{at}[{i}][1]"),
                )
            )
        return pairs
    if base == "extra_key":
        return _exact_key(value, at)
    if base == "prefix":
        if type(value) is not Prefix:
            raise _not(value, at, "Prefix")
        if type(value.hash) is not bytes:
            raise _not(value.hash, f"{at}.hash", "bytes")
        exact_value("int", value.num_tokens, f"{at}.num_tokens")
        _exact_key(value.extra_key, f"{at}.extra_key")
        return value
    if base == "request":
        if type(value) is not Request:
            raise _not(value, at, "Request")
        return value
    if base == "hit":
        both = _items(value, at)
        if len(both) != 2:
            raise NotExact(
                f"{len(both)} items{f' at {at}' if at else ''}, not (blocks, num_tokens)"
            )
        return (exact_value("chains", both[0], f"{at}[0]"), exact_value("int", both[1], f"{at}[1]"))
    if base == "events":
        return [_exact_event(e, f"{at}[{i}]") for i, e in enumerate(_items(value, at))]
    if base == "keys":
        return [_exact_table_key(k, f"{at}[{i}]") for i, k in enumerate(_items(value, at))]
    if base == "tables":
        if type(value) is not dict:
            raise _not(value, at, "a dict of block tables")
        return {
            _exact_table_key(key, f"{at} key"): exact_value("ids", table, f"{at}[{key!r}]")
            for key, table in dict.items(value)
        }
    raise CodecError(f"unknown kind {kind!r}")


def _exact_table_key(value: object, at: str) -> int | str:
    """A table key as the wire carries it: an ``int`` or a ``str``."""
    if type(value) is not int and type(value) is not str:
        raise _not(value, at, "a table key (int or str)")
    return value


def _exact_hashes(value: object, at: str) -> tuple[bytes, ...]:
    hashes = _items(value, at)
    for i, digest in enumerate(hashes):
        if type(digest) is not bytes:
            raise _not(digest, f"{at}[{i}]", "bytes")
    return tuple(hashes)


def _exact_event(value: object, at: str) -> KVEvent:
    """A KV event as its exact value: one of the three classes, its fields of their types."""
    if type(value) is AllBlocksCleared:
        return AllBlocksCleared()
    if type(value) is BlockRemoved:
        return BlockRemoved(
            _exact_hashes(value.block_hashes, f"{at}.block_hashes"),
            exact_value("int", value.group, f"{at}.group"),
        )
    if type(value) is not BlockStored:
        raise _not(value, at, "BlockStored, BlockRemoved or AllBlocksCleared")
    parent = value.parent_hash
    if parent is not None and type(parent) is not bytes:
        raise _not(parent, f"{at}.parent_hash", "bytes or None")
    lora = value.lora_id
    if lora is not None:
        exact_value("int", lora, f"{at}.lora_id")
    return BlockStored(
        _exact_hashes(value.block_hashes, f"{at}.block_hashes"),
        parent,
        tuple(exact_value("tokens", value.token_ids, f"{at}.token_ids")),
        exact_value("int", value.block_size, f"{at}.block_size"),
        lora,
        exact_value("int", value.group, f"{at}.group"),
    )


def fits(kind: str, value: object) -> bool:
    """Whether ``value`` is exactly of ``kind`` (else an argument is written raw)."""
    if json_form(kind) not in JSON_FORMS:
        raise CodecError(f"unknown kind {kind!r}")
    try:
        exact_value(kind, value)
    except NotExact:
        return False
    return True


# --- kinds: JSON ----------------------------------------------------------------------------------


def _float_json(value: float | int) -> JSON:
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def _key_json(key: ExtraKey) -> JSON:
    return {"lora_id": key.lora_id, "cache_salt": key.cache_salt}


def _request_json(request: Request) -> JSON:
    """A request's fields as given (a request the spec refuses travels too: the target refuses
    it); its multimodal inputs as objects where they are ``MultimodalInput``."""
    where = "request"
    multimodal = request.multimodal
    inputs = (
        [
            {"offset": plain_json(m.offset, where), "length": plain_json(m.length, where)}
            | {"identifier": plain_json(m.identifier, where)}
            if type(m) is MultimodalInput
            else plain_json(m, where)
            for m in multimodal
        ]
        if isinstance(multimodal, list | tuple)
        else plain_json(multimodal, where)
    )
    key = request.extra_key
    return {
        "id": plain_json(request.request_id, where),
        "tokens": plain_json(request.tokens, where),
        "num_prompt_tokens": plain_json(request.num_prompt_tokens, where),
        "num_computed_tokens": plain_json(request.num_computed_tokens, where),
        "extra_key": _key_json(key) if type(key) is ExtraKey else plain_json(key, where),
        "multimodal": inputs,
    }


def _hex(digest: bytes | None) -> JSON:
    return None if digest is None else digest.hex()


def _event_json(event: KVEvent) -> JSON:
    if isinstance(event, AllBlocksCleared):
        return {"type": "cleared"}
    if isinstance(event, BlockRemoved):
        hashes = [_hex(h) for h in event.block_hashes]
        return {"type": "removed", "block_hashes": hashes, "group": event.group}
    return {
        "type": "stored",
        "block_hashes": [_hex(h) for h in event.block_hashes],
        "parent_hash": _hex(event.parent_hash),
        "token_ids": list(event.token_ids),
        "block_size": event.block_size,
        "lora_id": event.lora_id,
        "group": event.group,
    }


def plain_json(value: object, where: str) -> JSON:
    """A plain JSON value (for ``raw``), or a CodecError."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CodecError(f"{where}: cannot write the non-finite {value!r} as plain JSON")
        return value
    if isinstance(value, list | tuple):
        return [plain_json(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain_json(v, where) for k, v in value.items()}
    raise CodecError(f"{where}: {value!r} has no JSON form")


def _json_of(kind: str, value: Any) -> JSON:
    """The JSON of an exact value of ``kind``."""
    if value is None:
        return None
    base = json_form(kind)
    if base in {"int", "bool", "tokens", "ids"}:
        return value
    if base == "float":
        return _float_json(value)
    if base in {"chains", "pairs"}:
        return [list(v) for v in value]
    if base in {"device", "status"}:
        return value.value
    if base == "extra_key":
        return _key_json(value)
    if base == "str":
        return value
    if base == "request":
        return _request_json(value)
    if base == "hit":
        return {"blocks": [list(v) for v in value[0]], "num_tokens": value[1]}
    if base == "events":
        return [_event_json(event) for event in value]
    if base == "keys":
        return list(value)
    if base == "tables":
        return [[key, list(table)] for key, table in value.items()]
    return {
        "hash": value.hash.hex(),
        "num_tokens": value.num_tokens,
        "extra_key": _key_json(value.extra_key),
    }


def encode_value(kind: str, value: object, where: str = "value") -> JSON:
    """``value``'s JSON; one not exactly of ``kind`` is written ``{"raw": ...}``."""
    if json_form(kind) not in JSON_FORMS:
        raise CodecError(f"unknown kind {kind!r}")
    try:
        exact = exact_value(kind, value)
    except NotExact:
        return {"raw": plain_json(value, where)}
    return _json_of(kind, exact)


def _fail(where: str, expected: str, got: JSON) -> CodecError:
    return CodecError(f"{where}: expected {expected}, got {short(got)}")


def short(value: JSON) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: JSON, where: str) -> int:
    if not _is_int(value):
        raise _fail(where, "an integer", value)
    assert isinstance(value, int)
    return value


def _is_table_key(value: JSON) -> bool:
    return _is_int(value) or isinstance(value, str)


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
    base = json_form(kind)
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
        if not isinstance(value, int | float) or isinstance(value, bool):
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
    if base == "str":
        if not isinstance(value, str):
            raise _fail(where, "a string", value)
        return value
    if base == "request":
        return _decode_request(value, where)
    if base == "hit":
        if not isinstance(value, dict) or set(value) != {"blocks", "num_tokens"}:
            raise _fail(where, 'a hit {"blocks": [[...], ...], "num_tokens": n}', value)
        blocks = decode_value("chains", value["blocks"], f"{where}.blocks")
        return (blocks, _int(value["num_tokens"], f"{where}.num_tokens"))
    if base == "events":
        if not isinstance(value, list):
            raise _fail(where, "a list of events", value)
        return [_decode_event(e, f"{where}[{i}]") for i, e in enumerate(value)]
    if base == "keys":
        if not isinstance(value, list) or not all(_is_table_key(k) for k in value):
            raise _fail(where, "a list of table keys (integers or strings)", value)
        return list(value)
    if base == "tables":
        if not isinstance(value, list) or not all(
            isinstance(e, list) and len(e) == 2 and _is_table_key(e[0]) for e in value
        ):
            raise _fail(where, "a list of [table key, [block ids]]", value)
        return {e[0]: _int_list(e[1], f"{where}[{e[0]!r}]", "block ids") for e in value}
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


REQUEST_FIELDS = ("id", "tokens", "num_prompt_tokens", "num_computed_tokens", "extra_key")


def _decode_request(value: JSON, where: str) -> Request:
    """A request as written: its fields as they come (validation is the target's), the tokens as
    a tuple when they are a list, the extra key and multimodal inputs as objects when shaped so."""
    if not isinstance(value, dict) or set(value) - {*REQUEST_FIELDS, "multimodal"}:
        raise _fail(where, f"a request {{{', '.join(REQUEST_FIELDS)}, multimodal}}", value)
    missing = [name for name in REQUEST_FIELDS if name not in value]
    if missing:
        raise CodecError(f"{where}: the request lacks {', '.join(missing)}")
    tokens = value["tokens"]
    key = value["extra_key"]
    if isinstance(key, dict) and set(key) <= {"lora_id", "cache_salt"}:
        key = _decode_key(key, f"{where}.extra_key")
    multimodal = value.get("multimodal", [])
    if isinstance(multimodal, list):
        multimodal = tuple(
            MultimodalInput(m["offset"], m["length"], m["identifier"])
            if isinstance(m, dict) and set(m) == {"offset", "length", "identifier"}
            else m
            for m in multimodal
        )
    return Request(
        request_id=value["id"],
        tokens=tuple(tokens) if isinstance(tokens, list) else tokens,
        num_prompt_tokens=value["num_prompt_tokens"],
        num_computed_tokens=value["num_computed_tokens"],
        extra_key=key,
        multimodal=multimodal,
    )


def _digest(value: JSON, where: str) -> bytes:
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise _fail(where, "a hex string", value) from None


def _decode_event(value: JSON, where: str) -> KVEvent:
    shapes = {
        "stored": {"block_hashes", "parent_hash", "token_ids", "block_size", "lora_id", "group"},
        "removed": {"block_hashes", "group"},
        "cleared": set(),
    }
    kind = value.get("type") if isinstance(value, dict) else None
    kind = kind if isinstance(kind, str) else None
    if not isinstance(value, dict) or kind not in shapes or set(value) != {"type", *shapes[kind]}:
        raise _fail(where, 'an event {"type": "stored" | "removed" | "cleared", ...}', value)
    if kind == "cleared":
        return AllBlocksCleared()
    hashes = value["block_hashes"]
    if not isinstance(hashes, list):
        raise _fail(f"{where}.block_hashes", "a list of hex strings", hashes)
    digests = tuple(_digest(h, f"{where}.block_hashes[{i}]") for i, h in enumerate(hashes))
    group = _int(value["group"], f"{where}.group")
    if kind == "removed":
        return BlockRemoved(digests, group)
    parent = value["parent_hash"]
    lora = value["lora_id"]
    if lora is not None:
        lora = _int(lora, f"{where}.lora_id")
    return BlockStored(
        digests,
        None if parent is None else _digest(parent, f"{where}.parent_hash"),
        tuple(_int_list(value["token_ids"], f"{where}.token_ids", "token ids")),
        _int(value["block_size"], f"{where}.block_size"),
        lora,
        group,
    )


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
    """A result's JSON; ``NotExact`` if it is not exactly of the operation's result kind."""
    kind = op_spec(level, op).result
    try:
        return _json_of(kind, exact_value(kind, result))
    except NotExact as error:
        raise NotExact(error.phrase, f"{op} result") from None


def decode_result(level: Level, op: str, value: JSON) -> Any:
    return decode_value(op_spec(level, op).result, value, f"{op} result", allow_raw=False)


def exact_result(level: Level, op: str, result: object) -> Any:
    """What a Python target's answer is as the protocol's value: encoded and read back, as an
    ``exec:`` target's answer would be (builtin types, a copy); ``NotExact`` otherwise.

    The answers every lockstep step reads (ids, counts, flags, a block table, copy pairs) take a
    short way when they are already of the builtin types: what the round trip would give, without
    building the JSON (``model_tests/tests/test_exact_answers.py`` holds the two ways equal)."""
    return exact_reader(level, op)(result)


def exact_reader(level: Level, op: str) -> Callable[[object], Any]:
    """``exact_result`` of one operation: its result kind looked up once (an observation reads
    the same few operations after every call)."""
    try:
        return _READERS[(level, op)]
    except (KeyError, TypeError):  # TypeError: an unhashable name, refused by op_spec
        pass
    plain = _plain_reader(op_spec(level, op).result)

    def read(result: object) -> Any:
        value = plain(result)
        if value is not NOT_PLAIN:
            return value
        return decode_result(level, op, encode_result(level, op, result))

    _READERS[(level, op)] = read
    return read


_READERS: dict[tuple[Level, str], Callable[[object], Any]] = {}

NOT_PLAIN = object()
"""A plain reader's answer for a value that must take the round trip."""


@cache
def _plain_reader(kind: str) -> Callable[[object], Any]:
    """For one result kind: a value as the round trip of ``exact_result`` gives it, where that
    is plain to see (the builtin types themselves, never a subclass); else ``NOT_PLAIN``."""
    optional = kind.endswith("?")
    name = kind[:-1] if optional else kind
    base = _JSON_KIND.get(name, name)
    plain = _PLAIN.get(base, _not_plain)
    if not optional:
        return plain

    def or_none(value: object) -> Any:
        return None if value is None else plain(value)

    return or_none


def _plain_int(value: object) -> Any:
    return value if type(value) is int else NOT_PLAIN


def _plain_bool(value: object) -> Any:
    return value if type(value) is bool else NOT_PLAIN


def _plain_none(value: object) -> Any:
    return None if value is None else NOT_PLAIN


def _plain_status(value: object) -> Any:
    return value if type(value) is AllocStatus else NOT_PLAIN


_SEQUENCES = (list, tuple)
"""A tuple of types, not a union (``list | tuple`` is built again at every call)."""


def _plain_ids(value: object) -> Any:
    cls = type(value)
    if (cls is not list and cls is not tuple) or not isinstance(value, _SEQUENCES):
        return NOT_PLAIN  # the type test refuses subclasses; isinstance narrows for mypy
    for item in value:  # every table read: a loop, not a generator
        if type(item) is not int:
            return NOT_PLAIN
    return list(value)


def _plain_pairs(value: object) -> Any:
    cls = type(value)
    if (cls is not list and cls is not tuple) or not isinstance(value, _SEQUENCES):
        return NOT_PLAIN
    pairs = []
    for pair in value:
        if type(pair) is not tuple or len(pair) != 2:
            return NOT_PLAIN
        source, destination = pair
        if type(source) is not int or type(destination) is not int:
            return NOT_PLAIN
        pairs.append((source, destination))
    return pairs


def _not_plain(value: object) -> Any:
    return NOT_PLAIN


_PLAIN: dict[str, Callable[[object], Any]] = {
    "int": _plain_int,
    "bool": _plain_bool,
    "none": _plain_none,
    "status": _plain_status,
    "ids": _plain_ids,
    "tokens": _plain_ids,
    "pairs": _plain_pairs,
}


# --- errors ---------------------------------------------------------------------------------------


def error_class(name: object) -> type[PagedKVError]:
    found = getattr(error_module, name, None) if isinstance(name, str) else None
    if not (isinstance(found, type) and issubclass(found, PagedKVError)):
        raise CodecError(f"{short(name)} is not an error class of pagedkv.specs.errors")
    return found


def encode_error(error: BaseException) -> JSON:
    return {"error": type(error).__name__, "message": str(error)}


def decode_error(value: JSON) -> PagedKVError:
    if not isinstance(value, dict) or "error" not in value:
        raise _fail("error", '{"error": "<class>", "message": "..."}', value)
    message = value.get("message", "")
    return error_class(value["error"])(message if isinstance(message, str) else repr(message))


# --- configurations -------------------------------------------------------------------------------

ConfigType = ManagerConfig | PoolConfig | RequestConfig | DefragConfig
CONFIG_TYPES: dict[
    Level, type[ManagerConfig] | type[PoolConfig] | type[RequestConfig] | type[DefragConfig]
] = {
    "manager": ManagerConfig,
    "pool": PoolConfig,
    "request": RequestConfig,
    "defrag": DefragConfig,
}


def _group_json(group: object) -> JSON:
    if type(group) is KVGroup and isinstance(group.kind, AttentionKind):
        window = plain_json(group.sliding_window, "config")
        return {"kind": group.kind.value, "sliding_window": window}
    return plain_json(group, "config")


def encode_config(config: ConfigType) -> JSON:
    """The configuration's fields as given (bad configurations included: they are checked); a
    request configuration's groups as ``{"kind", "sliding_window"}``."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name == "groups" and isinstance(value, list | tuple):
            out[f.name] = [_group_json(group) for group in value]
        elif f.name == "reserved" and isinstance(value, frozenset | set):
            out[f.name] = plain_json(_sorted_ids(value), "config")
        else:
            out[f.name] = plain_json(value, "config")
    return out


def _sorted_ids(ids: frozenset[Any] | set[Any]) -> list[Any]:
    """Reserved ids in order (ints by value; a bad configuration's mixed values by text)."""
    try:
        return sorted(ids)
    except TypeError:
        return sorted(ids, key=repr)


def _decode_groups(value: JSON) -> JSON:
    """A request configuration's groups as ``KVGroup`` values where they are shaped as one."""
    if not isinstance(value, list):
        return value
    groups: list[object] = []
    for group in value:
        kinds = {kind.value: kind for kind in AttentionKind}
        if isinstance(group, dict) and set(group) == {"kind", "sliding_window"}:
            if group["kind"] not in kinds:
                raise _fail("request config groups", f"a kind of {sorted(kinds)}", group["kind"])
            groups.append(KVGroup(kinds[group["kind"]], group["sliding_window"]))
        else:
            groups.append(group)
    return tuple(groups)


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
    if "groups" in value and cls is RequestConfig:
        value = {**value, "groups": _decode_groups(value["groups"])}
    if cls is DefragConfig:
        value = _defrag_fields(value)
    return cls(**value)


def _defrag_fields(value: Mapping[str, JSON]) -> dict[str, JSON]:
    """A defragmenter's ``pad_sizes`` as a tuple and ``reserved`` as a frozenset, where they
    came as lists (anything else stays as it came, for the configuration check to refuse)."""
    out = dict(value)
    if isinstance(out.get("pad_sizes"), list):
        out["pad_sizes"] = tuple(out["pad_sizes"])
    reserved = out.get("reserved")
    if isinstance(reserved, list) and all(_is_table_key(b) for b in reserved):
        out["reserved"] = frozenset(reserved)
    return out


def config_level(config: object) -> Level:
    if isinstance(config, ManagerConfig):
        return "manager"
    if isinstance(config, PoolConfig):
        return "pool"
    if isinstance(config, RequestConfig):
        return "request"
    if isinstance(config, DefragConfig):
        return "defrag"
    raise CodecError(
        f"{config!r} is neither a ManagerConfig, a PoolConfig, a RequestConfig nor a DefragConfig"
    )
