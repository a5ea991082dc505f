"""Deliberately broken variants of ``IndependentRequestManager``: the request level's fixtures
that the oracle must reject (``specs/corpus.md``).

Each class gets exactly one clause of the request level wrong, named by the class and stated in
its docstring, by overriding one small step of the independent manager. None of the bugs is a
choice the ``vllm-v1`` profile allows; those marked "(safety)" break a promise every correct
engine keeps, whatever its policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pagedkv.model_tests.independent.request_manager import IndependentRequestManager
from pagedkv.specs.content_hash import ROOT
from pagedkv.specs.errors import UnknownRequestError
from pagedkv.specs.request_hashes import block_identifiers, request_block_hash
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    BlockStored,
    GroupBlocks,
    KVEvent,
    Request,
    RequestConfig,
    RequestId,
)
from pagedkv.specs.request_validation import check_request_id
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockHash, BlockId, ExtraKey

# --- the hit ------------------------------------------------------------------------------------


class RequestHitNotCapped(IndependentRequestManager):
    """A hit may cover every token, the last one too: a fully cached prompt computes nothing,
    so the last token's logits are never computed."""

    def hit_cap(self, request: Request) -> int:
        return request.num_tokens


class RequestWindowHitShort(IndependentRequestManager):
    """A sliding-window group serves a hit with one cached block fewer than its window needs
    before the hit's end: the window reads a block that is not there."""

    def contiguous_needed(self, g: int) -> int:
        return max(0, super().contiguous_needed(g) - 1)


class RequestHybridTakesFullLength(IndependentRequestManager):
    """With full-attention and window groups, the hit is as long as the full-attention groups
    can serve; the window groups are not asked (and point at the null block where they miss)."""

    def longest_hit(self, most: int, hashes: Sequence[BlockHash]) -> int:
        full = [g for g in range(len(self.config.groups)) if self.window(g) is None]
        k = most
        while k > 0 and not all(self.serves(g, k, hashes) for g in full):
            k -= 1
        return k


class RequestLookupTakesLatest(IndependentRequestManager):
    """Of two blocks cached under one key, a lookup takes the latest inserted, not the earliest."""

    def lookup(self, key: CachedKey) -> BlockId | None:
        blocks = self.cache.get(key)
        return blocks[-1] if blocks else None


# --- what is cached -----------------------------------------------------------------------------


class RequestCachesDrafts(IndependentRequestManager):
    """Draft tokens count as committed: the block holding them is cached too, under the hash of
    the committed tokens in it (a key no committed block has)."""

    def tokens_to_cache(self, request: Request, total: int, new: int, lookahead: int) -> int:
        return total + new

    def cacheable_hashes(self, request: Request, n: int) -> list[BlockHash]:
        hashes = super().cacheable_hashes(request, n)
        if n > request.num_tokens and request.num_tokens % self.B:
            start = len(hashes) * self.B
            ids = block_identifiers(request.multimodal, start, start + self.B)
            parent = hashes[-1] if hashes else ROOT
            tokens = request.tokens[start:]
            hashes.append(request_block_hash(parent, tokens, request.extra_key, ids))
        return hashes


class RequestCachesLookahead(IndependentRequestManager):
    """Lookahead slots count as computed tokens: committed tokens the step does not compute yet
    are cached, so a hit may read KV never written."""

    def tokens_to_cache(self, request: Request, total: int, new: int, lookahead: int) -> int:
        return min(total + new + lookahead, request.num_tokens)


class RequestCachesWhenOff(IndependentRequestManager):
    """With prefix caching off, full blocks are still cached (and announced)."""

    def caches(self) -> bool:
        return True


class RequestCacheDeduplicates(IndependentRequestManager):
    """A block computed under a key that is already cached is not cached itself (vLLM keeps
    both): it goes back to the front of the free queue, uncached, when freed."""

    def store(self, block: BlockId, key: CachedKey) -> None:
        if key not in self.cache:
            super().store(block, key)


# --- None and the count -------------------------------------------------------------------------


class RequestNoneStillTouches(IndependentRequestManager):
    """An allocation that does not fit (``None``) has already touched its hit's blocks: their
    ref counts stay raised with no table holding them."""

    def refuse(self, hit: list[list[BlockId]]) -> None:
        for blocks in hit:
            for block in blocks:
                if block != NULL_BLOCK:
                    self.touch(block)


class RequestNoneStillAllocates(IndependentRequestManager):
    """An allocation that does not fit takes the blocks that are free before answering
    ``None``: they are lost."""

    def refuse(self, hit: list[list[BlockId]]) -> None:
        self.take(len(self.free_queue))


class RequestCountSkipsEvictableHits(IndependentRequestManager):
    """The count of blocks to allocate leaves out the hit's blocks that are in the free queue
    (touching them takes them out of it): a step that does not fit gets fewer blocks than it
    needs instead of ``None``."""

    def blocks_to_allocate(
        self, rid: RequestId, hit: list[list[BlockId]], total: int, need: int
    ) -> int:
        bare = [[NULL_BLOCK] * len(blocks) for blocks in hit]
        return super().blocks_to_allocate(rid, bare, total, need)


class RequestIgnoresMaxModelLen(IndependentRequestManager):
    """Slots are allocated past ``max_model_len``."""

    def token_cap(self) -> int | None:
        return None


# --- the sliding window -------------------------------------------------------------------------


class RequestWindowNotReleased(IndependentRequestManager):
    """Blocks that left a sliding window are kept until the request is freed."""

    def window_release_end(self, g: int, total: int) -> int:
        return 0


class RequestWindowReleasesOneMore(IndependentRequestManager):
    """The window release gives back one block too many: the first block still inside the
    window."""

    def window_release_end(self, g: int, total: int) -> int:
        end = super().window_release_end(g, total)
        return end + 1 if self.skipped_tokens(g, total) > 0 else end


class RequestWindowReleaseAscending(IndependentRequestManager):
    """Blocks that left the window go back lowest index first (vLLM walks down from the highest,
    so the block nearest the window is evicted first)."""

    def released_order(self, freed: list[BlockId]) -> list[BlockId]:
        return freed[::-1]


class RequestWindowReleaseAfterAllocating(IndependentRequestManager):
    """Blocks that left the window go back only once the step's new blocks are taken (and not
    at all when the answer is ``None``)."""

    def __init__(self, config: RequestConfig) -> None:
        super().__init__(config)
        self.pending_release: int | None = None

    def release_window(self, rid: RequestId, total: int) -> None:
        self.pending_release = total

    def allocate_new(self, rid: RequestId, need: int) -> GroupBlocks:
        answer = super().allocate_new(rid, need)
        if self.pending_release is not None:
            super().release_window(rid, self.pending_release)
            self.pending_release = None
        return answer

    def refuse(self, hit: list[list[BlockId]]) -> None:
        self.pending_release = None


class RequestWindowReleaseKeepsEntry(IndependentRequestManager):
    """(safety) A block that left the window goes back to the pool, but the table keeps it:
    the request's ``free`` gives it back a second time, maybe while another request holds it."""

    def release_window(self, rid: RequestId, total: int) -> None:
        before = [list(table) for table in self.tables[rid]]
        super().release_window(rid, total)
        for g, table in enumerate(self.tables[rid]):
            for i, block in enumerate(table):
                if block == NULL_BLOCK and before[g][i] != NULL_BLOCK:
                    table[i] = before[g][i]


# --- giving back, taking, evicting --------------------------------------------------------------


class RequestFreeHeadFirst(IndependentRequestManager):
    """``free`` gives a request's blocks back head first: a cached chain's head is evicted before
    its tail."""

    def free_order(self, table: list[BlockId]) -> list[BlockId]:
        return super().free_order(table)[::-1]


class RequestPreemptKeepsBlocks(IndependentRequestManager):
    """``preempt`` forgets the request but gives none of its blocks back: they stay held by
    nobody's table."""

    def preempt(self, request_id: RequestId) -> None:
        rid = check_request_id(request_id)
        self.tables.pop(rid, None)
        self.num_cached.pop(rid, None)


class RequestUncachedToBack(IndependentRequestManager):
    """Blocks given back uncached go to the back of the free queue, behind the cached ones, so
    cached blocks are evicted while blank ones wait."""

    def give_back(self, blocks: Sequence[BlockId]) -> None:
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.free_queue.append(block)


class RequestTakesFromBack(IndependentRequestManager):
    """New blocks come from the back of the free queue (the most recently freed cached block is
    evicted first)."""

    def take(self, n: int) -> list[BlockId]:
        self.free_queue.reverse()
        taken = super().take(n)
        self.free_queue.reverse()
        return taken


class RequestEvictionSilent(IndependentRequestManager):
    """A cached block evicted on its way out of the free queue is forgotten without a
    ``BlockRemoved`` event: a router goes on routing to it."""

    def evict(self, block: BlockId) -> None:
        before = len(self.events)
        super().evict(block)
        del self.events[before:]


class RequestEvictionKeepsKey(IndependentRequestManager):
    """(safety) A cached block taken from the free queue keeps its key in the cache map: a later
    hit gets a block that now holds another request's tokens."""

    def evict(self, block: BlockId) -> None:
        key = self.key_of.get(block)
        super().evict(block)
        if key is not None:
            self.cache.setdefault(key, []).append(block)


class RequestHitTouchKeepsRefCount(IndependentRequestManager):
    """(safety) Touching a hit block takes it out of the free queue but does not count the new
    holder: its ref count says 1 while two requests hold it."""

    def touch(self, block: BlockId) -> None:
        if self.ref[block] == 0:
            self.free_queue.remove(block)
            self.ref[block] = 1


# --- events, counts, queries --------------------------------------------------------------------


class RequestEventsRepeatHit(IndependentRequestManager):
    """Adopting a hit announces its blocks again with a ``BlockStored`` event, though nothing was
    stored."""

    def adopt(self, rid: RequestId, hit: list[list[BlockId]], total: int) -> None:
        super().adopt(rid, hit, total)
        for g, blocks in enumerate(hit):
            held = [b for b in blocks if b != NULL_BLOCK]
            if held:
                keys = tuple(self.key_of[b].block_hash for b in held)
                self.events.append(BlockStored(keys, None, (), self.B, None, g))


class RequestStoredEventOneTooMany(IndependentRequestManager):
    """A ``BlockStored`` event lists one hash past the run it stored: a block of the request not
    yet computed, never stored, is announced as cached."""

    def stored_event(
        self, request: Request, g: int, first: int, end: int, hashes: Sequence[BlockHash]
    ) -> BlockStored:
        event = super().stored_event(request, g, first, end, hashes)
        if end < len(hashes):
            event = replace(event, block_hashes=(*event.block_hashes, hashes[end]))
        return event


class RequestResetWhileInUse(IndependentRequestManager):
    """``reset_prefix_cache`` clears the cache even while requests hold blocks."""

    def reset_prefix_cache(self) -> bool:
        held = list(self.ref)
        self.ref = [0] * len(held)
        done = super().reset_prefix_cache()
        self.ref = held
        return done


class RequestUsageCountsNull(IndependentRequestManager):
    """``usage`` divides by every block, the null block too."""

    def usage(self) -> float:
        return 1.0 - self.num_free_blocks() / self.config.num_blocks


class RequestFreeCountSkipsCached(IndependentRequestManager):
    """``num_free_blocks`` leaves out the cached blocks in the free queue (they are evictable,
    hence free)."""

    def num_free_blocks(self) -> int:
        return sum(1 for b in self.free_queue if b not in self.key_of)


class RequestTakeEventsKeeps(IndependentRequestManager):
    """``take_events`` returns the events but does not empty the queue."""

    def take_events(self) -> list[KVEvent]:
        return list(self.events)


class RequestBlockIdsHideNulls(IndependentRequestManager):
    """``get_block_ids`` leaves the null block out of a sliding window's table."""

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        return [[b for b in t if b != NULL_BLOCK] for t in super().get_block_ids(request_id)]


class RequestFreeUnknownRaises(IndependentRequestManager):
    """``free`` of a request that holds no blocks raises (vLLM: a no-op, the request was aborted
    before its first allocation)."""

    def free(self, request_id: RequestId) -> None:
        if request_id not in self.tables:
            raise UnknownRequestError(f"request {request_id!r} holds no blocks")
        super().free(request_id)


# --- the hash's keys ----------------------------------------------------------------------------


class RequestHashIgnoresSalt(IndependentRequestManager):
    """(safety) The cache salt is left out of the block hashes: requests of different salts share
    blocks."""

    def hashes(self, request: Request) -> list[BlockHash]:
        key = ExtraKey(lora_id=request.extra_key.lora_id)
        return super().hashes(replace(request, extra_key=key))


class RequestHashIgnoresLora(IndependentRequestManager):
    """(safety) The LoRA id is left out of the block hashes: requests of different adapters
    share blocks."""

    def hashes(self, request: Request) -> list[BlockHash]:
        key = ExtraKey(cache_salt=request.extra_key.cache_salt)
        return super().hashes(replace(request, extra_key=key))


class RequestHashIgnoresMultimodal(IndependentRequestManager):
    """(safety) Multimodal identifiers are left out of the block hashes: two prompts with the
    same placeholder tokens for different images share blocks."""

    def hashes(self, request: Request) -> list[BlockHash]:
        return super().hashes(replace(request, multimodal=()))
