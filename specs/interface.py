"""The interfaces both implementations satisfy (the mutable face of the reference): the block
pool, the block space manager, the request-level manager and the defragmenter.

See ``specs/block_pool.md``, ``specs/block_manager.md``, ``specs/request_level.md`` and
``specs/defragmenter.md`` for each
operation's pre-conditions, post-conditions and errors. Results are of exactly the annotated
types (``int`` itself, not a float, a numpy scalar or a subclass), and a returned list never
turns into another answer: a query's may follow the state it describes, an action's never
changes (``specs/block_manager.md`` §5.3, ``specs/oracle.md`` §1).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.pool_view import BlockView, PoolView
from pagedkv.specs.request_types import GroupBlocks, KVEvent, Request, RequestConfig, RequestId
from pagedkv.specs.request_view import RequestManagerView
from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockHash,
    BlockId,
    CopyPair,
    DefragConfig,
    Device,
    ExtraKey,
    ManagerConfig,
    PoolConfig,
    TableKey,
    Token,
)


class BlockPool(Protocol):
    """The blocks of one device: ref counts, free list, and with caching the hash index."""

    @property
    def config(self) -> PoolConfig: ...

    def allocate_mutable(self) -> BlockId: ...

    def allocate_immutable(self, prefix: Prefix, tokens: Sequence[Token]) -> BlockId: ...

    def append_tokens(self, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> BlockId: ...

    def free(self, block: BlockId) -> None: ...

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]: ...

    def cow_if_not_appendable(self, block: BlockId) -> BlockId: ...

    def clear_copy_on_writes(self) -> list[CopyPair]: ...

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None: ...

    def mark_computed(self, blocks: Sequence[BlockId]) -> None: ...

    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]: ...

    def num_free_blocks(self) -> int: ...

    def hit_rate(self) -> float: ...

    def reset_prefix_cache(self) -> bool: ...

    def block(self, block: BlockId) -> BlockView: ...

    def lookup(self, content_hash: BlockHash) -> BlockId | None:
        """The block cached under ``content_hash``, if any (a swap asks before it copies)."""
        ...

    def view(self) -> PoolView: ...


class PoolEvents(Protocol):
    """The one optional member of a pool: the KV events it published since the last call
    (``specs/block_pool.md`` §9). A pool without it is checked as before; one with it is held to
    what its events tell a router."""

    def take_events(self) -> list[KVEvent]: ...


@runtime_checkable
class PoolChainAllocation(Protocol):
    """An optional member of a pool (``specs/block_pool.md`` §5, batches): a prompt's full blocks
    in one call, as vLLM v1's pool takes them. Exactly ``allocate_immutable`` for each block in
    turn, each after the prefix extended by the blocks before it, all or nothing. A pool without
    it gets those single calls."""

    def allocate_immutable_chain(
        self, prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
    ) -> list[BlockId]: ...


@runtime_checkable
class PoolBatchFree(Protocol):
    """An optional member of a pool (``specs/block_pool.md`` §5, batches): a sequence's blocks
    given back in one call, as vLLM v1's ``free_blocks``. Exactly ``free`` of each block in the
    order given, all or nothing. A pool without it gets those single calls."""

    def free_blocks(self, blocks: Sequence[BlockId]) -> None: ...


class BlockPoolFactory(Protocol):
    """What ``pagedkv check --level pool`` calls with each configuration it tries: a new, empty pool
    (or ``UnsupportedError`` for a configuration the target does not support)."""

    def __call__(self, config: PoolConfig) -> BlockPool: ...


class BlockSpaceManager(Protocol):
    """What a scheduler asks of the KV cache, over plain sequence ids, group ids and token lists
    (no engine-specific objects): the protocol the oracle drives other engines through. See
    ``specs/block_manager.md``."""

    @property
    def config(self) -> ManagerConfig: ...

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus: ...

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None: ...

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool: ...

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]: ...

    def fork(self, parent_id: int, child_id: int) -> None: ...

    def free(self, seq_id: int) -> None: ...

    def can_swap_out(self, group_id: int) -> AllocStatus: ...

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus: ...

    def swap_out(self, group_id: int) -> list[CopyPair]: ...

    def swap_in(self, group_id: int) -> list[CopyPair]: ...

    def get_block_table(self, seq_id: int) -> list[BlockId]: ...

    def get_cross_block_table(self, group_id: int) -> list[BlockId]: ...

    def get_num_free_gpu_blocks(self) -> int: ...

    def get_num_free_cpu_blocks(self) -> int: ...

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None: ...

    def mark_blocks_as_computed(self, group_id: int) -> None: ...

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]: ...

    def get_num_cached_tokens(self, seq_id: int) -> int: ...

    def get_prefix_cache_hit_rate(self, device: Device) -> float: ...

    def reset_prefix_cache(self, device: Device | None = None) -> bool: ...

    def view(self) -> ManagerView: ...


class BlockSpaceManagerFactory(Protocol):
    """What ``pagedkv check --target`` calls with each configuration it tries: a new, empty manager
    (or ``UnsupportedError`` for a configuration the target does not support)."""

    def __call__(self, config: ManagerConfig) -> BlockSpaceManager: ...


class RequestKVManager(Protocol):
    """What a v1-style scheduler asks of the KV cache per request (vLLM v1's ``KVCacheManager``
    call for call, over plain values): see ``specs/request_level.md``. The caller owns each
    ``Request`` and passes it as it stands; the manager owns the blocks."""

    @property
    def config(self) -> RequestConfig: ...

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        """The longest cached prefix every group can serve, in full blocks, at most
        ``request.num_tokens - 1`` tokens: its blocks per group and its length in tokens. Changes
        nothing (the hit is taken by ``allocate_slots``)."""
        ...

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        """Slots for ``num_new_tokens`` (committed and draft) plus lookahead after the request's
        computed tokens and a hit just found; the new blocks per group, or ``None`` when they do
        not fit (then only blocks that left a sliding window may have been released)."""
        ...

    def free(self, request_id: RequestId) -> None:
        """A request that finished or was aborted (vLLM's scheduler frees a preempted one the
        same way: a target without ``preempt`` gets ``free`` for a preemption too)."""
        ...

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks: ...

    def num_free_blocks(self) -> int: ...

    def usage(self) -> float: ...

    def reset_prefix_cache(self) -> bool: ...

    def take_events(self) -> list[KVEvent]: ...

    def view(self) -> RequestManagerView: ...


@runtime_checkable
class RequestPreemption(Protocol):
    """The one optional operation of the request level (``specs/request_level.md`` §5): a
    preempted request's blocks given back, as ``free`` gives them, but nothing it computed is
    cached for it (SGLang's retract, ``specs/radix_cache.md`` §3). A target without it gets
    ``free`` in its place."""

    def preempt(self, request_id: RequestId) -> None: ...


class RequestKVManagerFactory(Protocol):
    def __call__(self, config: RequestConfig) -> RequestKVManager: ...


class Defragmenter(Protocol):
    """A logical -> physical map under one device's block tables (``specs/defragmenter.md``)."""

    @property
    def config(self) -> DefragConfig: ...

    def update_state(
        self, changed: Mapping[TableKey, Sequence[BlockId]], finished: Collection[TableKey]
    ) -> None: ...

    def defragment(self) -> list[CopyPair]: ...

    def resolve(self, block: BlockId) -> BlockId: ...

    def resolve_all(self, tables: Sequence[Sequence[BlockId]]) -> list[list[BlockId]]: ...

    def unresolve(self, physical: BlockId) -> BlockId: ...

    def view(self) -> DefragmenterView: ...
