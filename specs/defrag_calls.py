"""The defragmenter's operations as typed calls (``specs/call.py``): one constructor per
operation of ``specs/operations.py``, with the parameters of its ``Defragmenter`` method in
``specs/interface.py``, so that mypy checks every call the defrag machine makes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from pagedkv.specs.call import Call
from pagedkv.specs.interface import Defragmenter
from pagedkv.specs.types import BlockId, CopyPair, TableKey

T = TypeVar("T")
DefragCall = Call[Defragmenter, T]


def update_state(
    changed: Mapping[TableKey, Sequence[BlockId]], finished: Collection[TableKey]
) -> DefragCall[None]:
    return Call("update_state", (changed, finished), lambda side: side.update_state)


def defragment() -> DefragCall[list[CopyPair]]:
    return Call("defragment", (), lambda side: side.defragment)


def resolve(block: BlockId) -> DefragCall[BlockId]:
    return Call("resolve", (block,), lambda side: side.resolve)


def resolve_all(tables: Sequence[Sequence[BlockId]]) -> DefragCall[list[list[BlockId]]]:
    return Call("resolve_all", (tables,), lambda side: side.resolve_all)


def unresolve(physical: BlockId) -> DefragCall[BlockId]:
    return Call("unresolve", (physical,), lambda side: side.unresolve)


DEFRAG_CALLS: dict[str, Callable[..., DefragCall[Any]]] = {
    constructor.__name__: constructor
    for constructor in (update_state, defragment, resolve, resolve_all, unresolve)
}
"""Each constructor under its operation's name, in the table's order: where a call comes as
data (a trace read from JSON), ``DEFRAG_CALLS[name](*args)`` builds it."""
