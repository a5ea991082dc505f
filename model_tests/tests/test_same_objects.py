"""``optimized/same_objects.py`` against its definition, ``a[i] is b[i]`` at every index, on
both of its routes: the walk (short sequences) and the one memory comparison of the pointer
arrays (long lists and tuples, on CPython)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.optimized import same_objects as module
from pagedkv.optimized.same_objects import same_objects, starts_with_same_objects

_REPLACEMENTS = st.sampled_from(["new equal int", "float", "bool", "other int"])


def _replaced(token: int, how: str) -> object:
    if how == "new equal int":
        return int(str(token))  # equal, another object (ints above 256 are not shared)
    if how == "float":
        return float(token)
    if how == "bool":
        return bool(token)
    return token + 1


@given(
    length=st.integers(0, 200),
    where=st.floats(0, 1, exclude_max=True),
    how=st.none() | _REPLACEMENTS,
    as_list=st.booleans(),
)
def test_same_objects_is_identity_at_every_index(
    length: int, where: float, how: str | None, as_list: bool
) -> None:
    known = tuple(range(1000, 1000 + length))
    items: list[object] = list(known)
    if how is not None and length:
        index = int(where * length)
        items[index] = _replaced(known[index], how)
    given_items = items if as_list else tuple(items)
    expected = all(a is b for a, b in zip(given_items, known, strict=True))
    assert same_objects(given_items, known) is expected
    assert same_objects([*given_items, 5], known) is False  # a length apart
    if length:
        assert same_objects(given_items[:-1], known) is False


@given(
    length=st.integers(0, 200),
    extra=st.integers(0, 3),
    where=st.floats(0, 1, exclude_max=True),
    how=st.none() | _REPLACEMENTS,
)
def test_starts_with_same_objects_is_identity_over_the_prefix(
    length: int, extra: int, where: float, how: str | None
) -> None:
    prefix = tuple(range(1000, 1000 + length))
    items: list[object] = [*prefix, *range(5000, 5000 + extra)]
    if how is not None and length:
        index = int(where * length)
        items[index] = _replaced(prefix[index], how)
    expected = all(a is b for a, b in zip(items, prefix, strict=False))
    assert starts_with_same_objects(tuple(items), prefix) is expected
    assert starts_with_same_objects(prefix[:-1] if prefix else (), prefix) is (not prefix)


class _Tokens(list[int]):
    """A list subclass, whose items the walk reads through its own ``__iter__``."""


def test_a_list_subclass_is_walked() -> None:
    known = tuple(range(1000, 1100))
    assert same_objects(_Tokens(known), known)
    changed = _Tokens(known)
    changed[50] = int("1050")
    assert not same_objects(changed, known)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the walk elsewhere")
def test_cpython_compares_long_sequences_in_one_call() -> None:
    """The memory comparison is what runs for a long sequence here (else the properties above
    tested only the walk)."""
    assert module._memcmp is not None
    calls: list[tuple[int, int, int]] = []
    real = module._memcmp

    def counting(left: int, right: int, size: int) -> int:
        calls.append((left, right, size))
        return real(left, right, size)

    known = tuple(range(1000, 1100))
    module._memcmp = counting
    try:
        assert same_objects(list(known), known)
        assert starts_with_same_objects((*known, 7), known)
    finally:
        module._memcmp = real
    assert [size for _, _, size in calls] == [100 * tuple.__itemsize__] * 2
