"""What the defrag machine draws: small defragmenters (``specs/defragmenter.md`` §2) whose
trigger fires often, whose cap binds often, and whose reserved ids are none, the null block, or
more; and the misuses whose refusal the level checks."""

from __future__ import annotations

from hypothesis import strategies as st

from pagedkv.specs.types import DefragConfig


@st.composite
def defrag_configs(draw: st.DrawFn) -> DefragConfig:
    """``num_blocks`` 1..12, ``threshold`` 0..3, one to three pad sizes up to 8 (so that one
    run's cap is often below the blocks to move), reserved none, ``{0}`` or ``{0, k}``."""
    num_blocks = draw(st.integers(1, 12), label="num_blocks")
    threshold = draw(st.integers(0, 3), label="threshold")
    pad_sizes = draw(
        st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True).map(sorted),
        label="pad_sizes",
    )
    reserved = draw(st.sampled_from(["null", "null", "none", "more"]), label="reserved ids")
    ids: set[int] = set()
    if reserved != "none":
        ids.add(0)
    if reserved == "more" and num_blocks > 1:
        ids.add(draw(st.integers(1, num_blocks - 1), label="another reserved id"))
    return DefragConfig(num_blocks, threshold, tuple(pad_sizes), frozenset(ids))


MISUSES: tuple[str, ...] = (
    "changed not a mapping",
    "table not a sequence",
    "id not an int",
    "foreign id",
    "finished not a collection",
    "unhashable finished key",
    "changed and finished",
    "unknown finished key",
    "finished twice",
    "resolve not an int",
    "resolve foreign id",
    "unresolve foreign id",
    "resolve_all foreign id",
    "resolve_all not tables",
)
"""Calls a defragmenter must refuse with its typed error, changing nothing (§3's checks)."""
