"""The observable state of a request-level manager: what the invariants, the lockstep sessions
and the teaching views read (``specs/request_level.md``).

Picture (block size 4, two groups: full attention, and a window of 8 tokens; request ``a`` has
computed 13 tokens, so its window group's first block slid out and points at the null block)::

    ids:        0     1   2   3   4   5   6   7   8   9
    owner:     null   a0  a1  a2  a3  .   w1  w2  w3  .      (a* / w*: a's full / window blocks)
    free queue (front = taken next):  5, 9, ...  then cached ones at the back, oldest first

    requests["a"].blocks == ((1, 2, 3, 4), (0, 6, 7, 8))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pagedkv.specs.request_types import RequestConfig, RequestId
from pagedkv.specs.types import BlockHash, BlockId


@dataclass(frozen=True, slots=True)
class CachedKey:
    """Where a cached block can be found: its chained hash within one group."""

    group: int
    block_hash: BlockHash


@dataclass(frozen=True, slots=True)
class RequestBlockView:
    """One block of the pool (never the null block)."""

    ref_count: int
    """How many request tables hold it (a table holds a block at most once)."""
    cached: CachedKey | None
    """The key it is cached under, or ``None``: its KV may be reused by a hit only when set."""


@dataclass(frozen=True, slots=True)
class RequestTableView:
    """One request's blocks, per group: ``blocks[g][i]`` holds tokens ``i*B .. (i+1)*B - 1`` of
    group ``g`` (``NULL_BLOCK`` where the group holds none)."""

    blocks: tuple[tuple[BlockId, ...], ...]
    num_cached_blocks: tuple[int, ...]
    """Per group, how many leading full blocks the manager has cached for this request."""


@dataclass(frozen=True, slots=True)
class RequestManagerView:
    config: RequestConfig
    blocks: Mapping[BlockId, RequestBlockView]
    """Every id but ``NULL_BLOCK``."""
    free_queue: tuple[BlockId, ...]
    """The blocks no request holds, front first: allocation takes from the front, and a cached
    block taken there is evicted (its key forgotten) on the way."""
    requests: Mapping[RequestId, RequestTableView]

    def comparable(self) -> tuple[object, ...]:
        return (self.config, dict(self.blocks), self.free_queue, dict(self.requests))
