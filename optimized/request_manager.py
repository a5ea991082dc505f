"""The fast request-level manager: vLLM v1's ``KVCacheManager`` over flat arrays, observably
identical to the reference (``pagedkv.reference.request_adapter``) in exact mode
(``specs/request_level.md``).

Where the speed comes from:
- a block is an index into flat lists (ref count, cached hash, cached group), never an object;
- the free queue is a doubly linked list over ids (``free_queue.py``): a hit pulls a block out
  of its middle, a free puts a run at either end, allocation pops the front, all without search;
- the cache map is one dict per group keyed by the bare hash (``block_hash_map.py``);
- a request's block hashes are kept between calls and extended by its new full blocks only
  (``incremental_hashes.py``), and its input checks look only at the tokens it did not have
  before, so a decode step runs no Python code per token it had: what remains is one tuple
  comparison in C (``IncrementalBlockHashes.unchanged``), still linear in the request's length:
  about half a decode step's time on the bench's stream (some 600 tokens a request).
"""

from __future__ import annotations

from collections.abc import Iterable

from pagedkv.optimized.block_hash_map import BlockHashMap
from pagedkv.optimized.free_queue import FreeQueue
from pagedkv.optimized.incremental_hashes import IncrementalBlockHashes
from pagedkv.specs.errors import UnknownRequestError
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    GroupBlocks,
    KVEvent,
    Request,
    RequestConfig,
    RequestId,
)
from pagedkv.specs.request_validation import (
    check_allocate_slots,
    check_request,
    check_request_config,
    check_request_id,
    hit_blocks_needed,
)
from pagedkv.specs.request_view import (
    CachedKey,
    RequestBlockView,
    RequestManagerView,
    RequestTableView,
)
from pagedkv.specs.types import BlockHash, BlockId

HitBlocks = tuple[tuple[BlockId, ...], ...]


class _RequestBlocks:
    """What the manager holds for one request between ``allocate_slots`` and ``free``."""

    __slots__ = ("hashes", "num_cached", "tables")

    def __init__(
        self, tables: list[list[BlockId]], num_cached: list[int], hashes: IncrementalBlockHashes
    ) -> None:
        self.tables = tables
        self.num_cached = num_cached
        self.hashes = hashes


class RequestManager:
    """``specs.interface.RequestKVManager`` over one pool shared by every KV cache group."""

    atomic = True
    """Every call its checks refuse changes nothing (``specs/request_level.md`` §8): they all run
    before the first change. A ``None`` from ``allocate_slots`` is an answer, not a failure."""

    def __init__(self, config: RequestConfig) -> None:
        check_request_config(config)
        self._config = config
        self._block_size = config.block_size
        self._num_blocks = config.num_blocks
        self._caching = config.enable_caching
        self._max_model_len = config.max_model_len
        self._num_groups = len(config.groups)
        self._windows: list[int] = [group.sliding_window or 0 for group in config.groups]
        """Per group its window in tokens, 0 for full attention."""
        self._hit_spans: list[int] = [
            hit_blocks_needed(window, config.block_size) if window else 0
            for window in self._windows
        ]
        """Per window group the cached blocks a hit must end with (``cdiv(W - 1, B)``)."""
        self._has_windows = any(self._windows)
        num_blocks = config.num_blocks
        self._ref_counts: list[int] = [0] * num_blocks
        self._cached_hashes: list[BlockHash | None] = [None] * num_blocks
        self._cached_groups: list[int] = [0] * num_blocks
        self._maps = [BlockHashMap() for _ in config.groups]
        self._queue = FreeQueue(num_blocks, range(1, num_blocks))
        self._requests: dict[RequestId, _RequestBlocks] = {}
        self._looked_up: tuple[RequestId, IncrementalBlockHashes] | None = None
        """The hashes of the last request ``get_computed_blocks`` saw that holds no blocks yet:
        the ``allocate_slots`` that admits it next reuses them. One, not one per id, so a caller
        that looks up requests it never admits leaks nothing."""
        self._events: list[KVEvent] = []

    @property
    def config(self) -> RequestConfig:
        return self._config

    # --- queries -------------------------------------------------------------------------------

    def num_free_blocks(self) -> int:
        return len(self._queue)

    def usage(self) -> float:
        return 1.0 - len(self._queue) / (self._num_blocks - 1)  # checked: num_blocks >= 2

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        record = self._requests.get(check_request_id(request_id))
        if record is None:
            raise UnknownRequestError(f"request {request_id!r} holds no blocks")
        return [list(table) for table in record.tables]

    def take_events(self) -> list[KVEvent]:
        events = self._events
        self._events = []
        return events

    def view(self) -> RequestManagerView:
        ref_counts, hashes, groups = self._ref_counts, self._cached_hashes, self._cached_groups
        blocks: dict[BlockId, RequestBlockView] = {}
        for block in range(1, self._num_blocks):
            block_hash = hashes[block]
            key = None if block_hash is None else CachedKey(groups[block], block_hash)
            blocks[block] = RequestBlockView(ref_counts[block], key)
        requests = {
            request_id: RequestTableView(
                tuple(tuple(table) for table in record.tables), tuple(record.num_cached)
            )
            for request_id, record in self._requests.items()
        }
        return RequestManagerView(self._config, blocks, tuple(self._queue), requests)

    # --- the hit -------------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        kept = self._kept_hashes(request)
        unchanged = kept.unchanged(request) if kept is not None else 0
        check_request(self._config, request, unchanged_tokens=unchanged)
        hashes = self._hashes_of(request, unchanged).hashes
        if not self._caching:
            return [[] for _ in range(self._num_groups)], 0
        num_blocks = min((request.num_tokens - 1) // self._block_size, len(hashes))
        for group, span in enumerate(self._hit_spans):
            if not span:
                num_blocks = self._cached_prefix(group, hashes, num_blocks)
        num_blocks = self._agreed_length(hashes, num_blocks)
        hit: GroupBlocks = []
        for group, span in enumerate(self._hit_spans):
            first = self._maps[group].first
            start = max(0, num_blocks - span) if span else 0
            blocks = [NULL_BLOCK] * start
            for index in range(start, num_blocks):
                block = first(hashes[index])
                assert block is not None
                blocks.append(block)
            hit.append(blocks)
        return hit, num_blocks * self._block_size

    def _cached_prefix(self, group: int, hashes: list[BlockHash], limit: int) -> int:
        """How many leading blocks (at most ``limit``) a full-attention group has cached."""
        first = self._maps[group].first
        for index in range(limit):
            if first(hashes[index]) is None:
                return index
        return limit

    def _agreed_length(self, hashes: list[BlockHash], limit: int) -> int:
        """The largest hit length in blocks, at most ``limit``, that every window group serves:
        each group in turn lowers it to the largest it serves, until none lowers it (vLLM's
        fixed point; every full group serves any length up to its cached prefix)."""
        settled = False
        while not settled:
            settled = True
            for group, span in enumerate(self._hit_spans):
                if span:
                    served = self._window_serves(group, hashes, limit, span)
                    if served < limit:
                        limit, settled = served, False
        return limit

    def _window_serves(self, group: int, hashes: list[BlockHash], limit: int, span: int) -> int:
        """The largest ``k <= limit`` whose last ``span`` blocks before it (or all of them, when
        fewer) this window group has cached; scanned from the right as vLLM does."""
        first = self._maps[group].first
        run = 0
        for index in range(limit - 1, -1, -1):
            if first(hashes[index]) is None:
                run = 0
                continue
            run += 1
            if run >= span:
                return index + span
        return run

    # --- allocate_slots ------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        if (
            new_computed_blocks is None
            and type(request) is Request
            and type(request.request_id) is str
            and type(num_new_computed_tokens) is int
            and num_new_computed_tokens == 0
            and type(num_new_tokens) is int
            and num_new_tokens > 0
            and type(num_lookahead_tokens) is int
            and num_lookahead_tokens >= 0
        ):
            record = self._requests.get(request.request_id)
            if record is not None:
                # A running request's step (a prefill chunk, a decode): of the shared checks
                # only the request's can fail, so the others (counts, the hit's shape) are
                # passed by.
                hashes = record.hashes
                unchanged = hashes.unchanged(request)
                check_request(self._config, request, unchanged_tokens=unchanged)
                hashes.update(request, unchanged)
                return self._step(record, request, num_new_tokens, num_lookahead_tokens)
        return self._checked_allocate(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )

    def _checked_allocate(
        self,
        request: object,
        num_new_tokens: object,
        num_new_computed_tokens: object,
        new_computed_blocks: object,
        num_lookahead_tokens: object,
    ) -> GroupBlocks | None:
        """``allocate_slots`` through every shared check: admissions, hits, and bad input."""
        kept = self._kept_hashes(request)
        unchanged = kept.unchanged(request) if kept and isinstance(request, Request) else 0
        args = check_allocate_slots(
            self._config,
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            is_known=self._requests.__contains__,
            cached_as=self._cached_as,
            unchanged_tokens=unchanged,
            block_hashes=(lambda checked: self._hashes_of(checked, unchanged).hashes)
            if self._caching
            else None,
        )
        checked = args.request
        self._hashes_of(checked, unchanged)
        record = self._requests.get(checked.request_id)
        if record is not None:
            return self._step(record, checked, args.num_new_tokens, args.num_lookahead_tokens)
        hit = args.hit if any(args.hit) else None
        total = args.num_new_computed_tokens  # a request holding nothing has computed nothing
        need = total + args.num_new_tokens + args.num_lookahead_tokens
        limit = self._max_model_len
        if limit is not None:
            total = min(total, limit)
            need = min(need, limit)
        need_blocks = -(-need // self._block_size)
        skipped = self._skipped_blocks(total)
        if self._admission_blocks(hit, skipped, need_blocks) > len(self._queue):
            return None
        record = self._admit(checked, hit, skipped)
        return self._allocate_and_cache(record, checked, need_blocks, total + args.num_new_tokens)

    def _step(
        self, record: _RequestBlocks, request: Request, num_new_tokens: int, lookahead: int
    ) -> GroupBlocks | None:
        """Steps 1-8 for a request that holds blocks (so no hit)."""
        total = request.num_computed_tokens
        need = total + num_new_tokens + lookahead
        limit = self._max_model_len
        if limit is not None:
            total = min(total, limit)
            need = min(need, limit)
        need_blocks = -(-need // self._block_size)
        if self._has_windows:
            self._release_window(record, total)
        tables = record.tables
        wanted = 0
        for table in tables:
            if need_blocks > len(table):
                wanted += need_blocks - len(table)
        if not wanted:  # most decode steps: the last block has room
            new_blocks: GroupBlocks = [[] for _ in tables] if len(tables) > 1 else [[]]
        elif wanted > len(self._queue):
            return None
        else:
            new_blocks = self._grow(tables, need_blocks)
        if self._caching:
            computed = total + num_new_tokens
            hashes = record.hashes.hashes
            full = min(min(computed, len(request.tokens)) // self._block_size, len(hashes))
            num_cached = record.num_cached
            for group, start in enumerate(num_cached):
                if start < full:
                    self._cache_run(group, tables[group], start, full, hashes, request)
                    num_cached[group] = full
        return new_blocks

    def _allocate_and_cache(
        self, record: _RequestBlocks, request: Request, need_blocks: int, computed: int
    ) -> GroupBlocks:
        """Steps 6-8: the tables grow to ``need_blocks``; the full blocks of the first
        ``computed`` tokens that are committed get cached; the new blocks are the answer."""
        new_blocks = self._grow(record.tables, need_blocks)
        if self._caching:
            self._cache(record, request, min(computed, request.num_tokens))
        return new_blocks

    def _skipped_blocks(self, total: int) -> list[int]:
        """Per group, the leading blocks out of the window after ``total`` computed tokens."""
        return [
            max(0, total - window + 1) // self._block_size if window else 0
            for window in self._windows
        ]

    def _release_window(self, record: _RequestBlocks, total: int) -> None:
        """Step 2: each window group's blocks that slid out go back, walked from the highest
        down to the first already released (``specs/request_level.md``)."""
        size = self._block_size
        for group, window in enumerate(self._windows):
            if not window or total - window + 1 < size:
                continue
            table = record.tables[group]
            index = min((total - window + 1) // size, len(table)) - 1
            released: list[BlockId] = []
            while index >= 0 and table[index] != NULL_BLOCK:
                released.append(table[index])
                table[index] = NULL_BLOCK
                index -= 1
            if released:
                self._give_back(released)

    def _admission_blocks(self, hit: HitBlocks | None, skipped: list[int], need_blocks: int) -> int:
        """Step 3 for a request that holds nothing: new blocks past the hit (or past the
        window's skipped prefix), plus the hit's blocks that touching takes off the queue."""
        ref_counts = self._ref_counts
        wanted = 0
        for group, skip in enumerate(skipped):
            blocks = hit[group] if hit is not None else ()
            wanted += max(need_blocks - max(skip, len(blocks)), 0)
            for index in range(skip, len(blocks)):
                block = blocks[index]
                if block != NULL_BLOCK and ref_counts[block] == 0:
                    wanted += 1
        return wanted

    def _admit(self, request: Request, hit: HitBlocks | None, skipped: list[int]) -> _RequestBlocks:
        """Step 5: the request's tables start as its hit, the skipped prefix pointing at the
        null block, every other hit block touched."""
        tables: list[list[BlockId]] = []
        num_cached: list[int] = []
        ref_counts, queue = self._ref_counts, self._queue
        for group, skip in enumerate(skipped):
            blocks = hit[group] if hit is not None else ()
            table = [NULL_BLOCK] * skip
            for index in range(skip, len(blocks)):
                block = blocks[index]
                if block != NULL_BLOCK:
                    if ref_counts[block] == 0:
                        queue.remove(block)
                    ref_counts[block] += 1
                table.append(block)
            tables.append(table)
            num_cached.append(len(blocks))
        record = _RequestBlocks(tables, num_cached, self._hashes_of(request, 0))
        self._requests[request.request_id] = record
        self._looked_up = None
        return record

    def _grow(self, tables: list[list[BlockId]], need_blocks: int) -> GroupBlocks:
        """Step 6: each group's table grows to ``need_blocks`` from the queue's front."""
        new_blocks: GroupBlocks = []
        for table in tables:
            count = need_blocks - len(table)
            if count > 0:
                taken = self._take(count)
                table.extend(taken)
                new_blocks.append(taken)
            else:
                new_blocks.append([])
        return new_blocks

    def _take(self, count: int) -> list[BlockId]:
        """Blocks from the queue's front, each evicted from the cache on the way if cached."""
        taken = self._queue.popleft_n(count)
        ref_counts, hashes = self._ref_counts, self._cached_hashes
        for block in taken:
            ref_counts[block] = 1
            block_hash = hashes[block]
            if block_hash is not None:
                group = self._cached_groups[block]
                self._maps[group].remove(block_hash, block)
                hashes[block] = None
                self._events.append(BlockRemoved((block_hash,), group))
        return taken

    def _cache(self, record: _RequestBlocks, request: Request, num_tokens: int) -> None:
        """Step 7: the full blocks of committed tokens not cached yet get their keys."""
        hashes = record.hashes.hashes
        full = min(num_tokens // self._block_size, len(hashes))
        for group, table in enumerate(record.tables):
            start = record.num_cached[group]
            if start >= full:
                continue
            self._cache_run(group, table, start, full, hashes, request)
            record.num_cached[group] = full

    def _cache_run(
        self,
        group: int,
        table: list[BlockId],
        start: int,
        end: int,
        hashes: list[BlockHash],
        request: Request,
    ) -> None:
        """The blocks ``start .. end - 1`` past the table's null prefix are cached, and one
        ``BlockStored`` names exactly them (none when all are null): a window's null blocks
        always lead the table, so the blocks cached are one consecutive run."""
        first = start
        while first < end and table[first] == NULL_BLOCK:
            first += 1
        if first == end:
            return
        cached_hashes, cached_groups = self._cached_hashes, self._cached_groups
        insert = self._maps[group].insert
        for index in range(first, end):
            block = table[index]
            block_hash = hashes[index]
            cached_hashes[block] = block_hash
            cached_groups[block] = group
            insert(block_hash, block)
        size = self._block_size
        self._events.append(
            BlockStored(
                tuple(hashes[first:end]),
                hashes[first - 1] if first else None,
                tuple(request.tokens[first * size : end * size]),
                size,
                request.extra_key.lora_id,
                group,
            )
        )

    # --- giving back ---------------------------------------------------------------------------

    def free(self, request_id: RequestId) -> None:
        record = self._requests.pop(check_request_id(request_id), None)
        if self._looked_up is not None and self._looked_up[0] == request_id:
            self._looked_up = None
        if record is None:
            return
        for table in record.tables:
            self._give_back(reversed(table))

    preempt = free
    """A preemption gives the blocks back as ``free`` does: pagedkv's policy caches at schedule,
    so nothing is left to cache at either (``specs/request_level.md`` §5)."""

    def _give_back(self, blocks: Iterable[BlockId]) -> None:
        """Blocks no table holds any more rejoin the queue: uncached ones at the front (reused
        first), cached ones at the back (evicted last), each run in the given order."""
        ref_counts, hashes = self._ref_counts, self._cached_hashes
        front: list[BlockId] = []
        back: list[BlockId] = []
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            count = ref_counts[block] - 1
            ref_counts[block] = count
            if count == 0:
                (front if hashes[block] is None else back).append(block)
        if front:
            self._queue.prepend_n(front)
        if back:
            self._queue.append_n(back)

    def reset_prefix_cache(self) -> bool:
        if len(self._queue) != self._num_blocks - 1:
            return False
        for block_map in self._maps:
            block_map.clear()
        self._cached_hashes = [None] * self._num_blocks
        if self._caching:
            self._events.append(AllBlocksCleared())
        return True

    # --- hashes and what the checks read -----------------------------------------------------

    def _cached_as(self, block: BlockId, key: CachedKey) -> bool:
        return (
            self._cached_hashes[block] == key.block_hash and self._cached_groups[block] == key.group
        )

    def _kept_hashes(self, request: object) -> IncrementalBlockHashes | None:
        """What was kept for this request's id, before the request is checked (so it may be
        anything)."""
        if not isinstance(request, Request) or not isinstance(request.request_id, str):
            return None
        record = self._requests.get(request.request_id)
        if record is not None:
            return record.hashes
        looked_up = self._looked_up
        if looked_up is not None and looked_up[0] == request.request_id:
            return looked_up[1]
        return None

    def _hashes_of(self, request: Request, unchanged: int) -> IncrementalBlockHashes:
        """The checked request's block hashes, from what was kept for its id when its first
        ``unchanged`` tokens are the ones kept (``IncrementalBlockHashes.unchanged``)."""
        kept = self._kept_hashes(request)
        if kept is not None:
            kept.update(request, unchanged)
            return kept
        hashes = IncrementalBlockHashes(request, self._block_size, hashing=self._caching)
        self._looked_up = (request.request_id, hashes)
        return hashes
