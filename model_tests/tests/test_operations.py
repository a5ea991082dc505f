"""One table of operations (``specs/operations.py``), and everything that lists them held to it:
the protocols of ``specs/interface.py``, every implementation, the codec and ``specs/oracle.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pagedkv.model_tests.independent.manager import IndependentManager
from pagedkv.model_tests.oracle import codec
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import interface, named_calls, operations
from pagedkv.specs.types import ExtraKey

SPECS = Path(operations.__file__).parent
IMPLEMENTATIONS: dict[operations.Level, list[type[Any]]] = {
    "manager": [
        interface.BlockSpaceManager,
        ReferenceBlockSpaceManager,
        OptimizedBlockSpaceManager,
        IndependentManager,
    ],
    "pool": [interface.BlockPool, ReferenceBlockPool, OptimizedBlockPool],
    "request": [interface.RequestKVManager, ReferenceRequestKVManager, RequestManager],
}
PROTOCOL_CLASSES = {interface.BlockSpaceManager, interface.BlockPool, interface.RequestKVManager}
OPTIONAL_PROTOCOLS: dict[tuple[operations.Level, str], type[Any]] = {
    ("request", "preempt"): interface.RequestPreemption,
    ("pool", "take_events"): interface.PoolEvents,
    ("pool", "allocate_immutable_chain"): interface.PoolChainAllocation,
    ("pool", "free_blocks"): interface.PoolBatchFree,
}
"""Where each optional operation is declared: a Protocol of its own, which a target may lack."""
EXTRA_PARAMETERS = {"choice"}
"""Trailing optional parameters an implementation may add: the reference pool's ``choice``, the
oracle's way to replay another implementation's allowed choice."""


def parameters(method: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(method).parameters.values() if p.name != "self"]


def default_value(text: str) -> object:
    return eval(text, {"ExtraKey": ExtraKey})


@pytest.mark.parametrize(
    ("level", "cls"),
    [(level, cls) for level, classes in IMPLEMENTATIONS.items() for cls in classes],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_every_implementation_has_the_tables_operations(
    level: operations.Level, cls: type[Any]
) -> None:
    for operation in operations.OPERATIONS[level].values():
        optional = OPTIONAL_PROTOCOLS.get((level, operation.name), cls)
        protocol = optional if cls in PROTOCOL_CLASSES else cls
        method = getattr(protocol, operation.name, None)
        assert callable(method), f"{cls.__name__} lacks {operation.name}"
        found = parameters(method)
        extra = [p for p in found[len(operation.params) :] if p.name in EXTRA_PARAMETERS]
        assert len(found) == len(operation.params) + len(extra), (cls, operation.signature())
        for param, actual in zip(operation.params, found, strict=False):
            assert actual.name == param.name, (cls.__name__, operation.name, actual.name)
            if param.default is None:
                assert actual.default is inspect.Parameter.empty, (cls, operation.name, param)
            else:
                assert actual.default == default_value(param.default), (cls, operation.name)


def test_the_protocols_have_nothing_the_table_lacks() -> None:
    observers = {"config", "view", "block", "lookup"}
    protocols: dict[operations.Level, type[Any]] = {
        "manager": interface.BlockSpaceManager,
        "pool": interface.BlockPool,
        "request": interface.RequestKVManager,
        "defrag": interface.Defragmenter,
    }
    for level, protocol in protocols.items():
        declared = {name for name in vars(protocol) if not name.startswith("_")}
        assert declared - observers == set(operations.required(level)), level
    optional = {
        (level, name)
        for level, table in operations.OPERATIONS.items()
        for name, op in table.items()
        if op.optional
    }
    assert set(OPTIONAL_PROTOCOLS) == optional
    for (_, name), protocol in OPTIONAL_PROTOCOLS.items():
        assert {n for n in vars(protocol) if not n.startswith("_")} == {name}


def test_the_codec_and_the_spec_page_read_the_same_table() -> None:
    assert codec.OPS is operations.OPERATIONS
    page = (SPECS / "oracle.md").read_text(encoding="utf-8")
    for level in operations.LEVELS:
        assert operations.markdown_table(level) in page, (
            f"specs/oracle.md §2 differs from operations.markdown_table({level!r}): paste it"
        )


def test_every_kind_has_a_json_form() -> None:
    for table in operations.OPERATIONS.values():
        for operation in table.values():
            for param in operation.params:
                codec.encode_value(param.kind, None if param.kind.endswith("?") else [])
            assert operation.result in operations.RESULTS or operation.result == "pairs"


PROTOCOLS: dict[operations.Level, tuple[type[Any], str]] = {
    "manager": (interface.BlockSpaceManager, "ManagerCall"),
    "pool": (interface.BlockPool, "PoolCall"),
    "request": (interface.RequestKVManager, "RequestCall"),
    "defrag": (interface.Defragmenter, "DefragCall"),
}


@pytest.mark.parametrize("level", operations.LEVELS)
def test_each_operation_has_a_typed_call_with_its_protocols_parameters(
    level: operations.Level,
) -> None:
    """``specs/manager_calls.py`` and ``specs/pool_calls.py``: one constructor per operation, in
    the table's order, with the Protocol method's parameters (names, defaults, annotations) and
    a call of the Protocol method's result."""
    constructors = named_calls.CONSTRUCTORS[level]
    assert list(constructors) == list(operations.OPERATIONS[level]), level
    protocol, call_type = PROTOCOLS[level]
    for name, constructor in constructors.items():
        declaring = OPTIONAL_PROTOCOLS.get((level, name), protocol)
        method = inspect.signature(getattr(declaring, name))
        made = inspect.signature(constructor)
        wanted = [(p.name, p.default, p.annotation) for p in parameters(getattr(declaring, name))]
        found = [(p.name, p.default, p.annotation) for p in made.parameters.values()]
        assert found == wanted, (level, name)
        assert made.return_annotation == f"{call_type}[{method.return_annotation}]", (level, name)


class _Names:
    """A side whose every method is its own name: what a call's ``method`` reaches."""

    def __getattr__(self, name: str) -> str:
        return name


@pytest.mark.parametrize("level", operations.LEVELS)
def test_a_call_names_its_operation_and_reaches_its_method(level: operations.Level) -> None:
    for name, operation in operations.OPERATIONS[level].items():
        args = [object() for _ in operation.params]
        call = named_calls.call_named(level, name, args)
        assert (call.name, call.args) == (name, tuple(args))
        reached: object = call.method(_Names())
        assert reached == name
        required = args[: operation.min_args]
        assert len(named_calls.call_named(level, name, required).args) == len(operation.params)


def test_calls_of_one_operation_with_equal_arguments_are_equal() -> None:
    """A machine draws calls from lists (``sampled_from``), and Hypothesis labels such a draw by
    its elements' hashes: equal calls must hash alike across draws (each constructor makes a
    new function), or the search goes otherwise than with the ``(name, *args)`` it replaced."""
    assert named_calls.call_named("pool", "free", [3]) == named_calls.call_named(
        "pool", "free", [3]
    )
    assert hash(named_calls.call_named("manager", "free", [3])) == hash(
        named_calls.call_named("manager", "free", [3])
    )
    assert named_calls.call_named("pool", "free", [3]) != named_calls.call_named(
        "pool", "free", [4]
    )
