"""Whether a list or tuple holds the very objects of a tuple, found in one memory comparison.

A request comes back at every step as a new tuple, its earlier tokens the same int objects as
last time (a scheduler extends the last step's tuple); a scheduler asks about the same prompt
list at every step until it fits. Those objects were checked when first seen, so holding them
proves the tokens unchanged and still exact ints; equality alone would not (``100.0 == 100``,
``True == 1``).

In CPython both keep their items as an array of object pointers: a tuple's right after its
fixed header (``tuple.__basicsize__`` bytes from the object's address, which is its ``id``), a
list's wherever its ``ob_item`` field (just after the variable-size header) points. So "the
same objects" is "the same pointer bytes": one C ``memcmp``, about 0.6 ns a token, where
comparing the items one by one costs 2.5 (by value) or 9 (by identity, through ``map``). The
call itself costs about half a microsecond, so a short sequence is walked; so is everything on
another Python, or where the C library cannot be loaded.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from operator import is_

_POINTER_SIZE = tuple.__itemsize__
_TUPLE_ITEMS = tuple.__basicsize__
"""A tuple's first item pointer, in bytes from the tuple's address."""
_LIST_ITEMS = ctypes.sizeof(ctypes.c_ssize_t) * 2 + ctypes.sizeof(ctypes.c_void_p)
"""A list's ``ob_item`` field, in bytes from the list's address (after the reference count,
the type and the size)."""
_WALKED = 48
"""Below this many items the walk is cheaper than the call into C."""
_read_address = ctypes.c_size_t.from_address


def _load_memcmp() -> Callable[[int, int, int], int] | None:
    if sys.implementation.name != "cpython":
        return None
    try:
        memcmp = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError, TypeError):  # no C library loaded by name (Windows)
        return None
    memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    memcmp.restype = ctypes.c_int
    compare: Callable[[int, int, int], int] = memcmp
    return compare


_memcmp = _load_memcmp()


def same_objects(items: Sequence[object], known: tuple[object, ...]) -> bool:
    """Whether ``items`` (any sequence) holds exactly the objects of ``known``, position by
    position."""
    count = len(known)
    if len(items) != count:
        return False
    if _memcmp is None or count < _WALKED:
        return all(map(is_, items, known))
    kind = type(items)
    if kind is tuple:
        start = id(items) + _TUPLE_ITEMS
    elif kind is list:
        start = _read_address(id(items) + _LIST_ITEMS).value
    else:
        return all(map(is_, items, known))
    return not _memcmp(start, id(known) + _TUPLE_ITEMS, count * _POINTER_SIZE)


def starts_with_same_objects(items: tuple[object, ...], prefix: tuple[object, ...]) -> bool:
    """Whether ``items[i] is prefix[i]`` for every index of ``prefix``."""
    count = len(prefix)
    if len(items) < count:
        return False
    if _memcmp is None or count < _WALKED:
        return all(map(is_, items, prefix))
    return not _memcmp(id(items) + _TUPLE_ITEMS, id(prefix) + _TUPLE_ITEMS, count * _POINTER_SIZE)
