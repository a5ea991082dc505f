"""Calls that come as data, by operation name: a trace read from JSON, a replay, a soak's or a
teaching walk's recorded step. The name picks the operation's typed constructor
(``specs/manager_calls.py``, ``specs/pool_calls.py``, ``specs/request_calls.py``,
``specs/defrag_calls.py``); nothing is
looked up on a side by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pagedkv.specs.call import Call
from pagedkv.specs.defrag_calls import DEFRAG_CALLS
from pagedkv.specs.manager_calls import MANAGER_CALLS
from pagedkv.specs.operations import Level
from pagedkv.specs.pool_calls import POOL_CALLS
from pagedkv.specs.request_calls import REQUEST_CALLS

CONSTRUCTORS: dict[Level, dict[str, Callable[..., Call[Any, Any]]]] = {
    "manager": MANAGER_CALLS,
    "pool": POOL_CALLS,
    "request": REQUEST_CALLS,
    "defrag": DEFRAG_CALLS,
}


def call_named(level: Level, name: str, args: Sequence[Any]) -> Call[Any, Any]:
    """The call of operation ``name`` at ``level`` with ``args`` (a ``KeyError`` for a name the
    level lacks; the codec has checked names and argument counts of what it decoded)."""
    return CONSTRUCTORS[level][name](*args)
