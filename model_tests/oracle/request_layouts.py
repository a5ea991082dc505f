"""The group layouts a request-level check covers, as ``--groups`` and a ``--known`` file's
``config.groups`` name them: ``full`` (one full-attention group), ``window`` (one
sliding-window group) and ``hybrid`` (both over one pool, as a model mixing the two kinds of
layer has)."""

from __future__ import annotations

from collections.abc import Iterable

from pagedkv.model_tests.machines.request_draws import GROUP_KINDS, GroupKind
from pagedkv.specs.request_types import AttentionKind, KVGroup, RequestConfig

LAYOUTS: tuple[GroupKind, ...] = GROUP_KINDS
"""The group layouts a check covers: ``full`` (one full-attention group), ``window`` (one
sliding-window group), ``hybrid`` (both, over one pool)."""


def layout_of(config: RequestConfig) -> GroupKind:
    """Which layout a configuration's groups are."""
    return layout_of_groups(config.groups)


def layout_of_groups(groups: Iterable[KVGroup]) -> GroupKind:
    """Which layout ``groups`` are."""
    kinds = {group.kind for group in groups}
    if kinds == {AttentionKind.FULL}:
        return "full"
    if kinds == {AttentionKind.SLIDING_WINDOW}:
        return "window"
    return "hybrid"


def parse_layouts(text: str) -> tuple[GroupKind, ...]:
    """``full,hybrid`` -> the layouts, in their order; ValueError naming a wrong one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    wrong = [name for name in names if name not in LAYOUTS]
    if wrong or not names:
        raise ValueError(
            f"unknown group layout {', '.join(wrong) or repr(text)} (known: {', '.join(LAYOUTS)})"
        )
    return tuple(layout for layout in LAYOUTS if layout in names)
