"""The reference's hottest state changes are written out field by field (``with_block``,
``with_pool``, ``counted``, ``accessed``) instead of ``dataclasses.replace``: each must keep every
field but the one it changes, including any field added later (each field holds its own marker
here, so a field the constructor forgets comes back as its default and fails)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from immutables import Map

from pagedkv.reference.manager_state import ManagerState, with_pool
from pagedkv.reference.pool_state import PoolState, accessed, counted, with_block
from pagedkv.specs.pool_view import BLANK, BlockView
from pagedkv.specs.types import Device


def _marked(cls: type[Any], **given: Any) -> Any:
    """An instance of ``cls`` whose every field not ``given`` holds a marker of its own."""
    values = {f.name: given.get(f.name, object()) for f in fields(cls)}
    return cls(**values)


def _kept_but(old: Any, new: Any, changed: str) -> list[str]:
    return [
        f.name
        for f in fields(old)
        if f.name != changed and getattr(new, f.name) is not getattr(old, f.name)
    ]


def test_with_block_keeps_every_other_field() -> None:
    state = _marked(PoolState, blocks=Map({0: BLANK}))
    view = BLANK.__class__(ref_count=1)
    changed = with_block(state, 0, view)
    assert changed.blocks == Map({0: view})
    assert _kept_but(state, changed, "blocks") == []


@pytest.mark.parametrize("device", [Device.GPU, Device.CPU])
def test_with_pool_keeps_every_other_field(device: Device) -> None:
    state = _marked(ManagerState)
    new_pool = object()
    changed = with_pool(state, device, new_pool)  # type: ignore[arg-type]
    name = "gpu" if device is Device.GPU else "cpu"
    assert getattr(changed, name) is new_pool
    assert _kept_but(state, changed, name) == []


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [(counted, "ref_count", 3), (accessed, "last_accessed", 7.5)],
)
def test_a_block_view_change_keeps_every_other_field(change: Any, field: str, value: Any) -> None:
    view = _marked(BlockView)
    changed = change(view, value)
    assert getattr(changed, field) == value
    assert _kept_but(view, changed, field) == []
