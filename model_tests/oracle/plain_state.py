"""A target's compact state checked to hold only Python's own values before it is compared, so
that comparing it cannot ask the target.

``a == b`` lets ``b`` answer when ``b``'s type is a subclass of ``a``'s: a ``dict`` subclass
whose ``__eq__`` says yes, or a ``bytes`` subclass among a pool's token columns, made a wrong
state compare equal to the model's (a user's tryout: ``pagedkv soak --exact`` said PASS for a
subclass with a stray hash-index entry in such a ``dict``, and for a free block holding tokens in
such ``bytes``). So each part of a target's compact state is read as Python's own values
before it is compared: each spec type checked to be exactly itself (``CompactPool``,
``ExtraKey``, ``Device``, the configurations) and written as its fields, the rest passed through
``marshal``'s round trip, which writes only Python's own types (an instance of any subclass of
``dict``, ``list``, ``tuple``, ``int``, ``float``, ``str`` is refused) and reads a bytes-like
object, wherever it is nested, by its buffer: as the plain ``bytes`` it holds. A ``bytes``
subclass where a pool keeps its tokens and hashes is named. What is compared is made of exact
builtins, whose ``==`` is Python's own (``specs/oracle.md`` §6).
"""

from __future__ import annotations

import enum
import marshal
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from operator import attrgetter, countOf
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


def _copy(value: object, copy: bool) -> Any:
    """The target's data (``copy``) through ``marshal``'s round trip: Python's own types only
    (any subclass of a builtin container, ``int``, ``float`` or ``str`` refused), a bytes-like
    object read by its buffer as plain ``bytes``, wherever it is nested; the model's as it is."""
    if not copy:
        return value
    try:
        return marshal.loads(marshal.dumps(value))  # type: ignore[arg-type]
    except ValueError as error:  # "unmarshallable object"
        raise ForeignValue(f"an object that is not Python's own ({error})") from None


def _each(values: Iterable[object], kinds: tuple[type, ...], what: str) -> None:
    """Every value of exactly one of ``kinds`` (counted in C)."""
    found = list(map(type, values))
    if sum(countOf(found, kind) for kind in kinds) != len(found):
        odd = next(kind for kind in found if kind not in kinds)
        raise ForeignValue(f"a {odd.__qualname__} among {what}")


def _config(config: object, copy: bool) -> object:
    if type(config) is not ManagerConfig and type(config) is not PoolConfig:
        raise ForeignValue(f"a configuration of type {type(config).__qualname__}")
    values = tuple(getattr(config, field.name) for field in fields(config))
    return (type(config).__name__, _copy(values, copy))


def _key(key: object) -> object:
    """An extra key (exactly ``ExtraKey``) as its fields, or None."""
    if key is None:
        return None
    _exactly(key, ExtraKey)
    return _KEY_FIELDS(key)


_KEYS = CompactPool._fields.index("keys") - 1
"""Where a pool's extra keys are among its columns (its fields after the configuration)."""


def _pool(pool: object, copy: bool) -> object:
    _exactly(pool, CompactPool)
    assert isinstance(pool, CompactPool)
    _exactly(pool.keys, list)
    if copy:  # a bytes subclass would be read by what it holds; named where it is kept
        _each(pool.tokens, (bytes, tuple), "a pool's tokens")
        _each(pool.hashes, (bytes, NONE), "a pool's hashes")
        _each(pool.parents, (bytes, NONE), "a pool's parents")
    config, *columns = pool  # every field, in order: none is left out as fields are added
    columns[_KEYS] = [_key(key) for key in pool.keys]
    return (_config(config, copy), _copy(columns, copy))


def _seqs(seqs: object, copy: bool) -> object:
    _exactly(seqs, dict)
    return _copy(seqs, copy)


def _groups(groups: object, copy: bool) -> object:
    """Each group's row with its extra key as its fields (through ``marshal`` on the target's
    side) and its devices apart (exactly ``Device``: compared by identity)."""
    _exactly(groups, dict)
    assert isinstance(groups, dict)
    rows: dict[object, object] = {}
    devices: dict[object, object] = {}
    for group_id, row in dict.items(groups):
        _exactly(row, tuple)
        if len(row) != 6:
            raise ForeignValue("a group's row of other than its 6 fields")
        members, device, key, tokens, blocks, cross = row
        _each((device, cross), (Device,), "the groups' devices")
        rows[group_id] = (members, _key(key), tokens, blocks)
        devices[group_id] = (device, cross)
    return (_copy(rows, copy), devices)


def _null_block(block: object, copy: bool) -> object:
    _each([block], (int, NONE), "the null block")
    return block


_PARTS: tuple[tuple[str, Callable[[Any, bool], object]], ...] = (
    ("config", _config),
    ("gpu", _pool),
    ("cpu", _pool),
    ("seqs", _seqs),
    ("groups", _groups),
    ("null_block", _null_block),
)


def same_plain(
    mine: CompactManager,
    theirs: object,
    agreed: tuple[CompactManager, CompactManager] | None = None,
) -> bool:
    """Whether the target's compact state equals the model's, each part of the target's read as
    Python's own values (``_copy``; ``ForeignValue`` where it holds something else). A part that
    is on each side the very object it was in the pair last found equal, ``agreed``, is equal
    without a look (a compact state's parts are never changed once returned)."""
    _exactly(theirs, CompactManager)
    assert isinstance(theirs, CompactManager)
    for name, form in _PARTS:
        ours, their = getattr(mine, name), getattr(theirs, name)
        if (
            agreed is not None
            and ours is getattr(agreed[0], name)
            and their is getattr(agreed[1], name)
        ):
            continue
        if form(ours, False) != form(their, True):
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
