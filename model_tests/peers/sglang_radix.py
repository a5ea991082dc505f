"""SGLang 0.5.23's ``RadixCache`` behind pagedkv's ``RequestKVManager``
(``specs/request_level.md``): the request level, played as SGLang's scheduler plays it.

SGLang's own code does everything about the cache and the slots: ``RadixCache`` (its
``match_prefix``, ``checkpoint``, ``lock`` / ``unlock`` receipts over ``inc_lock_ref`` /
``dec_lock_ref``, ``evict``, ``reset``, its KV event recorder) over SGLang's own allocator on
CPU tensors: ``TokenToKVPoolAllocator`` at page size 1 (``factory``),
``PagedTokenToKVPoolAllocator`` at larger pages (``paged_factory``; its ``alloc`` of whole pages,
not the Triton-batched ``alloc_extend``). The adapter is the scheduler
(``sglang_scheduler.py`` holds the per-request state SGLang's ``Req`` carries):

- a block is a KV page: block id = KV index // page size (SGLang's slot 0 is its padding slot,
  pagedkv's null block); block size = page size;
- ``get_computed_blocks``: ``match_prefix`` with the request's key capped by ``limit =
  num_tokens - 1`` (SGLang's scheduler keeps the last token to compute); the hit's pages;
- ``allocate_slots``: admission locks the matched node (the hit's path) and writes the hit's
  indices into the request's row; what does not fit in the free slots plus the evictable
  ones is ``None`` (SGLang's prefill adder counts both), after the lock is given back; else,
  while the request is in its extend (its computed tokens within those it was admitted with:
  the round after a prefill chunk, the last one included, ``batch_result_processor.py``'s
  ``checkpoint_kv_cache``), its computed tokens are checkpointed into the tree
  (``RadixCache.checkpoint``: insert, free the duplicates, rewrite the row, move the lock); a
  decoding request inserts nothing; then ``evict`` makes room for the shortfall and the
  allocator hands out the slots;
- ``free``: ``release_kv_cache``'s steps with ``checkpoint=True`` (a finish): the tree keeps
  the committed tokens the last ``allocate_slots`` scheduled (``owned_kv_len``: the engine
  computed them before the request finished), the rest of the row goes back, the lock is
  dropped; ``preempt`` (the protocol's optional call, ``specs/request_level.md`` §5): the same
  with ``checkpoint=False``, SGLang's retract, which inserts nothing;
- ``reset_prefix_cache``: SGLang's ``flush_cache``: refused while a request holds slots, else
  the tree is reset and the allocator cleared;
- ``take_events``: SGLang's recorder's events, renamed through the conversion vLLM's adapters
  use; SGLang's pages are named by pagedkv's hashes (``standins/sglang.py``).

Full attention only (SGLang's ``RadixCache`` serves no sliding-window group: that is
``SWARadixCache``); a configuration with a window group is declined (``UnsupportedError``).
"""

from __future__ import annotations

from array import array
from types import ModuleType
from typing import Any

import torch

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.sglang_scheduler import SglangRequest, TokenRows, tree_tokens
from pagedkv.model_tests.peers.standins import sglang as standins
from pagedkv.model_tests.peers.vllm_v1_events import pagedkv_event
from pagedkv.specs.errors import UnknownRequestError, UnsupportedError
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import GroupBlocks, KVEvent, Request, RequestConfig, RequestId
from pagedkv.specs.request_validation import (
    check_allocate_slots,
    check_request,
    check_request_config,
    check_request_id,
)
from pagedkv.specs.request_view import (
    CachedKey,
    RequestBlockView,
    RequestManagerView,
    RequestTableView,
)
from pagedkv.specs.types import BlockHash, BlockId


def modules() -> dict[str, ModuleType]:
    policies = sources.load(sources.SGLANG, {}, ("sglang.srt.mem_cache.evict_policy",))
    evict_policy = policies["sglang.srt.mem_cache.evict_policy"]
    strategies = {"lru": evict_policy.LRUStrategy}
    return sources.load(
        sources.SGLANG,
        standins.modules(strategies),
        (
            "sglang.srt.mem_cache.radix_cache",
            "sglang.srt.mem_cache.base_prefix_cache",
            "sglang.srt.mem_cache.allocator.token",
            "sglang.srt.mem_cache.allocator.paged",
        ),
    )


class SglangRadixManager:
    """SGLang's ``RadixCache`` and token allocator, events on, behind ``RequestKVManager``."""

    def __init__(self, config: RequestConfig, paged: bool = False) -> None:
        self._config = check_request_config(config)
        if (
            any(group.sliding_window is not None for group in config.groups)
            or len(config.groups) != 1
        ):
            raise UnsupportedError(
                f"SGLang's RadixCache serves one full-attention group, not {config.groups}"
            )
        self.page_size = config.block_size
        if paged != (self.page_size > 1):
            raise UnsupportedError(
                "SGLang's paged allocator serves pages of 2 tokens or more"
                if paged
                else "SGLang's token allocator has page size 1"
            )
        loaded = modules()
        self._radix = loaded["sglang.srt.mem_cache.radix_cache"]
        self._params = loaded["sglang.srt.mem_cache.base_prefix_cache"]
        size = (config.num_blocks - 1) * self.page_size
        if paged:
            paged_class = loaded["sglang.srt.mem_cache.allocator.paged"]
            self._allocator: Any = paged_class.PagedTokenToKVPoolAllocator(
                size, self.page_size, torch.int64, "cpu", None, need_sort=False
            )
        else:
            token_class = loaded["sglang.srt.mem_cache.allocator.token"]
            self._allocator = token_class.TokenToKVPoolAllocator(
                size, torch.int64, "cpu", None, need_sort=False
            )
        self._rows = TokenRows()
        self._tree: Any = self._radix.RadixCache.create_simulated(
            disable=not config.enable_caching,
            mock_allocator=self._allocator,
            page_size=self.page_size,
            enable_kv_cache_events=True,
        )
        self._tree.req_to_token_pool = self._rows
        self._tree.kv_events.take()  # the reset at construction: nothing was cached before
        standins.PAGE_NAMES.names.clear()
        self._names: dict[int, BlockHash] = {}
        """SGLang's event hash (int64) -> pagedkv's."""
        self._requests: dict[RequestId, SglangRequest] = {}

    @property
    def config(self) -> RequestConfig:
        return self._config

    # --- SGLang's calls -------------------------------------------------------------------------

    def _key(self, request: Request, limit: int | None) -> Any:
        extra = request.extra_key
        return self._radix.RadixKey(
            array("q", tree_tokens(request)),
            None if extra.lora_id is None else f"lora-{extra.lora_id}",
            limit=limit,
            cache_salt=extra.cache_salt,
        )

    def _match(self, request: Request, limit: int) -> tuple[list[int], Any]:
        """``match_prefix``: the hit's KV indices and its last node."""
        result = self._tree.match_prefix(
            self._params.MatchPrefixParams(key=self._key(request, limit))
        )
        indices = self._tree.path_device_indices(result.last_device_node)[
            : result.device_prefix_len
        ]
        return [int(i) for i in indices.tolist()], result.last_device_node

    def _tree_pages(self) -> dict[int, Any]:
        """Every page the tree holds, with its node."""
        pages: dict[int, Any] = {}
        stack = list(self._tree.root_node.children.values())
        while stack:
            node = stack.pop()
            for index in node.value.tolist()[:: self.page_size]:
                pages[int(index) // self.page_size] = node
            stack.extend(node.children.values())
        return pages

    def _name_pages(self, kept: SglangRequest, request: Request) -> None:
        """Before an insert: the row's full pages named by the request's hashes."""
        hashes = request_block_hashes(request, self.page_size)
        row = self._rows.row(kept.kv.req_pool_idx, kept.allocated)
        for index, block_hash in enumerate(hashes[: kept.allocated // self.page_size]):
            page = row[index * self.page_size] // self.page_size
            standins.PAGE_NAMES.names[page] = block_hash.hex()
            self._names[standins.hash_str_to_int64(block_hash.hex())] = block_hash

    def _checkpoint(self, kept: SglangRequest, request: Request, up_to: int) -> None:
        # SGLang computes only tokens it holds slots for; the protocol's caller may claim more.
        up_to = min(up_to, kept.allocated)
        if not self._config.enable_caching or up_to <= kept.kv.cache_protected_len:
            return
        kept.fill(request)
        self._name_pages(kept, request)
        self._tree.checkpoint(kept, up_to=up_to)

    def _allocate(self, num_tokens: int) -> list[int] | None:
        if num_tokens <= 0:
            return []
        shortfall = num_tokens - self._allocator.available_size()
        if shortfall > 0:
            self._tree.evict(self._params.EvictParams(num_tokens=shortfall))
        got = self._allocator.alloc(num_tokens)
        return None if got is None else [int(i) for i in got.tolist()]

    # --- the protocol ---------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        checked = check_request(self._config, request)
        if not self._config.enable_caching:
            return [[]], 0
        indices, _ = self._match(checked, checked.num_tokens - 1)
        return [[index // self.page_size for index in indices[:: self.page_size]]], len(indices)

    def _cached_as(self, block: BlockId, key: CachedKey) -> bool:
        if key.group != 0 or block not in self._tree_pages():
            return False
        return standins.PAGE_NAMES.names.get(block) == key.block_hash.hex()

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        args = check_allocate_slots(
            self._config,
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            is_known=self._requests.__contains__,
            cached_as=self._cached_as,
        )
        checked = args.request
        total = checked.num_computed_tokens + args.num_new_computed_tokens
        need = total + args.num_new_tokens + args.num_lookahead_tokens
        if self._config.max_model_len is not None:
            need = min(need, self._config.max_model_len)
        scheduled_end = min(total + args.num_new_tokens, checked.num_tokens)
        kept = self._requests.get(checked.request_id)
        if kept is None:
            return self._admit(checked, args.num_new_computed_tokens, need, scheduled_end)
        wanted = -(-need // self.page_size) * self.page_size - kept.allocated
        if wanted > self._allocator.available_size() + self._tree.evictable_size():
            return None
        if total <= kept.admitted_tokens:  # the round after an extend (prefill) chunk
            self._checkpoint(kept, checked, total)
        kept.request = checked
        kept.computed = total
        kept.scheduled_end = scheduled_end
        return [self._grow(kept, wanted)]

    def _admit(
        self, request: Request, num_hit: int, need: int, scheduled_end: int
    ) -> GroupBlocks | None:
        hit: list[int] = []
        node = self._tree.root_node
        if num_hit:
            hit, node = self._match(request, num_hit)
        lock = self._tree.lock(node)
        wanted = -(-need // self.page_size) * self.page_size - len(hit)
        if wanted > self._allocator.available_size() + self._tree.evictable_size():
            self._tree.unlock(lock)
            return None
        kept = SglangRequest(request, self._rows.take(), lock, node, len(hit))
        self._rows.write((kept.kv.req_pool_idx, slice(0, len(hit))), torch.tensor(hit))
        kept.allocated = len(hit)
        kept.scheduled_end = scheduled_end
        self._requests[request.request_id] = kept
        return [self._grow(kept, wanted)]

    def _grow(self, kept: SglangRequest, wanted: int) -> list[BlockId]:
        got = self._allocate(wanted)
        if got is None:  # the fit check counted what eviction frees: cannot happen
            raise RuntimeError(f"SGLang's allocator refused {wanted} slots it had")
        start = kept.allocated
        self._rows.write(
            (kept.kv.req_pool_idx, slice(start, start + len(got))),
            torch.tensor(got, dtype=torch.int64),
        )
        kept.allocated += len(got)
        return [index // self.page_size for index in got[:: self.page_size]]

    def free(self, request_id: RequestId) -> None:
        """``release_kv_cache(req, tree, checkpoint=True)``: a finish."""
        self._release(request_id, checkpoint=True)

    def preempt(self, request_id: RequestId) -> None:
        """``release_kv_cache(req, tree, checkpoint=False)``: a retract inserts nothing."""
        self._release(request_id, checkpoint=False)

    def _release(self, request_id: RequestId, *, checkpoint: bool) -> None:
        checked = check_request_id(request_id)
        kept = self._requests.pop(checked, None)
        if kept is None:
            return
        if checkpoint:
            self._checkpoint(kept, kept.request, kept.scheduled_end)
        row = self._rows.row(kept.kv.req_pool_idx, kept.allocated)
        start = kept.kv.cache_protected_len
        self._allocator.free_segment(torch.tensor(row[start:], dtype=torch.int64), start_pos=start)
        self._tree.unlock(kept.lock)
        kept.lock = None
        self._rows.give_back(kept.kv.req_pool_idx)

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        checked = check_request_id(request_id)
        kept = self._requests.get(checked)
        if kept is None:
            raise UnknownRequestError(f"request {checked!r} holds no blocks")
        return [self._table(kept)]

    def _table(self, kept: SglangRequest) -> list[BlockId]:
        row = self._rows.row(kept.kv.req_pool_idx, kept.allocated)
        return [index // self.page_size for index in row[:: self.page_size]]

    def num_free_blocks(self) -> int:
        return int(self._allocator.available_size() + self._tree.evictable_size()) // self.page_size

    def usage(self) -> float:
        return 1.0 - self.num_free_blocks() / (self._config.num_blocks - 1)

    def reset_prefix_cache(self) -> bool:
        if self._requests:
            return False
        self._tree.reset()
        self._allocator.clear()
        return True

    def _name(self, sglang_hash: Any) -> BlockHash:
        """pagedkv's hash of the page SGLang's event hash (an int64) names."""
        return self._names[int(sglang_hash)]

    def take_events(self) -> list[KVEvent]:
        return [pagedkv_event(event, self._name) for event in self._tree.kv_events.take()]

    def _free_pages(self) -> torch.Tensor:
        """The allocator's free page ids in the order it hands them out (the token allocator's
        are KV indices, its pages of one slot)."""
        if self.page_size == 1:
            return torch.cat((self._allocator.free_pages, self._allocator.release_pages))
        return torch.cat((self._allocator.free_pages, *self._allocator.staged_pages))

    def view(self) -> RequestManagerView:
        tables = {rid: self._table(kept) for rid, kept in sorted(self._requests.items())}
        holders: dict[BlockId, int] = {}
        for table in tables.values():
            for block in table:
                holders[block] = holders.get(block, 0) + 1
        pages = self._tree_pages()
        blocks = {}
        for block in range(1, self._config.num_blocks):
            name = standins.PAGE_NAMES.names.get(block)
            cached = (
                None if block not in pages or name is None else CachedKey(0, bytes.fromhex(name))
            )
            blocks[block] = RequestBlockView(holders.get(block, 0), cached)
        free = [int(page) for page in self._free_pages().tolist()]
        evictable = sorted(p for p, node in pages.items() if node.lock_ref == 0)
        requests = {
            rid: RequestTableView(
                (tuple(table),), (self._requests[rid].kv.cache_protected_len // self.page_size,)
            )
            for rid, table in tables.items()
        }
        return RequestManagerView(self._config, blocks, tuple(free + evictable), requests)


def factory(config: RequestConfig) -> SglangRadixManager:
    """Page size 1: SGLang's default, the token allocator."""
    return SglangRadixManager(config)


def paged_factory(config: RequestConfig) -> SglangRadixManager:
    """Pages of the block size (2 or more): the paged allocator."""
    return SglangRadixManager(config, paged=True)
