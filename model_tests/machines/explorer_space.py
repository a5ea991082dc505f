"""The explorer's state space: the tiny configurations it visits, and every step a scheduler
could take from a state (``explorer.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import NEVER_ACCESSED, Device, ManagerConfig, Token

TOKENS: tuple[Token, ...] = (0, 1)
MAX_SEQS = 2

Step = tuple[Any, ...]
"""``(kind, *arguments)``: one step of the scheduler, replayable by ``apply``."""


def scopes(kind: str = "full") -> list[ManagerConfig]:
    """The tiny configurations: every combination for ``full``, four corners for ``quick``."""
    if kind == "quick":
        return [
            ManagerConfig(1, 2, 2, 0.0, None, False),
            ManagerConfig(2, 3, 2, 0.0, None, True),
            ManagerConfig(1, 3, 2, 0.0, 2, True),
            ManagerConfig(2, 3, 3, 0.0, 2, False),
        ]
    return [
        ManagerConfig(block_size, blocks, blocks, 0.0, window, caching)
        for block_size, blocks, window, caching in itertools.product(
            (1, 2), (2, 3, 4), (None, 2), (False, True)
        )
    ]


def prompts(config: ManagerConfig) -> list[tuple[Token, ...]]:
    """Every prompt over the alphabet up to one token past a block (so a block fills)."""
    longest = config.block_size + 1
    return [p for n in range(1, longest + 1) for p in itertools.product(TOKENS, repeat=n)]


def clock(view: ManagerView) -> float:
    """The latest access time any block holds (0 before any)."""
    times = [
        v.last_accessed
        for device in Device
        for v in view.pool(device).blocks.values()
        if v.last_accessed != NEVER_ACCESSED
    ]
    return max(times, default=0.0)


def steps(view: ManagerView) -> Iterator[Step]:
    """Every step the scheduler could take from ``view``. A group of two sequences is allocated
    with prompts of one repeated token only (fork makes the others)."""
    seq_ids = sorted(view.seqs)
    free_seq_ids = [s for s in range(1, MAX_SEQS + 1) if s not in view.seqs]
    free_group_ids = [g for g in range(1, MAX_SEQS + 1) if g not in view.groups]
    if free_seq_ids:
        for prompt in prompts(view.config):
            yield ("allocate", free_group_ids[0], (free_seq_ids[0],), prompt)
            if len(free_seq_ids) == MAX_SEQS and set(prompt) == {TOKENS[0]}:
                yield ("allocate", free_group_ids[0], tuple(free_seq_ids), prompt)
        for parent in seq_ids:
            yield ("fork", parent, free_seq_ids[0])
    now = clock(view)
    for seq_id in seq_ids:
        for token in TOKENS:
            yield ("append", seq_id, (token,), 0)
        yield ("append", seq_id, (), 1)
        yield ("free", seq_id)
        yield ("access", seq_id, now)
        yield ("access", seq_id, now + 1.0)
    for group_id in sorted(view.groups):
        yield ("swap_out", group_id)
        yield ("swap_in", group_id)
        yield ("mark_computed", group_id)
    yield ("reset",)
