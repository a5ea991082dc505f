"""The observable state of a block pool: what the lockstep tests compare and the invariants read.

Both implementations render their state into these values; in exact mode the two renderings must
be equal after every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.types import NEVER_ACCESSED, BlockHash, BlockId, CopyPair, PoolConfig, Token


@dataclass(frozen=True, slots=True)
class BlockView:
    """One physical block. A block on the free list is exactly ``BLANK``."""

    ref_count: int = 0
    tokens: tuple[Token, ...] = ()
    content_hash: BlockHash | None = None
    prefix: Prefix | None = None
    """The prefix the block was hashed under; set exactly when ``content_hash`` is."""
    computed: bool = False
    last_accessed: float = NEVER_ACCESSED

    @property
    def num_hashed_tokens(self) -> int:
        """Tokens from the start of the sequence to the end of this block (0 when unhashed)."""
        if self.prefix is None:
            return 0
        return self.prefix.num_tokens + len(self.tokens)


BLANK = BlockView()


@dataclass(frozen=True, slots=True)
class PoolView:
    """A whole pool. ``free`` and ``evictable`` are what the implementation's own free list and
    evictor hold, so that the invariants can check them against the ref counts."""

    config: PoolConfig
    blocks: Mapping[BlockId, BlockView]
    free: frozenset[BlockId]
    evictable: frozenset[BlockId]
    cached: Mapping[BlockHash, BlockId]
    duplicates: Mapping[BlockHash, tuple[BlockId, ...]] = field(default_factory=dict)
    """Further holders of a cached hash (an append-only policy keeps them, ``specs/policy.md``);
    empty under pagedkv's."""
    pending_cows: tuple[CopyPair, ...] = ()
    hits: int = 0
    queries: int = 0
    used: frozenset[BlockId] = field(init=False)

    def __post_init__(self) -> None:
        used = frozenset(b for b, view in self.blocks.items() if view.ref_count > 0)
        object.__setattr__(self, "used", used)

    def comparable(self) -> tuple[object, ...]:
        """Everything observable, in a form ``==`` compares regardless of mapping types."""
        return (
            self.config,
            dict(self.blocks),
            self.free,
            self.evictable,
            dict(self.cached),
            dict(self.duplicates),
            self.pending_cows,
            self.hits,
            self.queries,
        )
