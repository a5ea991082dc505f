"""Plain value types shared by every layer."""

from __future__ import annotations

import enum
import math
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
    GPU = "gpu"
    CPU = "cpu"


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
