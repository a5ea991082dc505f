"""The frozen state of one device's block pool, and the facts derived from it.

Only what cannot be derived is stored: each block's view, the hash index, the pending
copy-on-write pairs and the hit counters. Which blocks are free, evictable or used follows from
the ref counts and hashes, so it is computed, never kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from immutables import Map

from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.pool_view import BLANK, BlockView, PoolView
from pagedkv.specs.types import BlockHash, BlockId, CopyPair, PoolConfig
from pagedkv.specs.validation import BlockFacts, check_known, check_live


@dataclass(frozen=True, slots=True)
class PoolState:
    config: PoolConfig
    blocks: Map[BlockId, BlockView]
    cached: Map[BlockHash, BlockId]
    pending_cows: tuple[CopyPair, ...] = ()
    hits: int = 0
    queries: int = 0
    policy: Policy = PAGEDKV
    """The choices this pool makes where correct pools differ (``specs/policy.md``)."""
    promoted: frozenset[BlockId] = frozenset()
    """Blocks hashed since the last ``mark_computed`` (policy ``computed_marks=promoted_batch``:
    the next mark makes them computed, whatever blocks it names)."""
    duplicates: Map[BlockHash, tuple[BlockId, ...]] = field(default_factory=Map)
    """Second holders of a cached hash, oldest first (policy ``promotion=keep``)."""
    released: Map[BlockId, int] = field(default_factory=Map)
    """When each evictable block was given back (policy ``eviction=release_order``), or each
    block nobody holds (``eviction=free_list``)."""
    release_clock: int = 0
    null_block: BlockId | None = None
    """The block the pool keeps for itself (policy ``pool_null_block``)."""


def new_state(config: PoolConfig, policy: Policy = PAGEDKV) -> PoolState:
    return PoolState(config, Map({b: BLANK for b in config.block_ids}), Map(), policy=policy)


def is_free(view: BlockView) -> bool:
    return view.ref_count == 0 and view.content_hash is None


def is_evictable(view: BlockView) -> bool:
    return view.ref_count == 0 and view.content_hash is not None


def is_computed(state: PoolState, block: BlockId) -> bool:
    """Whether the block's KV counts as written: its mark (pool §8). vLLM 0.6.3 also counts
    every evictable block as computed (policy ``computed_marks=promoted_batch``), but only held
    blocks are ever asked about, and a hit that takes one back marks it (``_take_cached``)."""
    return state.blocks[block].computed


def free_ids(state: PoolState) -> frozenset[BlockId]:
    return frozenset(b for b, view in state.blocks.items() if is_free(view))


def evictable_ids(state: PoolState) -> frozenset[BlockId]:
    return frozenset(b for b, view in state.blocks.items() if is_evictable(view))


def callers_count(state: PoolState, block: BlockId) -> int:
    """The references callers hold: the pool's own null block (policy ``pool_null_block``) is
    held by the pool, never by a caller, so to callers it is not allocated."""
    return 0 if block == state.null_block else state.blocks[block].ref_count


def facts(state: PoolState, block: BlockId) -> BlockFacts:
    """What the shared checks of ``pagedkv.specs.validation`` read of a block."""
    view = state.blocks[block]
    return BlockFacts(callers_count(state, block), view.content_hash is not None, len(view.tokens))


def live_block(state: PoolState, block: BlockId) -> BlockView:
    """The view of a block somebody holds; a free or merely cached block is an error here."""
    check_live(block, facts(state, block))
    return state.blocks[block]


def known_block(state: PoolState, block: BlockId) -> BlockView:
    """The view of a block that is held or cached (both have meaningful contents)."""
    check_known(block, facts(state, block))
    return state.blocks[block]


def with_block(state: PoolState, block: BlockId, view: BlockView) -> PoolState:
    """``state`` with one block's view changed. Written out field by field rather than with
    ``dataclasses.replace``: every operation changes blocks through here, and ``replace``
    costs several times a plain construction (``test_reference_states`` compares the two)."""
    return PoolState(
        config=state.config,
        blocks=state.blocks.set(block, view),
        cached=state.cached,
        pending_cows=state.pending_cows,
        hits=state.hits,
        queries=state.queries,
        policy=state.policy,
        promoted=state.promoted,
        duplicates=state.duplicates,
        released=state.released,
        release_clock=state.release_clock,
        null_block=state.null_block,
    )


def counted(view: BlockView, ref_count: int) -> BlockView:
    """``view`` with another ref count: every reference taken or given back changes one."""
    return _with_numbers(view, ref_count, view.last_accessed)


def accessed(view: BlockView, time: float) -> BlockView:
    """``view`` with another last access: every access of a sequence changes each of its
    blocks."""
    return _with_numbers(view, view.ref_count, time)


def _with_numbers(view: BlockView, ref_count: int, last_accessed: float) -> BlockView:
    """Written out field by field as ``with_block`` is, rather than with ``dataclasses.replace``
    (``test_reference_states`` compares the two)."""
    return BlockView(
        ref_count=ref_count,
        tokens=view.tokens,
        content_hash=view.content_hash,
        prefix=view.prefix,
        computed=view.computed,
        last_accessed=last_accessed,
    )


def to_view(state: PoolState) -> PoolView:
    return PoolView(
        config=state.config,
        blocks=dict(state.blocks),
        free=free_ids(state),
        evictable=evictable_ids(state),
        cached=dict(state.cached),
        duplicates=dict(state.duplicates),
        pending_cows=state.pending_cows,
        hits=state.hits,
        queries=state.queries,
    )
