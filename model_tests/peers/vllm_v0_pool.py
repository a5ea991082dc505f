"""vLLM 0.6.3.post1's block allocator behind pagedkv's ``BlockPool``.

The pool of vLLM 0.6.3 is ``PrefixCachingBlockAllocator`` (with caching) or
``NaiveBlockAllocator`` (without): ref counts, the evictor of cached blocks nobody holds, the
hash → block map, copy-on-write and its pending pairs, the computed marks and the hit rate. Its
callers hold ``Block`` *objects*, one per holder of a physical block, linked to the block before
them in their sequence by ``prev_block``; a block's hash is computed through that link.

The adapter plays vLLM's ``BlockTable`` above the allocator, and nothing more:

- holders: each holder of a block id is one of vLLM's block objects; ``free`` gives back the
  last one taken, ``fork`` makes new ones (vLLM's ``fork``, one block at a time), and an append
  or copy-on-write that gives a holder another id moves it there;
- the prefix: a ``Prefix`` becomes the ``prev_block`` vLLM reads: none for a sequence's first
  block (vLLM hashes no extra key: D4), else a stand-in block that has the prefix's hash (as an
  ``int``) and token count and no id;
- ``allocate_immutable``: ``allocate_immutable_block`` (a hit, or a new block filled);
  ``append_tokens``: the holder's ``append_token_ids`` (copy-on-write of a shared block, and the
  promotion of a block it fills, with vLLM's dedup); ``cow_if_not_appendable``:
  ``cow_block_if_not_appendable``, which gives back the source id before it takes a new one;
- ``common_computed_prefix``: what vLLM's block manager asks for each sequence
  (``get_computed_block_ids``, the last block skipped), then ``get_common_computed_block_ids``;
- argument and ref-count checks are the caller's (``pagedkv.specs.validation``, in the spec's
  order).

``reset_prefix_cache`` does not exist in 0.6.3: ``UnsupportedError``. vLLM's calls fail midway
(``cow_block_if_not_appendable`` out of blocks has given back its source): the ``vllm-v0``
profile's ``atomic=false`` ends a run there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pagedkv.model_tests.peers import vllm_v0
from pagedkv.specs.content_hash import Prefix, encode_extra_key
from pagedkv.specs.errors import DoubleFreeError, UnsupportedError
from pagedkv.specs.types import NO_EXTRA_KEY, BlockId, CopyPair, PoolConfig, Token
from pagedkv.specs.validation import (
    BlockFacts,
    check_append,
    check_appendable,
    check_block_id,
    check_block_ids,
    check_chains,
    check_full_block,
    check_known,
    check_live,
    check_pool_config,
    check_prefix,
    check_time,
)

_prefix_classes: dict[int, type] = {}


def _prefix_block_class(modules: dict[str, ModuleType]) -> type:
    """A ``PrefixCachingBlock`` that stands for everything before a block: vLLM's next block
    reads only its hash and its token count (and checks its class)."""
    base = modules["vllm.core.block.prefix_caching_block"].PrefixCachingBlock
    if id(base) not in _prefix_classes:

        class PrefixBlock(base):  # type: ignore[misc, valid-type]
            def __init__(self, content_hash: int, num_tokens: int) -> None:
                self._standin_hash = content_hash
                self._standin_tokens = num_tokens

            @property
            def content_hash(self) -> int:
                return self._standin_hash

            @property
            def num_tokens_total(self) -> int:
                return self._standin_tokens

            @property
            def prev_block(self) -> None:
                return None

        _prefix_classes[id(base)] = PrefixBlock
    return _prefix_classes[id(base)]


@dataclass(frozen=True)
class Switches:
    """Each switch papers over one known defect (``specs/peers.md``); all off by default."""

    hash_extra_key: bool = False
    """Give a sequence's first block under an extra key a ``prev_block`` that stands for the
    key, so its hash differs from the same tokens' under another key (D4)."""


class VllmV0Pool:
    """vLLM 0.6.3's allocator of one device, as its block tables use it."""

    def __init__(self, config: PoolConfig, switches: Switches | None = None) -> None:
        check_pool_config(config)
        self._config = config
        self.switches = switches or Switches()
        modules = vllm_v0.modules()
        if config.enable_caching:
            allocator = modules["vllm.core.block.prefix_caching_block"].PrefixCachingBlockAllocator
            self._vllm: Any = allocator(
                config.num_blocks, config.block_size, block_ids=config.block_ids
            )
            self._prefix_block: type | None = _prefix_block_class(modules)
        else:
            naive = modules["vllm.core.block.naive_block"]
            self._vllm = naive.NaiveBlockAllocator(
                naive.NaiveBlock, config.num_blocks, config.block_size, config.block_ids
            )
            self._prefix_block = None
        self._holders: dict[BlockId, list[Any]] = {}

    @property
    def config(self) -> PoolConfig:
        return self._config

    # --- holders and facts ---------------------------------------------------------------------

    def _facts(self, block: BlockId) -> BlockFacts:
        holders = self._holders.get(block, [])
        hashed = self._config.enable_caching and block in self._vllm._cached_blocks.values()
        size = len(holders[-1].token_ids) if holders else (self._config.block_size if hashed else 0)
        return BlockFacts(self._vllm._refcounter.get(block), hashed, size)

    def _hold(self, vllm_block: Any) -> BlockId:
        block = int(vllm_block.block_id)
        self._holders.setdefault(block, []).append(vllm_block)
        return block

    def _holder(self, block: BlockId) -> Any:
        return self._holders[block][-1]

    def _let_go(self, block: BlockId, vllm_block: Any) -> None:
        held = self._holders[block]
        held.remove(vllm_block)
        if not held:
            del self._holders[block]

    def _prev_block(self, prefix: Prefix) -> Any:
        """The ``prev_block`` vLLM reads for a block after ``prefix``."""
        if self._prefix_block is None:
            return None
        if prefix.num_tokens == 0:
            if not self.switches.hash_extra_key or prefix.extra_key == NO_EXTRA_KEY:
                return None
            key = hashlib.sha256(encode_extra_key(prefix.extra_key)).digest()
            return self._prefix_block(int.from_bytes(key[:8], "little"), 0)
        return self._prefix_block(int.from_bytes(prefix.hash[:8], "little"), prefix.num_tokens)

    # --- allocation ----------------------------------------------------------------------------

    def allocate_mutable(self) -> BlockId:
        return self._hold(vllm_v0.call(self._vllm.allocate_mutable_block, None))

    def allocate_immutable(self, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        full = check_full_block(tokens, self._config.block_size)
        checked = check_prefix(prefix, self._config.block_size)
        made = vllm_v0.call(self._vllm.allocate_immutable_block, self._prev_block(checked), full)
        return self._hold(made)

    def append_tokens(self, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        checked_block, new = check_append(self._config, block, prefix, tokens, self._facts)
        holder = self._holder(checked_block)
        if self._prefix_block is not None:
            assert isinstance(prefix, Prefix)
            holder._prev_block = self._prev_block(prefix)
        vllm_v0.call(holder.append_token_ids, new)
        return self._moved(checked_block, holder)

    def _moved(self, block: BlockId, holder: Any) -> BlockId:
        """The holder's id after a call that may have given it another (a copy, a dedup)."""
        now = holder.block_id
        if now is not None and now != block:
            self._let_go(block, holder)
            return self._hold(holder)
        return block

    def free(self, block: BlockId) -> None:
        checked = check_block_id(self._config, block)
        if self._vllm._refcounter.get(checked) == 0:
            raise DoubleFreeError(f"block {checked} is not held (ref count 0)")
        holder = self._holder(checked)
        self._vllm.free(holder)
        self._let_go(checked, holder)

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        blocks = check_block_ids(self._config, chain)
        for block in blocks:
            check_live(block, self._facts(block))
        for block in blocks:
            holder = self._holder(block)
            prev_block, holder._prev_block = holder._prev_block, None  # one block, not the chain
            try:
                (forked,) = self._vllm.fork(holder)
            finally:
                holder._prev_block = prev_block
            forked._prev_block = prev_block
            self._hold(forked)
        return list(blocks)

    def cow_if_not_appendable(self, block: BlockId) -> BlockId:
        checked = check_appendable(self._config, block, self._facts)
        holder = self._holder(checked)
        target = vllm_v0.call(self._vllm.cow_block_if_not_appendable, holder)
        holder.block_id = target
        return self._moved(checked, holder)

    def clear_copy_on_writes(self) -> list[CopyPair]:
        return [(int(src), int(dst)) for src, dst in self._vllm.clear_copy_on_writes()]

    # --- notifications and queries -------------------------------------------------------------

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        time = check_time(now)
        checked = check_block_ids(self._config, blocks)
        for block in checked:
            check_known(block, self._facts(block))
        self._vllm.mark_blocks_as_accessed(checked, time)

    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        checked = check_block_ids(self._config, blocks)
        for block in checked:
            check_known(block, self._facts(block))
        self._vllm.mark_blocks_as_computed(checked)

    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
        checked = check_chains(self._config, chains)
        for chain in checked:
            for block in chain:
                check_live(block, self._facts(block))
        computed = [  # a sequence of vLLM's always has a block: an empty one has none computed
            self._vllm.get_computed_block_ids([], chain, skip_last_block_id=True) if chain else []
            for chain in checked
        ]
        return [int(b) for b in self._vllm.get_common_computed_block_ids(computed)]

    def num_free_blocks(self) -> int:
        return int(self._vllm.get_num_free_blocks())

    def hit_rate(self) -> float:
        return float(self._vllm.get_prefix_cache_hit_rate())

    def reset_prefix_cache(self) -> bool:
        raise UnsupportedError("vLLM 0.6.3 has no reset_prefix_cache (later releases added it)")
