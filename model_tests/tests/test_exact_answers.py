"""The short way of ``specs/wire.exact_result`` (answers already of the builtin types) gives
exactly what the round trip through JSON gives: the same value of the same types, a copy of a
list, and ``NotExact`` for the same answers."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.specs import wire
from pagedkv.specs.operations import LEVELS
from pagedkv.specs.types import AllocStatus, Device

OPERATIONS = [(level, op) for level in LEVELS for op in sorted(wire.OPS[level])]


class IntList(list[int]):
    """A list subclass: the round trip reads its storage, never its own methods."""


class Count(int):
    """An int subclass: never an exact int."""


atoms = st.one_of(
    st.integers(-3, 2**70),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True),
    st.sampled_from([*AllocStatus, *Device]),
    st.builds(Count, st.integers(0, 5)),
    st.text(max_size=2),
)
pairs = st.tuples(atoms, atoms) | st.lists(atoms, max_size=3) | st.tuples(atoms)
answers = st.recursive(
    atoms | pairs,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.lists(st.integers(0, 9), max_size=4).map(IntList)
    ),
    max_leaves=8,
)


def round_trip(level: Any, op: str, answer: object) -> tuple[str, Any]:
    try:
        return ("value", wire.decode_result(level, op, wire.encode_result(level, op, answer)))
    except wire.NotExact as error:
        return ("not exact", error.phrase)


def short_way(level: Any, op: str, answer: object) -> tuple[str, Any]:
    try:
        return ("value", wire.exact_result(level, op, answer))
    except wire.NotExact as error:
        return ("not exact", error.phrase)


def typed(value: object) -> object:
    """``value`` with the type of every part beside it: ``1 == True`` must not pass."""
    if isinstance(value, list | tuple):
        return (type(value), [typed(v) for v in value])
    return (type(value), value if value == value else "nan")


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(OPERATIONS), answers)
def test_the_short_way_is_the_round_trip(operation: tuple[Any, str], answer: object) -> None:
    level, op = operation
    short, long = short_way(level, op, answer), round_trip(level, op, answer)
    assert typed(short) == typed(long), (op, answer, short, long)
    if short[0] == "value" and isinstance(answer, list):
        assert short[1] is not answer  # a copy: the target may reuse its list


def test_the_comparison_sees_a_bool_where_an_int_is_due() -> None:
    """``typed`` can fail: ``True`` and ``1`` are equal, their types are not."""
    assert typed([True]) != typed([1])
