"""vLLM v1's ``BlockPool`` (the latest release on PyPI) behind pagedkv's ``BlockPool``.

Why the pool level: v1's ``BlockPool`` is the part of its KV-cache manager that owns physical
blocks (ref counts, the free queue that is also the eviction order, the hash → block map, the
null block), and each pool operation of the protocol is one or two of its calls. Its manager
level (``KVCacheManager`` over ``KVCacheCoordinator`` and per-attention-type managers) takes
requests, not sequences and groups, has no swap, fork or copy-on-write, and pulls in most of
the engine's configuration: it does not fit pagedkv's manager protocol.

The adapter plays the part of v1's ``KVCacheManager`` above the pool, and nothing more:

- block ids: v1's ids ``0 .. N-1`` shifted by ``first_id``; v1 takes id 0 as its null block at
  construction, so a pool of ``N`` blocks has ``N - 1`` to give;
- hashes: v1's pool is handed block hashes by its caller (the request's block hasher); the
  adapter hands it pagedkv's chained hash (``Prefix.child_hash``), which carries the extra key;
- ``allocate_immutable``: ``get_cached_block`` (a hit is ``touch``ed) or ``get_new_blocks(1)``
  then ``cache_full_blocks``;
- ``append_tokens``: v1's pool holds no tokens (the request does): the adapter keeps each held
  block's tokens and, when one fills, calls ``cache_full_blocks``: no dedup, the block keeps its
  id even when its hash is cached in another block. A shared block is never written in v1
  (append-only tables, no copy-on-write): appending to one is ``UnsupportedError``;
- ``free``: ``free_blocks([block])`` (unhashed blocks go to the front of the free queue, hashed
  ones to its back: that queue is the eviction order); ``fork``: ``touch`` (v1's only way to add
  a holder); ``clear_copy_on_writes``: ``[]`` (there never are any);
- ``mark_accessed`` and ``mark_computed`` are notifications v1 does not need (no access times; a
  block is cached only once computed): they change nothing;
- argument and ref-count checks are the caller's (``pagedkv.specs.validation``): v1's
``free_blocks``
  itself would take a count below zero.

- KV events: v1's pool is built with ``enable_kv_cache_events`` and ``take_events`` hands over
  what v1 queued (``cache_full_blocks``'s ``BlockStored``, ``_maybe_evict_cached_block``'s
  ``BlockRemoved``, ``reset_prefix_cache``'s ``AllBlocksCleared``), renamed into pagedkv's
  events by the request level's conversion (``vllm_v1_events.py``). v1's pool reads the tokens,
  the parent and the LoRA adapter of a stored block from the request it is handed: the adapter's
  request carries the block's own tokens at its position, the prefix's hash as the hash before
  it, and the extra key's LoRA id and cache salt;

Lacked (``UnsupportedError``): ``cow_if_not_appendable``, ``common_computed_prefix`` (v1 finds
cache hits in its manager), ``hit_rate`` (its prefix-cache statistics live in the manager).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.standins import vllm_v1
from pagedkv.model_tests.peers.standins.vllm_v1_manager import LoRARequest
from pagedkv.model_tests.peers.vllm_v1_events import pagedkv_event
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import DoubleFreeError, OutOfBlocksError, UnsupportedError
from pagedkv.specs.request_types import KVEvent
from pagedkv.specs.types import BlockId, CopyPair, PoolConfig, Token
from pagedkv.specs.validation import (
    BlockFacts,
    check_append,
    check_block_id,
    check_block_ids,
    check_full_block,
    check_known,
    check_live,
    check_pool_config,
    check_prefix,
    check_time,
)

GROUP = 0
"""pagedkv's pool is one KV-cache group."""


def modules() -> dict[str, ModuleType]:
    return sources.load(
        sources.VLLM_V1, vllm_v1.MODULES, ("vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils")
    )


@dataclass(frozen=True)
class Switches:
    """Each switch papers over one known difference (``specs/peers.md``); all off by default."""

    extra_null_block: bool = False
    """Build v1's pool one block larger, so its null block (id 0, taken at construction) does
    not cost one of the configured blocks; ids are then shifted by ``first_id - 1``."""
    dedup_on_promotion: bool = False
    """When an append fills a block whose hash is cached in another block, give the filled block
    back and ``touch`` the cached one, as pagedkv does (v1 keeps both under the hash)."""


class VllmV1Pool:
    """The lacked operations raise ``UnsupportedError``; the ``vllm-v1`` profile names them in
    ``unsupported``, so a check never calls them."""

    atomic = True
    """Each operation takes at most one block, and v1's ``get_new_blocks`` checks the free count
    before it changes anything (the safety tier holds the adapter to this)."""

    def __init__(self, config: PoolConfig, switches: Switches | None = None) -> None:
        check_pool_config(config)
        self._config = config
        self.switches = switches or Switches()
        extra = 1 if self.switches.extra_null_block else 0
        pool_class = modules()["vllm.v1.core.block_pool"].BlockPool
        self._v1: Any = pool_class(
            config.num_blocks + extra,
            config.enable_caching,
            config.block_size,
            enable_kv_cache_events=True,
        )
        self._offset = config.first_id - extra
        self._tokens: dict[BlockId, list[Token]] = {}

    @property
    def config(self) -> PoolConfig:
        return self._config

    def get_null_block(self) -> BlockId | None:
        """v1's null block (its id 0, taken at construction), when it is one of the configured
        blocks (not with the ``extra_null_block`` switch)."""
        return None if self.switches.extra_null_block else self._offset

    # --- ids and facts -------------------------------------------------------------------------

    def _block(self, block: BlockId) -> Any:
        return self._v1.blocks[block - self._offset]

    def _id(self, v1_block: Any) -> BlockId:
        return int(v1_block.block_id) + self._offset

    def _facts(self, block: BlockId) -> BlockFacts:
        v1_block = self._block(block)
        return BlockFacts(
            v1_block.ref_cnt, v1_block.block_hash is not None, len(self._tokens.get(block, ()))
        )

    def _new_block(self) -> Any:
        try:
            (v1_block,) = self._v1.get_new_blocks(1)
        except ValueError as error:
            raise OutOfBlocksError(f"vLLM v1: {error}") from error
        self._tokens[self._id(v1_block)] = []
        return v1_block

    def _cache(self, v1_block: Any, prefix: Prefix, tokens: list[Token]) -> None:
        """``cache_full_blocks`` for one block at position ``prefix.num_tokens // size``."""
        if not self._config.enable_caching:
            return
        size = self._config.block_size
        position = prefix.num_tokens // size
        before = [b""] * (position - 1) + [prefix.hash] if position else []
        key = prefix.extra_key
        lora = key.lora_id
        request = SimpleNamespace(
            block_hashes=[*before, prefix.child_hash(tokens)],
            all_token_ids=[0] * (position * size) + list(tokens),
            lora_request=None if lora is None else LoRARequest(f"lora-{lora}", lora),
            cache_salt=key.cache_salt,
            mm_features=[],
            prompt_embeds=None,
            session_id=None,
        )
        blocks = [self._v1.null_block] * position + [v1_block]
        self._v1.cache_full_blocks(request, blocks, position, position + 1, size, GROUP)

    def _cached(self, content_hash: bytes) -> Any:
        """The block v1's ``get_cached_block`` finds for ``content_hash``, if caching."""
        if not self._config.enable_caching:
            return None
        block_hash = modules()["vllm.v1.core.kv_cache_utils"].BlockHash(content_hash)
        hit = self._v1.get_cached_block(block_hash, [GROUP])
        return None if hit is None else hit[0]

    # --- allocation ----------------------------------------------------------------------------

    def allocate_mutable(self) -> BlockId:
        return self._id(self._new_block())

    def allocate_immutable(self, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        full = check_full_block(tokens, self._config.block_size)
        checked = check_prefix(prefix, self._config.block_size)
        hit = self._cached(checked.child_hash(full))
        if hit is not None:
            self._v1.touch([hit])
            return self._id(hit)
        v1_block = self._new_block()
        block = self._id(v1_block)
        self._tokens[block] = list(full)
        self._cache(v1_block, checked, full)
        return block

    def append_tokens(self, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        checked_block, new = check_append(self._config, block, prefix, tokens, self._facts)
        v1_block = self._block(checked_block)
        if v1_block.ref_cnt > 1:
            raise UnsupportedError(
                f"vLLM v1 never writes a shared block (block {checked_block} has"
                f" {v1_block.ref_cnt} holders): its tables are append-only, without copy-on-write"
            )
        filled = self._tokens[checked_block] + new
        self._tokens[checked_block] = filled
        if len(filled) == self._config.block_size:
            assert isinstance(prefix, Prefix)
            cached = self._cached(prefix.child_hash(filled))
            if self.switches.dedup_on_promotion and cached is not None:
                self._v1.free_blocks([v1_block])
                self._tokens.pop(checked_block)
                self._v1.touch([cached])
                return self._id(cached)
            self._cache(v1_block, prefix, filled)
        return checked_block

    def free(self, block: BlockId) -> None:
        checked = check_block_id(self._config, block)
        v1_block = self._block(checked)
        if v1_block.ref_cnt == 0:
            raise DoubleFreeError(f"block {checked} is not held (ref count 0)")
        self._v1.free_blocks([v1_block])
        if v1_block.ref_cnt == 0 and v1_block.block_hash is None:
            self._tokens.pop(checked, None)

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        blocks = check_block_ids(self._config, chain)
        for block in blocks:
            check_live(block, self._facts(block))
        self._v1.touch([self._block(b) for b in blocks])
        return list(blocks)

    def cow_if_not_appendable(self, block: BlockId) -> BlockId:
        raise UnsupportedError("vLLM v1 has no copy-on-write (its block tables are append-only)")

    def clear_copy_on_writes(self) -> list[CopyPair]:
        return []

    # --- notifications and queries -------------------------------------------------------------

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        check_time(now)
        for block in check_block_ids(self._config, blocks):
            check_known(block, self._facts(block))

    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        for block in check_block_ids(self._config, blocks):
            check_known(block, self._facts(block))

    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
        raise UnsupportedError("vLLM v1's BlockPool has no computed-prefix query")

    def num_free_blocks(self) -> int:
        return int(self._v1.get_num_free_blocks())

    def hit_rate(self) -> float:
        raise UnsupportedError("vLLM v1's BlockPool keeps no hit counters")

    def reset_prefix_cache(self) -> bool:
        done = bool(self._v1.reset_prefix_cache())
        if done:
            self._tokens.clear()
        return done

    def take_events(self) -> list[KVEvent]:
        """What v1's pool queued since the last call (its hashes are pagedkv's own)."""
        return [pagedkv_event(event, bytes) for event in self._v1.take_events()]
