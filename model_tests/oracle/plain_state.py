"""A target's compact state checked to hold only Python's own values before it is compared, so
that comparing it cannot ask the target.

``a == b`` lets ``b`` answer when ``b``'s type is a subclass of ``a``'s: a ``dict`` subclass
whose ``__eq__`` says yes, or a ``bytes`` subclass among a pool's token columns, made a wrong
state compare equal to the model's (a user's tryout: ``pagedkv soak --exact`` said PASS for a
subclass with a stray hash-index entry in such a ``dict``, and for a free block holding tokens in
such ``bytes``). So every part of a target's compact state is first checked to be made of exact
types only, in C passes: each spec type exactly itself (``CompactPool``, ``ExtraKey``,
``Device``, the configurations), each ``bytes`` exactly ``bytes`` (``map(type, ...)`` counted),
and everything else through ``marshal``, which writes only Python's own types (an instance of any
subclass of ``dict``, ``list``, ``tuple``, ``int``, ``str`` is refused). After that, ``==`` is
Python's own on every value (``specs/oracle.md`` §6).
"""

from __future__ import annotations

import enum
import marshal
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from operator import attrgetter, countOf, itemgetter
from typing import Any

from pagedkv.specs.compact_state import CompactManager, CompactPool
from pagedkv.specs.types import Device, ExtraKey, ManagerConfig, PoolConfig


class ForeignValue(Exception):
    """A target's state holds a value of a type pagedkv never keeps there."""


NONE = type(None)
_KEY_FIELDS = attrgetter("lora_id", "cache_salt")


def _exactly(value: object, kind: type) -> None:
    if type(value) is not kind:
        raise ForeignValue(f"a {type(value).__qualname__} where pagedkv keeps a {kind.__name__}")


def _builtins(value: object) -> None:
    """``value`` made of Python's own types only (a bytes-like object passes: see ``_bytes``)."""
    try:
        marshal.dumps(value)  # type: ignore[arg-type]
    except ValueError as error:  # "unmarshallable object"
        raise ForeignValue(f"an object that is not Python's own ({error})") from None


def _each(values: Iterable[object], kinds: tuple[type, ...], what: str) -> None:
    """Every value of exactly one of ``kinds`` (counted in C)."""
    found = list(map(type, values))
    if sum(countOf(found, kind) for kind in kinds) != len(found):
        odd = next(kind for kind in found if kind not in kinds)
        raise ForeignValue(f"a {odd.__qualname__} among {what}")


def _config(config: object) -> None:
    if type(config) is not ManagerConfig and type(config) is not PoolConfig:
        raise ForeignValue(f"a configuration of type {type(config).__qualname__}")
    _builtins(tuple(getattr(config, field.name) for field in fields(config)))


def _keys(keys: list[Any], what: str) -> None:
    """Extra keys (or None), their fields Python's own."""
    _each(keys, (ExtraKey, NONE), what)
    _builtins([_KEY_FIELDS(key) for key in keys if key is not None])


def _pool(pool: object) -> None:
    _exactly(pool, CompactPool)
    assert isinstance(pool, CompactPool)
    _config(pool.config)
    _exactly(pool.keys, list)
    _keys(pool.keys, "a pool's extra keys")
    columns = [pool.tokens, pool.hashes, pool.parents, pool.cached, pool.duplicates]
    _builtins([*columns, pool.ref_counts, pool.starts, pool.computed, pool.last_accessed])
    _builtins([pool.free, pool.evictable, pool.pending_cows, pool.hits, pool.queries])
    _each(pool.tokens, (bytes, tuple), "a pool's tokens")
    _each(pool.hashes, (bytes, NONE), "a pool's hashes")
    _each(pool.parents, (bytes, NONE), "a pool's parents")
    _each(pool.cached, (bytes,), "a pool's cached hashes")
    _each(pool.duplicates, (bytes,), "a pool's duplicated hashes")


def _seqs(seqs: object) -> None:
    _exactly(seqs, dict)
    assert isinstance(seqs, dict)
    _builtins(seqs)
    rows = list(dict.values(seqs))
    _each(rows, (tuple,), "the sequences' rows")
    _each(map(itemgetter(1), rows), (bytes, bytearray, tuple), "the sequences' tokens")


def _groups(groups: object) -> None:
    _exactly(groups, dict)
    assert isinstance(groups, dict)
    rows = list(dict.values(groups))
    _each(rows, (tuple,), "the groups' rows")
    if countOf(map(len, rows), 6) != len(rows):
        raise ForeignValue("a group's row of other than its 6 fields")
    members, devices, keys, tokens, blocks, cross = zip(*rows, strict=True) if rows else [()] * 6
    _builtins([list(dict.keys(groups)), members, tokens, blocks])
    _each(devices + cross, (Device,), "the groups' devices")
    _keys(list(keys), "the groups' extra keys")


def _null_block(block: object) -> None:
    _each([block], (int, NONE), "the null block")


_PARTS: tuple[tuple[str, Callable[[Any], None]], ...] = (
    ("config", _config),
    ("gpu", _pool),
    ("cpu", _pool),
    ("seqs", _seqs),
    ("groups", _groups),
    ("null_block", _null_block),
)


def check_plain(state: object) -> None:
    """``ForeignValue`` unless every value of the compact state is of Python's own types or
    exactly the spec's."""
    _exactly(state, CompactManager)
    for name, check in _PARTS:
        check(getattr(state, name))


def same_plain(
    mine: CompactManager,
    theirs: object,
    agreed: tuple[CompactManager, CompactManager] | None = None,
) -> bool:
    """Whether the target's compact state equals the model's, each part of it first checked to
    hold only Python's own values (``ForeignValue`` else). A part that is on each side the very
    object it was in the pair last found equal, ``agreed``, is equal without a look (a compact
    state's parts are never changed once returned)."""
    _exactly(theirs, CompactManager)
    assert isinstance(theirs, CompactManager)
    for name, check in _PARTS:
        ours, their = getattr(mine, name), getattr(theirs, name)
        if (
            agreed is not None
            and ours is getattr(agreed[0], name)
            and their is getattr(agreed[1], name)
        ):
            continue
        check(their)
        if ours != their:
            return False
    return True


_LEAVES = frozenset({int, float, bool, str, bytes, NONE})
_CONTAINERS = frozenset({tuple, list, frozenset, set})


def _of_the_spec(kind: type) -> bool:
    return kind.__module__.startswith("pagedkv.specs.")


def check_exact(value: object) -> None:
    """``ForeignValue`` unless ``value`` is made only of Python's own types and the spec's own
    (a dataclass, named tuple or enum of ``pagedkv.specs``, exactly): what a view's
    ``comparable()`` holds, walked at a checkpoint, where a state in columns is checked by
    ``same_plain`` after each call."""
    kind = type(value)
    if kind in _LEAVES:
        return
    if kind in _CONTAINERS:
        for item in value:  # type: ignore[attr-defined]
            check_exact(item)
        return
    if kind is dict:
        mapping: dict[Any, Any] = value  # type: ignore[assignment]
        for key, item in dict.items(mapping):
            check_exact(key)
            check_exact(item)
        return
    if _of_the_spec(kind):
        if isinstance(value, enum.Enum):
            return
        if isinstance(value, tuple):  # a named tuple
            for item in tuple.__iter__(value):
                check_exact(item)
            return
        if is_dataclass(value):
            for field in fields(value):
                check_exact(getattr(value, field.name))
            return
    raise ForeignValue(f"a {kind.__qualname__} ({kind.__module__})")
