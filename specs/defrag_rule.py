"""The defragmenter's arithmetic (``specs/defragmenter.md`` §3): when it acts, how far one run
goes, and what the used ids must look like afterwards.

Both implementations decide with ``should_defragment``; the checks compare what an
implementation did with ``compacted`` and ``minimum_exchanges``, which are set arithmetic and
share nothing with either implementation's pairing loop. ``padded_size`` is the batch the exchange
kernel runs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pagedkv.specs.types import BlockId, DefragConfig


def should_defragment(max_used: int, num_used: int, threshold: int) -> bool:
    """Seed 003's trigger: the highest used id lies more than ``threshold`` past the number of
    used ids (every used id counts here, reserved ones too)."""
    return max_used - threshold > num_used


def triggered(config: DefragConfig, used: Collection[BlockId]) -> bool:
    """Whether a defragmentation over ``used`` (the physical ids with references) acts."""
    return bool(used) and should_defragment(max(used), len(used), config.threshold)


def padded_size(count: int, pad_sizes: Sequence[int]) -> int:
    """The smallest pad size that holds ``count`` pairs (``count`` is at most the largest)."""
    return min(size for size in pad_sizes if size >= count)


def compaction_target(config: DefragConfig, count: int) -> list[BlockId]:
    """The ``count`` lowest ids that may move: where ``count`` movable used blocks belong."""
    movable = (b for b in range(config.num_blocks) if b not in config.reserved)
    return [b for b, _ in zip(movable, range(count), strict=False)]


def misplaced(
    config: DefragConfig, used: Collection[BlockId]
) -> tuple[list[BlockId], list[BlockId]]:
    """(movable used ids outside the target, highest first; target ids not used, lowest first).

    The two lists have the same length: each exchange of the minimum pairs one with the other.
    """
    movable_used = {b for b in used if b not in config.reserved}
    target = compaction_target(config, len(movable_used))
    outside = sorted(movable_used.difference(target), reverse=True)
    holes = sorted(set(target).difference(movable_used))
    return outside, holes


def minimum_exchanges(config: DefragConfig, used: Collection[BlockId]) -> int:
    """How many exchanges a triggered run makes: every misplaced block, up to the cap. Fewer
    cannot reach ``compacted``, since an exchange brings one used block into a new id."""
    outside, _ = misplaced(config, used)
    return min(len(outside), config.max_pairs)


def compacted(config: DefragConfig, used: Collection[BlockId]) -> frozenset[BlockId]:
    """The used ids after a triggered run: the highest misplaced blocks, as many as the cap
    allows, moved into the lowest holes; reserved ids stay where they are."""
    outside, holes = misplaced(config, used)
    count = minimum_exchanges(config, used)
    return frozenset(used).difference(outside[:count]).union(holes[:count])
