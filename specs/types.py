"""Plain value types shared by every layer."""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeAlias

BlockId: TypeAlias = int
Token: TypeAlias = int
BlockHash: TypeAlias = bytes
CopyPair: TypeAlias = tuple[BlockId, BlockId]
"""(source, destination) of a block copy: copy-on-write or swap."""

NEVER_ACCESSED: float = -1.0
"""Last-access time of a block nobody has marked accessed (as in vLLM)."""

MAX_TOKEN: int = 2**63 - 1


class Device(enum.Enum):
    """Where a pool's blocks live: a manager has one pool on each, and swap moves blocks between
    them."""

    GPU = "gpu"
    CPU = "cpu"

    __hash__ = object.__hash__
    """A member is its own only equal (an enum compares by identity), so the identity's hash
    serves: every lockstep step keys dicts by device hundreds of times, and ``Enum``'s own hash
    (of the member's name) is a Python call each time. (No code reads the order of a set of
    devices: with the name's hash it already changed from one process to the next.)"""


class AllocStatus(enum.Enum):
    """Answer of the ``can_*`` questions (vLLM's AllocStatus)."""

    OK = "ok"
    LATER = "later"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class ExtraKey:
    """What besides the tokens decides whether two blocks may share KV.

    Two requests with different LoRA adapters or different cache salts never share a cached block.
    """

    lora_id: int | None = None
    cache_salt: str | None = None


NO_EXTRA_KEY = ExtraKey()


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """Configuration of one device's block pool; validated by ``specs.validation``."""

    num_blocks: int
    block_size: int
    enable_caching: bool = True
    first_id: int = 0
    """Ids are ``first_id .. first_id + num_blocks - 1`` so that the pools of two devices never
    share an id."""

    @property
    def block_ids(self) -> range:
        return range(self.first_id, self.first_id + self.num_blocks)


def is_time(now: object) -> bool:
    """A usable ``now``: a finite, non-negative real number."""
    if not isinstance(now, int | float) or isinstance(now, bool):
        return False
    try:
        return math.isfinite(now) and now >= 0
    except OverflowError:  # an int too large for a float
        return False


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """Configuration of a block space manager: a GPU pool, a CPU pool, and the policies over them.

    GPU ids are ``0 .. num_gpu_blocks - 1`` and CPU ids follow them, so that no id names blocks on
    both devices. With a sliding window, GPU block 0 is the reserved null block.
    """

    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    watermark: float = 0.01
    sliding_window: int | None = None
    enable_caching: bool = False

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_gpu_blocks)

    def pool_config(self, device: Device) -> PoolConfig:
        if device is Device.GPU:
            return PoolConfig(self.num_gpu_blocks, self.block_size, self.enable_caching, 0)
        return PoolConfig(
            self.num_cpu_blocks, self.block_size, self.enable_caching, self.num_gpu_blocks
        )


DEFRAG_THRESHOLD: int = 32
"""The default slack before a defragmenter acts (seed 003's ``VLLM_DEFRAG_THRESHOLD``)."""

DEFRAG_PAD_SIZES: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512)
"""The batch sizes an exchange is padded to; the largest caps the pairs of one defragmentation."""

TableKey: TypeAlias = Hashable
"""Whose block table the defragmenter is told about: a request, a sequence, a cross table."""


@dataclass(frozen=True, slots=True)
class DefragConfig:
    """A defragmenter over the ids ``0 .. num_blocks - 1`` of one device (``defragmenter.md``).

    ``reserved`` ids never move, in either direction: block 0 (the null block, or an engine's
    padding block) by default.
    """

    num_blocks: int
    threshold: int = DEFRAG_THRESHOLD
    pad_sizes: tuple[int, ...] = DEFRAG_PAD_SIZES
    reserved: frozenset[BlockId] = frozenset({0})

    @property
    def max_pairs(self) -> int:
        """The cap on one defragmentation's exchanges: the largest padded batch."""
        return max(self.pad_sizes)
