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
    """``full,hybrid`` -> the layouts, in their order; ValueError naming a wrong one, an empty
    one (``,full``: a typo, not a choice) or one given twice."""
    names = [name.strip() for name in text.split(",")]
    known = f"(known: {', '.join(LAYOUTS)})"
    if "" in names:
        raise ValueError(f"an empty group layout in {text!r} {known}")
    wrong = [name for name in names if name not in LAYOUTS]
    if wrong:
        raise ValueError(f"unknown group layout {', '.join(wrong)} {known}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"group layout {', '.join(twice)} given twice in {text!r}")
    return tuple(layout for layout in LAYOUTS if layout in names)
