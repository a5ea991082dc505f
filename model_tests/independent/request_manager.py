"""An independent request-level manager, written from the request level's semantics sheet
(``specs/request_level.md``) and, where the sheet is silent, vLLM v1's ``KVCacheManager``.

Deliberately plain: a Python list is the free queue (front = index 0), a list of ints the ref
counts, a dict of lists the cache map (key -> blocks, oldest first), and a dict per request of
its tables. The operations are written out step by step in the sheet's order, each step a small
method, so that ``request_broken`` can get one step wrong at a time. It shares no code with
``reference/`` or ``optimized/`` (only ``specs/``: the types, the hashes and the input checks of
``specs/request_validation.py``, which every implementation runs alike): agreement with them is
evidence that both are right.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.specs.errors import UnknownRequestError
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    AttentionKind,
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
)
from pagedkv.specs.request_view import (
    CachedKey,
    RequestBlockView,
    RequestManagerView,
    RequestTableView,
)
from pagedkv.specs.types import BlockHash, BlockId


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class IndependentRequestManager:
    """A ``RequestKVManager`` (``specs/interface.py``) over plain lists and dicts."""

    def __init__(self, config: RequestConfig) -> None:
        check_request_config(config)
        self._config = config
        self.B = config.block_size
        self.caching = config.enable_caching
        self.ref = [0] * config.num_blocks
        self.key_of: dict[BlockId, CachedKey] = {}
        self.cache: dict[CachedKey, list[BlockId]] = {}
        self.free_queue: list[BlockId] = list(range(1, config.num_blocks))
        self.tables: dict[RequestId, list[list[BlockId]]] = {}
        self.num_cached: dict[RequestId, list[int]] = {}
        self.events: list[KVEvent] = []

    @property
    def config(self) -> RequestConfig:
        return self._config

    # --- small facts ----------------------------------------------------------------------------

    def window(self, g: int) -> int | None:
        group = self._config.groups[g]
        return group.sliding_window if group.kind is AttentionKind.SLIDING_WINDOW else None

    def skipped_tokens(self, g: int, computed: int) -> int:
        """Tokens before the window of the next token: ``max(0, computed - W + 1)`` (0 for full
        attention)."""
        window = self.window(g)
        return 0 if window is None else max(0, computed - window + 1)

    def contiguous_needed(self, g: int) -> int:
        """How many cached blocks before a hit's end a window group needs: ``cdiv(W - 1, B)``."""
        window = self.window(g)
        assert window is not None
        return cdiv(window - 1, self.B)

    def hashes(self, request: Request) -> list[BlockHash]:
        return request_block_hashes(request, self.B)

    def lookup(self, key: CachedKey) -> BlockId | None:
        """The earliest-inserted block still cached under ``key``."""
        blocks = self.cache.get(key)
        return blocks[0] if blocks else None

    # --- the free queue -------------------------------------------------------------------------

    def take(self, n: int) -> list[BlockId]:
        """``n`` blocks from the front of the free queue; a cached one is evicted on the way."""
        taken = self.free_queue[:n]
        del self.free_queue[:n]
        for block in taken:
            self.evict(block)
            self.ref[block] = 1
        return taken

    def evict(self, block: BlockId) -> None:
        key = self.key_of.pop(block, None)
        if key is None:
            return
        self.cache[key].remove(block)
        if not self.cache[key]:
            del self.cache[key]
        self.events.append(BlockRemoved((key.block_hash,), key.group))

    def touch(self, block: BlockId) -> None:
        if self.ref[block] == 0:
            self.free_queue.remove(block)
        self.ref[block] += 1

    def give_back(self, blocks: Sequence[BlockId]) -> None:
        """vLLM's ``free_blocks(ordered)``: blocks reaching 0 go to the front if uncached (the
        first given ends up first), to the back if cached (in the given order)."""
        front: list[BlockId] = []
        back: list[BlockId] = []
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            self.ref[block] -= 1
            if self.ref[block] == 0:
                (back if self.caching and block in self.key_of else front).append(block)
        self.free_queue[:0] = front
        self.free_queue.extend(back)

    # --- the hit --------------------------------------------------------------------------------

    def hit_cap(self, request: Request) -> int:
        """The longest hit: all tokens but the last, whose logits must be computed."""
        return request.num_tokens - 1

    def serves(self, g: int, k: int, hashes: Sequence[BlockHash]) -> bool:
        """Whether group ``g`` can serve a hit of ``k`` blocks."""
        first = 0 if self.window(g) is None else max(0, k - self.contiguous_needed(g))
        return all(self.lookup(CachedKey(g, hashes[i])) is not None for i in range(first, k))

    def longest_hit(self, most: int, hashes: Sequence[BlockHash]) -> int:
        """The most blocks, at most ``most``, that every group can serve."""
        groups = range(len(self._config.groups))
        k = most
        while k > 0 and not all(self.serves(g, k, hashes) for g in groups):
            k -= 1
        return k

    def group_hit(self, g: int, k: int, hashes: Sequence[BlockHash]) -> list[BlockId]:
        first = 0 if self.window(g) is None else max(0, k - self.contiguous_needed(g))
        blocks = []
        for i in range(k):
            found = self.lookup(CachedKey(g, hashes[i])) if i >= first else None
            blocks.append(NULL_BLOCK if found is None else found)
        return blocks

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        check_request(self._config, request)
        groups = len(self._config.groups)
        if not self.caching:
            return [[] for _ in range(groups)], 0
        hashes = self.hashes(request)
        most = max(0, self.hit_cap(request)) // self.B
        k = self.longest_hit(min(most, len(hashes)), hashes)
        return [self.group_hit(g, k, hashes) for g in range(groups)], k * self.B

    # --- allocation -----------------------------------------------------------------------------

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
            is_known=lambda rid: rid in self.tables,
            cached_as=lambda block, key: self.key_of.get(block) == key,
            block_hashes=self.hashes,
        )
        new, hit_tokens, lookahead = (
            args.num_new_tokens,
            args.num_new_computed_tokens,
            args.num_lookahead_tokens,
        )
        hit = [list(blocks) for blocks in args.hit]
        rid = request.request_id
        known = rid in self.tables

        cap = self.token_cap()
        total = request.num_computed_tokens + hit_tokens
        need = total + new + lookahead
        if cap is not None:
            total, need = min(total, cap), min(need, cap)
        if known:
            self.release_window(rid, total)
        if self.blocks_to_allocate(rid, hit, total, need) > len(self.free_queue):
            self.refuse(hit)
            return None
        if not known:
            self.adopt(rid, hit, total)
        answer = self.allocate_new(rid, need)
        if self.caches():
            self.cache_blocks(request, self.tokens_to_cache(request, total, new, lookahead))
        return answer

    def refuse(self, hit: list[list[BlockId]]) -> None:
        """A step that does not fit changes nothing (but the window's release)."""
        del hit

    def token_cap(self) -> int | None:
        """No request needs a slot past ``max_model_len`` tokens."""
        return self._config.max_model_len

    def caches(self) -> bool:
        return self.caching

    def release_window(self, rid: RequestId, total: int) -> None:
        """Blocks wholly before each window group's window go back, walking down from the
        highest and stopping at the first already null."""
        for g, table in enumerate(self.tables[rid]):
            if self.window(g) is None:
                continue
            end = min(self.window_release_end(g, total), len(table))
            freed = []
            for i in range(end - 1, -1, -1):
                if table[i] == NULL_BLOCK:
                    break
                freed.append(table[i])
                table[i] = NULL_BLOCK
            self.give_back(self.released_order(freed))

    def released_order(self, freed: list[BlockId]) -> list[BlockId]:
        """The walk's order, highest index first."""
        return freed

    def window_release_end(self, g: int, total: int) -> int:
        """Blocks ``[0, end)`` lie wholly before the window of the next token."""
        return self.skipped_tokens(g, total) // self.B

    def blocks_to_allocate(
        self, rid: RequestId, hit: list[list[BlockId]], total: int, need: int
    ) -> int:
        wanted = cdiv(need, self.B)
        if rid in self.tables:
            return sum(max(wanted - len(table), 0) for table in self.tables[rid])
        count = 0
        for g, blocks in enumerate(hit):
            skipped = self.skipped_tokens(g, total) // self.B
            count += max(wanted - max(skipped, len(blocks)), 0)
            count += sum(1 for b in blocks[skipped:] if b != NULL_BLOCK and self.ref[b] == 0)
        return count

    def adopt(self, rid: RequestId, hit: list[list[BlockId]], total: int) -> None:
        """A new request's tables start as its hit (null where its windows skip), every block
        of it touched."""
        tables = []
        for g, blocks in enumerate(hit):
            skipped = self.skipped_tokens(g, total) // self.B
            table = [NULL_BLOCK if i < skipped else b for i, b in enumerate(blocks)]
            table += [NULL_BLOCK] * (skipped - len(table))
            for block in table:
                if block != NULL_BLOCK:
                    self.touch(block)
            tables.append(table)
        self.tables[rid] = tables
        self.num_cached[rid] = [len(table) for table in tables]  # cached already, nulls too

    def allocate_new(self, rid: RequestId, need: int) -> GroupBlocks:
        answer = []
        for table in self.tables[rid]:
            new_blocks = self.take(max(cdiv(need, self.B) - len(table), 0))
            table.extend(new_blocks)
            answer.append(new_blocks)
        return answer

    def tokens_to_cache(self, request: Request, total: int, new: int, lookahead: int) -> int:
        """Committed tokens only: drafts and lookahead slots are not in ``request.tokens``."""
        del lookahead
        return min(total + new, request.num_tokens)

    def cacheable_hashes(self, request: Request, n: int) -> list[BlockHash]:
        """The hashes of the blocks that ``n`` tokens fill: only blocks of committed tokens have
        one."""
        del n
        return self.hashes(request)

    def cache_blocks(self, request: Request, n: int) -> None:
        """Each group's blocks newly filled by committed tokens get their keys; every unbroken
        stretch of them (a null block breaks it) is announced by one event."""
        hashes = self.cacheable_hashes(request, n)
        full = min(n // self.B, len(hashes))
        rid = request.request_id
        for g, table in enumerate(self.tables[rid]):
            start = self.num_cached[rid][g]
            if start >= full:
                continue
            stretch: list[int] = []
            for i in range(start, full):
                if table[i] == NULL_BLOCK:
                    self.announce(request, g, stretch, hashes)
                    stretch = []
                    continue
                self.store(table[i], CachedKey(g, hashes[i]))
                stretch.append(i)
            self.announce(request, g, stretch, hashes)
            self.num_cached[rid][g] = full

    def announce(
        self, request: Request, g: int, stretch: list[int], hashes: Sequence[BlockHash]
    ) -> None:
        """A router learns of an unbroken stretch of stored blocks; of nothing, it hears
        nothing."""
        if stretch:
            self.events.append(self.stored_event(request, g, stretch[0], stretch[-1] + 1, hashes))

    def store(self, block: BlockId, key: CachedKey) -> None:
        self.key_of[block] = key
        self.cache.setdefault(key, []).append(block)

    def stored_event(
        self, request: Request, g: int, first: int, end: int, hashes: Sequence[BlockHash]
    ) -> BlockStored:
        """Blocks ``first .. end-1``, just stored: their own hashes, the one chained before
        them, and precisely the tokens they hold."""
        return BlockStored(
            block_hashes=tuple(hashes[first:end]),
            parent_hash=hashes[first - 1] if first > 0 else None,
            token_ids=tuple(request.tokens[first * self.B : end * self.B]),
            block_size=self.B,
            lora_id=request.extra_key.lora_id,
            group=g,
        )

    # --- the rest -------------------------------------------------------------------------------

    def free(self, request_id: RequestId) -> None:
        rid = check_request_id(request_id)
        tables = self.tables.pop(rid, None)
        self.num_cached.pop(rid, None)
        for table in tables or []:
            self.give_back(self.free_order(table))

    def preempt(self, request_id: RequestId) -> None:
        """Caching at schedule, a preemption has nothing left to cache: it gives back as a
        finish does."""
        self.free(request_id)

    def free_order(self, table: list[BlockId]) -> list[BlockId]:
        """Tail first (so a cached chain's tail is evicted before its head), leading nulls
        dropped."""
        held = list(table)
        while held and held[0] == NULL_BLOCK:
            held.pop(0)
        return held[::-1]

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        rid = check_request_id(request_id)
        if rid not in self.tables:
            raise UnknownRequestError(f"request {rid!r} holds no blocks")
        return [list(table) for table in self.tables[rid]]

    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def usage(self) -> float:
        usable = self._config.num_blocks - 1
        return 0.0 if usable == 0 else 1.0 - self.num_free_blocks() / usable

    def reset_prefix_cache(self) -> bool:
        if any(self.ref):
            return False
        self.cache.clear()
        self.key_of.clear()
        if self.caching:
            self.events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVEvent]:
        events, self.events = self.events, []
        return events

    def view(self) -> RequestManagerView:
        blocks = {
            b: RequestBlockView(self.ref[b], self.key_of.get(b))
            for b in range(1, self._config.num_blocks)
        }
        requests = {
            rid: RequestTableView(tuple(tuple(t) for t in tables), tuple(self.num_cached[rid]))
            for rid, tables in self.tables.items()
        }
        return RequestManagerView(self._config, blocks, tuple(self.free_queue), requests)
