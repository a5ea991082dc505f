"""The reference pool behind the mutable ``pagedkv.specs.interface.BlockPool`` face.

It holds one frozen ``PoolState`` and replaces it after each operation, so the lockstep tests can
drive the reference and any other pool through the same calls. The ``choice`` arguments let the
oracle replay another implementation's allowed choices. Every change of the state publishes
the KV events of what the hash index gained and lost (``pool_events.py``), drained by
``take_events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference import block_pool as ops
from pagedkv.reference import pool_batches
from pagedkv.reference.offered import offered, refuse_lacking
from pagedkv.reference.pool_events import cleared, index_events
from pagedkv.reference.pool_state import PoolState, to_view
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.pool_view import BlockView, PoolView
from pagedkv.specs.request_types import KVEvent
from pagedkv.specs.types import BlockHash, BlockId, CopyPair, PoolConfig, Token
from pagedkv.specs.validation import check_block_id, check_content_hash


class ReferenceBlockPool:
    atomic = True
    """Every failed call changes nothing (``specs/safety.md`` S6)."""

    def __init__(self, config: PoolConfig, policy: Policy = PAGEDKV) -> None:
        self._state: PoolState = ops.create(config, policy)
        refuse_lacking(self, policy)
        self._events: list[KVEvent] = []

    @property
    def state(self) -> PoolState:
        return self._state

    @state.setter
    def state(self, new: PoolState) -> None:
        """Whatever replaces the state (an operation, or a wrong variant's own edit) publishes
        what the index gained and lost (into a new list: a shallow copy of the pool, as the
        teaching walkthrough makes, must not publish into the original's)."""
        self._events = self._events + index_events(self._state, new)
        self._state = new

    def take_events(self) -> list[KVEvent]:
        """The events published since the last call, oldest first (``block_pool.md`` §9)."""
        events, self._events = self._events, []
        return events

    @property
    def config(self) -> PoolConfig:
        return self.state.config

    @property
    def policy(self) -> Policy:
        return self.state.policy

    def get_null_block(self) -> BlockId | None:
        """The block the pool keeps for itself (policy ``pool_null_block``), if any."""
        return self.state.null_block

    @offered
    def allocate_mutable(self, choice: BlockId | None = None) -> BlockId:
        self.state, block = ops.allocate_mutable(self.state, choice)
        return block

    @offered
    def allocate_immutable(
        self, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        self.state, block = ops.allocate_immutable(self.state, prefix, tokens, choice)
        return block

    @offered
    def append_tokens(
        self,
        block: BlockId,
        prefix: Prefix,
        tokens: Sequence[Token],
        choice: BlockId | None = None,
    ) -> BlockId:
        self.state, block = ops.append_tokens(self.state, block, prefix, tokens, choice)
        return block

    @offered
    def free(self, block: BlockId) -> None:
        self.state = ops.free(self.state, block)

    @offered
    def allocate_immutable_chain(
        self, prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
    ) -> list[BlockId]:
        """``allocate_immutable`` of each block in turn, all or nothing (``pool_batches.py``)."""
        trail, blocks = pool_batches.allocate_immutable_chain(self.state, prefix, token_blocks)
        self._follow(trail)
        return blocks

    @offered
    def free_blocks(self, blocks: Sequence[BlockId]) -> None:
        """``free`` of each block in the order given, all or nothing (``pool_batches.py``)."""
        self._follow(pool_batches.free_blocks(self.state, blocks))

    def _follow(self, trail: list[PoolState]) -> None:
        """Keep a batch's states one after the other, each publishing its item's events."""
        for state in trail:
            self.state = state

    @offered
    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        self.state, blocks = ops.fork(self.state, chain)
        return blocks

    @offered
    def cow_if_not_appendable(self, block: BlockId, choice: BlockId | None = None) -> BlockId:
        self.state, block = ops.cow_if_not_appendable(self.state, block, choice)
        return block

    @offered
    def clear_copy_on_writes(self) -> list[CopyPair]:
        self.state, pairs = ops.clear_copy_on_writes(self.state)
        return pairs

    @offered
    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        self.state = ops.mark_accessed(self.state, blocks, now)

    @offered
    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        self.state = ops.mark_computed(self.state, blocks)

    @offered
    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
        return ops.common_computed_prefix(self.state, chains)

    @offered
    def num_free_blocks(self) -> int:
        return ops.num_free_blocks(self.state)

    @offered
    def hit_rate(self) -> float:
        return ops.hit_rate(self.state)

    @offered
    def reset_prefix_cache(self) -> bool:
        new, done = ops.reset_prefix_cache(self.state)
        if done:
            self._events = self._events + cleared()
            self._state = new
        return done

    def block(self, block: BlockId) -> BlockView:
        return self.state.blocks[check_block_id(self.state.config, block)]

    def lookup(self, content_hash: BlockHash) -> BlockId | None:
        return self.state.cached.get(check_content_hash(content_hash))

    def view(self) -> PoolView:
        return to_view(self.state)
