"""The strategies the machines draw from inside their rules, made once.

A rule that draws interactively (``data.draw``) with a strategy it builds on the spot pays for
building and validating that strategy at every draw, which costs more than the draw itself. The
same strategy built once draws the same choices (Hypothesis draws by a strategy's shape, not its
identity), so seeds and shrinking are as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any

from hypothesis import strategies as st

FOLLOW_TEMPLATE = st.sampled_from([True, True, True, False])
"""Whether new tokens follow the shared template (prefixes repeat: hits, dedup)."""

SAMPLE = st.sampled_from([False] * 5 + [True])
"""Whether a decoding sequence forks (parallel sampling)."""

BOOLEANS = st.booleans()


@cache
def integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@cache
def small_tokens(count: int, high: int) -> st.SearchStrategy[list[int]]:
    """``count`` tokens in ``0 .. high``."""
    return st.lists(integers(0, high), min_size=count, max_size=count)


@cache
def sampled(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """``st.sampled_from`` of a fixed tuple of options."""
    return st.sampled_from(options)


def sampled_list(options: Sequence[int]) -> st.SearchStrategy[int]:
    """``st.sampled_from`` of a list of ids drawn at a step (a group's sequences), made once per
    list of ids: the same strategy as one made at the draw (a list's label is its items' hashes,
    so it is built from a list again, never the tuple it is kept under), without building,
    labelling and validating one at every such draw, which leaves cyclic garbage too."""
    return _sampled_list(tuple(options))


@lru_cache(maxsize=4096)
def _sampled_list(options: tuple[int, ...]) -> st.SearchStrategy[int]:
    return st.sampled_from(list(options))
