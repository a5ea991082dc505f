"""The mutable, fast block pool: observably identical to ``pagedkv.reference.pool_adapter`` in
exact mode.

Each block's fields live in flat lists and arrays indexed by ``block - first_id`` (the numeric
ones in ``array``s, whose items a full collection does not visit), so an operation touches
only the blocks it names; the free list and the evictor are heaps, and the counts that
``num_free_blocks`` and ``reset_prefix_cache`` need are kept, never recounted. A field holds
plain values (ints, floats, bytes, shared keys), never an object made per block that the
garbage collector would have to walk: on a pool of a million blocks, a tuple per block made
every full collection take longer than all the calls between two of them. A block's tokens are
packed (``TOKEN_BYTES`` each, the content hash's encoding), a ``bytes``, which the collector does
not track: a tuple per filled block, though untracked by the first collection that sees it, was
most of the allocations that start a young collection on a large pool.

Two faces. The ``BlockPool`` protocol (``allocate_mutable``, ``append_tokens``, ``free``, ...)
validates all of its input, in the reference's order and with the shared
``pagedkv.specs.validation``
checks, before it changes anything, so an error leaves the pool as it was. The common call is
checked inline instead, as cheaply as the checks allow: a plain int id in range and held, plain
int tokens (a block's tokens packed once, for their check and their hash), a prefix this pool has
checked before (``checked_prefixes.py``); anything else goes to the shared checks, which raise
the first error in the reference's order with its message. Under it is a trusted
core (``take``, ``take_full``, ``fill``, ``hold``, ``release``, ``touch``, ``set_computed``, ...)
that checks nothing: it is for a caller that only passes ids this pool handed it, and that has
already checked its worst case of blocks against ``num_free_blocks`` (the block space manager).
The core takes content hashes from its caller, who computes each one once.
"""

from __future__ import annotations

import struct
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from heapq import heappop, heappush
from itertools import chain as concatenated
from itertools import starmap
from operator import countOf, itemgetter
from typing import Any, cast

from pagedkv.optimized.block_prefixes import BlockPrefixes, columns_of
from pagedkv.optimized.checked_prefixes import CheckedPrefixes
from pagedkv.optimized.evictor import Evictor
from pagedkv.optimized.free_list import FreeList
from pagedkv.optimized.tokens import TOKEN_BYTES, packed_tokens, unpacked
from pagedkv.specs.compact_state import CompactPool, view_of_pool
from pagedkv.specs.content_hash import (
    ROOT,
    Prefix,
    packed_block_hash,
    packed_blocks_chain,
    remember_block_hash,
)
from pagedkv.specs.errors import DoubleFreeError, OutOfBlocksError, PagedKVError
from pagedkv.specs.pool_view import BlockView, PoolView
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import (
    MAX_TOKEN,
    NEVER_ACCESSED,
    BlockHash,
    BlockId,
    CopyPair,
    ExtraKey,
    PoolConfig,
    Token,
)
from pagedkv.specs.validation import (
    BlockFacts,
    check_append,
    check_appendable,
    check_batch,
    check_block_id,
    check_block_ids,
    check_chains,
    check_content_hash,
    check_full_block,
    check_known,
    check_live,
    check_pool_config,
    check_time,
    in_batch,
)

_PLAIN_SEQUENCES = frozenset({tuple, list})
_pack_one = struct.Struct("<Q").pack

PrefixParts = tuple[BlockHash, int, ExtraKey]
"""A ``Prefix``'s fields: (hash of the block before, tokens before the block, extra key)."""


def parts(prefix: Prefix) -> PrefixParts:
    return (prefix.hash, prefix.num_tokens, prefix.extra_key)


class OptimizedBlockPool:
    """The blocks of one device: ref counts, free list, and with caching the hash index."""

    def __getstate__(self) -> dict[str, object]:
        """A copy (``copy.deepcopy``, pickle: the exhaustive explorer copies managers) without
        the block packer, which is a ``struct.Struct``'s method and cannot be copied."""
        state = dict(self.__dict__)
        del state["_pack_block"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._pack_block = struct.Struct(f"<{self.block_size}Q").pack

    def __init__(self, config: PoolConfig, publish_events: bool = True) -> None:
        check_pool_config(config)
        self._config = config
        self._events: list[KVEvent] | None = [] if publish_events else None
        """The KV events not yet taken (``block_pool.md`` §9); None when nobody reads them (the
        manager's pools), so that they do not pile up."""
        self._first_id = config.first_id
        # Fewer than 30 fields: past 29, CPython 3.11 drops the compact layout that makes each
        # ``self.x`` read fast (``model_tests/tests/test_attribute_layout.py``), so a field is
        # not kept twice (the tables read ``block_size`` and ``caching`` too).
        self.block_size = config.block_size
        self.caching = config.enable_caching
        self._block_bytes = config.block_size * TOKEN_BYTES
        """A full block's packed tokens, in bytes."""
        num_blocks = config.num_blocks
        self._num_blocks = num_blocks
        self._end_id = config.first_id + num_blocks
        self._prefixes = CheckedPrefixes(config.block_size)
        self._checked_prefixes = self._prefixes.entries
        self._pack_block = struct.Struct(f"<{config.block_size}Q").pack
        # Numbers per block sit in flat arrays: a full collection of the garbage collector visits
        # every item of a list (an object each, scattered over memory) and none of an array's.
        self._ref_counts = array("q", [0]) * num_blocks
        self._tokens: list[bytes] = [b""] * num_blocks
        """Each block's tokens, packed (``TOKEN_BYTES`` each)."""
        self._hashes: list[BlockHash | None] = [None] * num_blocks
        self._starts = array("q", [0]) * num_blocks
        self._prefixes_of = BlockPrefixes(num_blocks)
        """A hashed block's ``Prefix`` as ``_starts`` (the tokens before it) and, here, the hash
        of the block before it and its extra key: a tuple per block would be an object per block
        for the garbage collector to walk at every full collection, a list per field a million
        entries."""
        self._computed = bytearray(num_blocks)
        """1 for a computed block: a ``bytearray``, which the collector does not track."""
        self._last_accessed = array("d", [NEVER_ACCESSED]) * num_blocks
        self._access_stamps = array("q", [0]) * num_blocks
        """Which access set ``_last_accessed``: stamps rise with every access, so that an access
        recorded late (``touch``) loses to a later one already applied ("the last call wins")."""
        self._next_access_stamp = 1
        self._free = FreeList(config.block_ids)
        self._evictor = Evictor(self._end_id)
        self._cached: dict[BlockHash, BlockId] = {}
        self.pending_cows: dict[BlockId, tuple[int, BlockId]] = {}
        """destination -> (stamp, source), in the order the copies were requested (stamps rise
        with it). A destination keeps its contents (held or evictable) for as long as its pair is
        pending: the pair goes when the block is blanked or evicted, before it can be taken again.
        So no two pending pairs share a destination, and a dict gives both the order and O(1)
        removal. Only the pool changes it; the manager reads whether it is empty, to skip
        ``clear_copy_on_writes`` after an append that copied nothing."""
        self._next_copy_stamp = 0
        self.num_free = num_blocks
        """Blocks an allocation could take now, free plus evictable (``num_free_blocks``): kept as
        blocks are taken and released, never recounted, and read as a plain field by the manager,
        which compares it with a worst case at every append. Only the pool writes it."""
        self._hits = 0
        self._queries = 0

    @property
    def config(self) -> PoolConfig:
        return self._config

    # --- what the shared checks of pagedkv.specs.validation read
    # ---------------------------------------

    def _facts(self, block: BlockId) -> BlockFacts:
        index = block - self._first_id
        return BlockFacts(
            self._ref_counts[index],
            self._hashes[index] is not None,
            len(self._tokens[index]) // TOKEN_BYTES,
        )

    def _check_live(self, block: BlockId) -> None:
        check_live(block, self._facts(block))

    def _check_known(self, block: BlockId) -> None:
        check_known(block, self._facts(block))

    # --- references: taking and releasing ------------------------------------------------------

    def _blank(self, index: int) -> None:
        """Forget a block's contents, as it is when it sits on the free list."""
        self._tokens[index] = b""
        self._hashes[index] = None
        self._prefixes_of.clear(index)
        self._starts[index] = 0
        self._computed[index] = 0
        self._last_accessed[index] = NEVER_ACCESSED
        self._access_stamps[index] = 0

    def _take_block(self) -> BlockId:
        """A block with ref count 1: the lowest free id, else the evictor's choice, blanked (its
        hash dropped from the index and published, a copy into it dropped). Raises before
        changing anything when neither is left."""
        if not self.num_free:
            raise OutOfBlocksError(
                f"no free or evictable block left (all {self._config.num_blocks} are in use)"
            )
        free_ids = self._free.heap
        if free_ids:
            block = heappop(free_ids)
            self._ref_counts[block - self._first_id] = 1
        else:  # the free list is empty: evict (``_blank`` written out, one call fewer)
            block = self._evictor.pop()
            index = block - self._first_id
            evicted_hash = self._hashes[index]
            assert evicted_hash is not None
            del self._cached[evicted_hash]
            if self._events is not None:
                self._events.append(BlockRemoved((evicted_hash,), 0))
            if self.pending_cows:
                self.pending_cows.pop(block, None)
            self._tokens[index] = b""
            self._hashes[index] = None
            self._prefixes_of.clear(index)
            self._starts[index] = 0
            self._computed[index] = 0
            self._last_accessed[index] = NEVER_ACCESSED
            self._access_stamps[index] = 0
            self._ref_counts[index] = 1
        self.num_free -= 1
        return block

    def _acquire(self, block: BlockId) -> None:
        """One more reference; a cached block at count 0 leaves the evictor by this."""
        index = block - self._first_id
        if self._ref_counts[index] == 0:
            self._evictor.remove(block)
            self.num_free -= 1
        self._ref_counts[index] += 1

    def _release(self, block: BlockId) -> None:
        """One reference fewer. At zero a hashed block stays cached (evictable), pending copy
        into it included: a later hit reads it. Any other block returns to the free list blank,
        and a pending copy into it is dropped: nobody reads it."""
        index = block - self._first_id
        holders = self._ref_counts[index] - 1
        self._ref_counts[index] = holders
        if holders:
            return
        self.num_free += 1
        if self._hashes[index] is None:
            if self.pending_cows:
                self.pending_cows.pop(block, None)
            # _blank, less the fields only a hash sets (_cache sets them, _blank clears them)
            self._tokens[index] = b""
            self._computed[index] = 0
            self._last_accessed[index] = NEVER_ACCESSED
            self._access_stamps[index] = 0
            heappush(self._free.heap, block)
        else:
            # a hashed block is full: its hashed tokens end at its start + a block
            num_hashed = self._starts[index] + self.block_size
            self._evictor.add(block, self._last_accessed[index], num_hashed)

    def _cache(
        self,
        block: BlockId,
        prefix: PrefixParts,
        tokens: bytes,
        content_hash: BlockHash,
    ) -> None:
        """Give a full block (``tokens`` packed) its hash and make it the cached block for that
        hash."""
        index = block - self._first_id
        self._tokens[index] = tokens
        self._hashes[index] = content_hash
        parent, start, key = prefix
        self._prefixes_of.set(index, parent, key)
        self._starts[index] = start
        self._cached[content_hash] = block
        if self._events is not None:
            self._events.append(
                BlockStored(
                    (content_hash,),
                    None if start == 0 else parent,
                    unpacked(tokens),
                    self.block_size,
                    key.lora_id,
                    0,
                )
            )

    # --- allocation ----------------------------------------------------------------------------

    allocate_mutable = _take_block
    """An empty block the caller may append to (``_take_block`` itself, a call fewer)."""

    def allocate_immutable(self, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        """A full block of ``tokens`` after ``prefix``: the cached block when there is one (a hit),
        else a new block that becomes the cached block for its hash. A hit leaves the computed
        mark alone: a block filled in this very step holds no KV until ``mark_computed``."""
        size = self.block_size
        packed = (
            packed_tokens(tokens, self._pack_block)
            if (type(tokens) is tuple or type(tokens) is list) and len(tokens) == size
            else None
        )
        if packed is None:  # not plain ints, or not a full block: the checks say which, in order
            checked = tuple(check_full_block(tokens, size))
            packed = self._pack_block(*checked)
        else:
            checked = tuple(tokens)
        entry = self._checked_prefixes.get(id(prefix))
        key_bytes = (
            entry[1] if entry is not None and entry[0] is prefix else self._prefixes.check(prefix)
        )
        content_hash = None
        if self.caching:
            content_hash = packed_block_hash(prefix.hash, packed, key_bytes)
            remember_block_hash(prefix.hash, checked, prefix.extra_key, content_hash)
        return self.take_full(
            (prefix.hash, prefix.num_tokens, prefix.extra_key), packed, content_hash
        )

    # --- batches: a prompt's full blocks, a sequence's blocks given back ------------------------

    def allocate_immutable_chain(
        self, prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
    ) -> list[BlockId]:
        """``allocate_immutable`` of each full block in turn, each after ``prefix`` extended by
        the blocks before it, all or nothing. Every block is checked, hashed and counted against
        the free blocks before the first is taken: a failure raises what the first failing
        single call would, and changes nothing."""
        chunks, bad = self._checked_token_blocks(token_blocks)
        if not chunks:  # nothing to take: the first block's error, if any, before the prefix's
            if bad is not None:
                raise bad
            return []
        entry = self._checked_prefixes.get(id(prefix))  # the first block's, after its tokens
        if entry is not None and entry[0] is prefix:
            key_bytes = entry[1]
        else:
            try:
                key_bytes = self._prefixes.check(prefix)
            except PagedKVError as error:
                raise in_batch(error, "token_blocks", 0) from None
        hashes = packed_blocks_chain(prefix.hash, chunks, key_bytes) if self.caching else None
        self._check_room(hashes, len(chunks))
        if bad is not None:
            raise bad
        return self.take_full_blocks(
            chunks, hashes, prefix.extra_key, prefix.hash, prefix.num_tokens
        )

    def _checked_token_blocks(
        self, token_blocks: Sequence[Sequence[Token]]
    ) -> tuple[list[bytes], PagedKVError | None]:
        """Each block packed (as the pool keeps it), up to the first that a single
        ``allocate_immutable`` would refuse, and that one's error (None if all pass). Lists or
        tuples of plain int tokens, each a full block, pass in C passes (each block packed
        straight from its sequence, which also checks its length); anything else goes block by
        block through the shared checks."""
        size, pack = self.block_size, self._pack_block
        kind = type(token_blocks)
        if (
            (kind is list or kind is tuple)
            and token_blocks
            and set(map(type, token_blocks)) <= _PLAIN_SEQUENCES
            and countOf(map(type, concatenated.from_iterable(token_blocks)), int)
            == size * len(token_blocks)
        ):
            try:
                chunks = list(starmap(pack, token_blocks))
            except struct.error:  # a block not of ``size`` tokens, or a token out of u64
                chunks = None
            if chunks is not None and b"".join(chunks)[7::8].isascii():  # all <= MAX_TOKEN
                return chunks, None
        checked: list[bytes] = []
        try:
            items = check_batch("token_blocks", token_blocks)
        except PagedKVError as error:
            return checked, error
        for index, tokens in enumerate(items):
            try:
                checked.append(pack(*check_full_block(tokens, size)))
            except PagedKVError as error:
                return checked, in_batch(error, "token_blocks", index)
        return checked, None

    def _check_room(self, hashes: list[BlockHash] | None, count: int) -> None:
        """Raise what the first of ``count`` allocations to run out would: each takes a block
        unless it hits a block already held (the same hash twice would also be a held hit by
        then, but distinct parents make a chain's hashes distinct)."""
        if count <= self.num_free:
            return
        failing = self.num_free if hashes is None else self._first_to_run_out(hashes)
        if failing is None:
            return
        message = (
            f"token_blocks[{failing}]: no free or evictable block left"
            f" (all {self._config.num_blocks} are in use)"
        )
        raise OutOfBlocksError(message)

    def _first_to_run_out(self, hashes: list[BlockHash]) -> int | None:
        """The index of the first block that finds no block left to take, if any."""
        cached, refs, first_id = self._cached, self._ref_counts, self._first_id
        needed = 0
        for index, content_hash in enumerate(hashes):
            hit = cached.get(content_hash)
            if hit is None or not refs[hit - first_id]:
                needed += 1
                if needed > self.num_free:
                    return index
        return None

    def free_blocks(self, blocks: Sequence[BlockId]) -> None:
        """``free`` of each block in the order given, all or nothing: every id is checked, and
        counted against its holders (a block listed twice must be held twice), before the first
        is freed."""
        kind = type(blocks)
        count = len(blocks) if kind is list or kind is tuple else -1
        if not count:
            return
        first_id, refs = self._first_id, self._ref_counts
        held: Sequence[int] = ()
        if (
            count > 1
            and countOf(map(type, blocks), int) == count
            and first_id <= min(blocks)
            and max(blocks) < self._end_id
            and len(set(blocks)) == count
        ):  # plain distinct ids in range: their holders read in one C pass
            indices = list(map(first_id.__rsub__, blocks)) if first_id else blocks
            held = itemgetter(*indices)(refs)
        if not held or 0 in held:  # anything else, one by one in order (a block twice included)
            self._check_frees(blocks)
            indices = [block - first_id for block in blocks]
            held = ()
        # _release for each block, inlined: a sequence's blocks come back together
        hashes, tokens, computed = self._hashes, self._tokens, self._computed
        last_accessed, stamps, starts = self._last_accessed, self._access_stamps, self._starts
        free_heap, cows, size = self._free.heap, self.pending_cows, self.block_size
        evictable: list[BlockId] = []
        blanked = 0
        # the slow path reads each count as it comes: a block listed twice sees its first free
        counts = held or map(refs.__getitem__, indices)
        for block, index, holders in zip(blocks, indices, counts, strict=True):
            if holders > 1:
                refs[index] = holders - 1
                continue
            refs[index] = 0
            if hashes[index] is None:
                blanked += 1
                if cows:
                    cows.pop(block, None)
                tokens[index] = b""
                computed[index] = False
                last_accessed[index] = NEVER_ACCESSED
                stamps[index] = 0
                heappush(free_heap, block)
            else:
                evictable.append(block)
        self.num_free += blanked + len(evictable)
        if len(evictable) > 1:  # their fields read in C passes
            fields = itemgetter(*(map(first_id.__rsub__, evictable) if first_id else evictable))
            # a hashed block is full: its hashed tokens end at its start + a block
            self._evictor.add_all(evictable, fields(last_accessed), fields(starts), size)
        elif evictable:
            index = evictable[0] - first_id
            self._evictor.add(evictable[0], last_accessed[index], starts[index] + size)

    def _check_frees(self, blocks: Sequence[BlockId]) -> None:
        """Raise what the first failing ``free`` of ``blocks`` in turn would raise."""
        freed: Counter[BlockId] = Counter()
        for index, block in enumerate(check_batch("blocks", blocks)):
            try:
                check_block_id(self._config, block)
                freed[block] += 1
                if freed[block] > self._ref_counts[block - self._first_id]:
                    raise DoubleFreeError(f"block {block} is already free (ref count 0)")
            except PagedKVError as error:
                raise in_batch(error, "blocks", index) from None

    # --- appending, promotion and copy-on-write ------------------------------------------------

    def cow_if_not_appendable(self, block: BlockId) -> BlockId:
        """The block to append into: ``block`` itself when only one holder has it, else a new copy
        (the caller's reference moves to the copy and the pair waits for the copy kernel)."""
        return self._copy_if_shared(check_appendable(self._config, block, self._facts))

    def _copy_if_shared(self, block: BlockId) -> BlockId:
        index = block - self._first_id
        if self._ref_counts[index] == 1:
            return block
        copy = self._take_block()
        self._tokens[copy - self._first_id] = self._tokens[index]
        self._release(block)
        self._record_copy(block, copy)
        return copy

    def _record_copy(self, source: BlockId, destination: BlockId) -> None:
        """Queue a copy for the kernel, which reads every source before writing any destination.
        A source still waiting for its own copy holds no data yet, so the copy reads from where
        that one would (one dict lookup: pending copies are keyed by destination)."""
        earlier = self.pending_cows.get(source)
        if earlier is not None:
            source = earlier[1]
        self.pending_cows[destination] = (self._next_copy_stamp, source)
        self._next_copy_stamp += 1

    def append_tokens(self, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> BlockId:
        """Append ``tokens`` to ``block`` and return the block the caller holds now. A block that
        fills gets its hash; if another block already holds that hash, the caller switches to it
        and releases its own (dedup, no copy needed). Otherwise a shared block is copied first
        (copy-on-write) and the caller appends into its copy."""
        index = block - self._first_id if type(block) is int else -1
        kind = type(tokens)
        if 0 <= index < self._num_blocks and (kind is tuple or kind is list):
            # the common call, checked at C speed: a held block, plain tokens that fit, a prefix
            # checked before; anything else goes to the shared checks, which raise in order
            holders = self._ref_counts[index]
            count = len(tokens)
            packed = None
            if holders and (
                (type(token := tokens[0]) is int and 0 <= token <= MAX_TOKEN)
                if count == 1
                else count > 1
                and (
                    packed := packed_tokens(
                        tokens, self._pack_block if count == self.block_size else None
                    )
                )
                is not None
            ):  # the block and the tokens pass: the prefix is checked next
                held = self._tokens[index]
                room = self.block_size - len(held) // TOKEN_BYTES
                entry = self._checked_prefixes.get(id(prefix))
                if entry is not None and entry[0] is prefix:
                    key_bytes = entry[1]
                elif count < room:  # the caller may append under this prefix again: remember it
                    key_bytes = self._prefixes.admit(prefix)
                else:  # a block filled (or too many tokens) takes no more under this prefix
                    key_bytes = self._prefixes.check(prefix)
                new_tokens = tokens if type(tokens) is tuple else tuple(tokens)
                if packed is None:  # one token, checked
                    packed = _pack_one(token)
                if count < room and holders == 1:  # the caller's own block, not filled: in place
                    self._tokens[index] = held + packed
                    return block
                if count <= room:
                    return self._append(block, prefix, new_tokens, key_bytes, packed)
        checked_block, checked = check_append(self._config, block, prefix, tokens, self._facts)
        return self._append(checked_block, prefix, tuple(checked), self._prefixes.admit(prefix))

    def _append(
        self,
        block: BlockId,
        prefix: Prefix,
        new_tokens: tuple[Token, ...],
        key_bytes: bytes,
        packed: bytes | None = None,
    ) -> BlockId:
        """``append_tokens`` once its input is checked; ``packed``: the new tokens' encoding when
        the check made it (they are then encoded once, for both the block and its hash)."""
        index = block - self._first_id
        held = self._tokens[index]
        if packed is None:
            packed = struct.pack(f"<{len(new_tokens)}Q", *new_tokens)
        if len(held) + len(packed) < self._block_bytes:
            if self._ref_counts[index] == 1:  # the caller's own block: in place
                self._tokens[index] = held + packed
                return block
            return self.fill(block, None, packed, None)  # a copy may raise, first thing
        content_hash = None
        parent, start, key = prefix.hash, prefix.num_tokens, prefix.extra_key
        if self.caching:
            filled = held + packed if held else packed
            content_hash = packed_block_hash(parent, filled, key_bytes)
            whole = unpacked(held) + new_tokens if held else new_tokens
            remember_block_hash(parent, whole, key, content_hash)
            if self._ref_counts[index] == 1 and content_hash not in self._cached:
                # the common fill: the caller's own block becomes the cached one (``fill``)
                self._cache(block, (parent, start, key), filled, content_hash)
                return block
        return self.fill(block, (parent, start, key), packed, content_hash)

    def clear_copy_on_writes(self) -> list[CopyPair]:
        """The (source, destination) pairs the copy kernel must run, in order; the list empties."""
        if not self.pending_cows:
            return []
        pairs = [(source, destination) for destination, (_, source) in self.pending_cows.items()]
        self.pending_cows.clear()
        return pairs

    # --- freeing and forking -------------------------------------------------------------------

    def free(self, block: BlockId) -> None:
        if (
            type(block) is int
            and self._first_id <= block < self._end_id
            and self._ref_counts[block - self._first_id]
        ):
            self._release(block)
            return
        check_block_id(self._config, block)
        if self._ref_counts[block - self._first_id] == 0:
            raise DoubleFreeError(f"block {block} is already free (ref count 0)")
        self._release(block)

    def fork(self, chain: Sequence[BlockId]) -> list[BlockId]:
        """Share every block of ``chain`` with one more holder; nothing is allocated."""
        blocks = check_block_ids(self._config, chain)
        for block in blocks:
            self._check_live(block)
        self.hold_all(blocks)
        return blocks

    # --- access times, computed marks and the computed prefix ----------------------------------

    def mark_accessed(self, blocks: Sequence[BlockId], now: float) -> None:
        """Record ``now`` as the last access of held or cached blocks (it orders eviction)."""
        time = check_time(now)
        checked = check_block_ids(self._config, blocks)
        for block in checked:
            self._check_known(block)
        stamp = self.new_access_stamp()
        for block in checked:
            index = block - self._first_id
            self._last_accessed[index] = time
            self._access_stamps[index] = stamp
            if block in self._evictor:
                # a hashed block is full: its hashed tokens end at its start + a block
                num_hashed = self._starts[index] + self.block_size
                self._evictor.add(block, time, num_hashed)

    def mark_computed(self, blocks: Sequence[BlockId]) -> None:
        """Record that the KV of these blocks is written. Only full blocks of a caching pool keep
        the mark: a partial block will still change, and without caching nothing is reused."""
        checked = check_block_ids(self._config, blocks)
        for block in checked:
            self._check_known(block)
        if not self.caching:
            return
        full, tokens = self._block_bytes, self._tokens
        self.set_computed(b for b in checked if len(tokens[b - self._first_id]) == full)

    def common_computed_prefix(self, chains: Sequence[Sequence[BlockId]]) -> list[BlockId]:
        """The longest run of leading computed blocks that every chain shares. A chain's last block
        never counts: the model must compute at least one token of every sequence."""
        checked = check_chains(self._config, chains)
        for chain in checked:
            for block in chain:
                self._check_live(block)
        if not self.caching or not checked:
            return []
        runs = [self.computed_run(chain, 0, len(chain) - 1) for chain in checked]
        return checked[0][: common_length(checked, min(runs))]

    # --- the trusted core: ids this pool handed out, room already checked ----------------------

    take = _take_block
    """A new empty block (``allocate_mutable``): the same method under its core name, a call
    fewer per block on the manager's hot path."""

    def take_full(
        self, prefix: PrefixParts, tokens: bytes, content_hash: BlockHash | None
    ) -> BlockId:
        """``allocate_immutable`` of a full block (``tokens`` packed) whose hash (None without
        caching) the caller computed: a hit, or a new block cached under ``content_hash``."""
        if content_hash is None:
            block = self._take_block()
            self._tokens[block - self._first_id] = tokens
            return block
        hit = self._cached.get(content_hash)
        if hit is not None:
            self._queries += 1
            self._hits += 1
            self._acquire(hit)
            return hit
        block = self._take_block()  # may raise: count the lookup only once it cannot
        self._queries += 1
        self._cache(block, prefix, tokens, content_hash)
        return block

    def take_full_blocks(
        self,
        blocks: Sequence[bytes],
        hashes: Sequence[BlockHash] | None,
        extra_key: ExtraKey,
        parent: BlockHash = ROOT,
        start: int = 0,
    ) -> list[BlockId]:
        """``take_full`` for each of a sequence's consecutive full blocks (packed) in turn, their
        hashes
        (None without caching) given by the caller: block ``i`` follows ``hashes[i - 1]``
        (``parent`` first) and ``start + i * block_size`` tokens. One call for a whole prompt,
        so the loop is written out: a hit is a held block more, a miss takes the lowest free
        block or evicts (fields the new contents overwrite are not blanked first)."""
        if hashes is None:
            taken = [self._take_block() for _ in blocks]
            for block, tokens in zip(taken, blocks, strict=True):
                self._tokens[block - self._first_id] = tokens
            return taken
        cached, refs, first_id, size = (
            self._cached,
            self._ref_counts,
            self._first_id,
            self.block_size,
        )
        all_tokens, all_hashes, starts = self._tokens, self._hashes, self._starts
        free_heap, events, evictor_remove = self._free.heap, self._events, self._evictor.remove
        evictor_pop, cows = self._evictor.pop, self.pending_cows
        computed, last_accessed, stamps = self._computed, self._last_accessed, self._access_stamps
        taken = []
        # the indices of the blocks taken and the hashes before them: their prefixes are set
        # together once the loop is done (they share the extra key)
        filled: list[int] = []
        parents: list[BlockHash] = []
        hits = revived = 0
        for tokens, content_hash in zip(blocks, hashes, strict=True):
            hit = cached.get(content_hash)
            if hit is not None:
                hits += 1
                holders = refs[hit - first_id]
                if not holders:  # leaves the evictor before any later miss may evict
                    evictor_remove(hit)
                    revived += 1
                refs[hit - first_id] = holders + 1
                taken.append(hit)
            else:
                if free_heap:
                    block = heappop(free_heap)
                    index = block - first_id
                else:  # eviction, as ``_take_block`` does it
                    block = evictor_pop()
                    index = block - first_id
                    evicted_hash = all_hashes[index]
                    assert evicted_hash is not None
                    del cached[evicted_hash]
                    if events is not None:
                        events.append(BlockRemoved((evicted_hash,), 0))
                    if cows:
                        cows.pop(block, None)
                    computed[index] = 0
                    last_accessed[index] = NEVER_ACCESSED
                    stamps[index] = 0
                refs[index] = 1
                all_tokens[index] = tokens
                all_hashes[index] = content_hash
                filled.append(index)
                parents.append(parent)
                starts[index] = start
                cached[content_hash] = block
                if events is not None:
                    events.append(
                        BlockStored(
                            (content_hash,),
                            None if start == 0 else parent,
                            unpacked(tokens),
                            size,
                            extra_key.lora_id,
                            0,
                        )
                    )
                taken.append(block)
            parent = content_hash
            start += size
        if filled:
            self._prefixes_of.set_all(filled, parents, extra_key)
        self.num_free -= len(taken) - hits + revived
        self._hits += hits
        self._queries += len(taken)
        return taken

    def fill(
        self,
        block: BlockId,
        prefix: PrefixParts | None,
        tokens: bytes,
        content_hash: BlockHash | None,
    ) -> BlockId:
        """``append_tokens`` of packed tokens, for a caller that passes the hash of the block's
        whole contents when they fill it in a caching pool (None otherwise); ``prefix`` is stored
        with that hash."""
        if content_hash is not None:
            cached = self._cached.get(content_hash)
            if cached is not None:
                self._switch_to_cached(block, cached)
                return cached
        if self._ref_counts[block - self._first_id] > 1:
            block = self._copy_if_shared(block)
        index = block - self._first_id
        filled = self._tokens[index] + tokens
        self._tokens[index] = filled
        if content_hash is not None:
            assert prefix is not None
            self._cache(block, prefix, filled, content_hash)
        return block

    def append_in_place(self, block: BlockId, tokens: bytes) -> bool:
        """Append packed tokens that do not fill ``block``, if its only holder is the caller (no
        copy, no hash: the block stays the caller's); False, changing nothing, if it is shared."""
        index = block - self._first_id
        if self._ref_counts[index] != 1:
            return False
        self._tokens[index] += tokens
        return True

    def _switch_to_cached(self, block: BlockId, cached: BlockId) -> None:
        """Dedup: the caller's reference moves from its own block to the cached one, which has
        (or will have) the whole content, so no copy even when ``block`` is shared. Its computed
        mark stays as it is, as on a hit."""
        self._release(block)
        self._acquire(cached)

    hold = _acquire
    """One more reference to a held (or cached) block."""

    def hold_all(self, blocks: Iterable[BlockId]) -> None:
        for block in blocks:
            self._acquire(block)

    release = _release
    """One reference fewer to a held block (``free`` without the checks)."""

    def new_access_stamp(self) -> int:
        """A stamp later than every access recorded so far."""
        stamp = self._next_access_stamp
        self._next_access_stamp = stamp + 1
        return stamp

    def touch(self, block: BlockId, now: float, stamp: int) -> None:
        """Record an access of a held block that a caller kept aside until now: it takes effect
        only if no later access (a higher stamp) reached the block first."""
        index = block - self._first_id
        if stamp > self._access_stamps[index]:
            self._access_stamps[index] = stamp
            self._last_accessed[index] = now

    def set_computed(self, blocks: Iterable[BlockId]) -> None:
        """Mark full blocks of a caching pool computed (the caller knows they are full)."""
        computed, first_id = self._computed, self._first_id
        for block in blocks:
            computed[block - first_id] = 1

    def is_computed(self, block: BlockId) -> bool:
        return self._computed[block - self._first_id] == 1

    def computed_run(self, blocks: Sequence[BlockId], start: int, end: int) -> int:
        """The first index in ``start .. end`` whose block is not computed (``end`` if all are),
        given that ``blocks[:start]`` are."""
        computed, first_id = self._computed, self._first_id
        while start < end and computed[blocks[start] - first_id]:
            start += 1
        return start

    def tokens_of(self, block: BlockId) -> bytes:
        """The block's tokens, packed."""
        return self._tokens[block - self._first_id]

    def hash_of(self, block: BlockId) -> BlockHash | None:
        return self._hashes[block - self._first_id]

    def prefix_of(self, block: BlockId) -> PrefixParts | None:
        index = block - self._first_id
        found = self._prefixes_of.get(index)
        if found is None:
            return None
        return (found[0], self._starts[index], found[1])

    # --- counts, hit rate and reset ------------------------------------------------------------

    def num_free_blocks(self) -> int:
        """Blocks an allocation could take now: free plus evictable, i.e. all but the used."""
        return self.num_free

    def hit_rate(self) -> float:
        """Hits over lookups of ``allocate_immutable``; 0.0 before any, -1.0 without caching."""
        if not self.caching:
            return -1.0
        return self._hits / self._queries if self._queries else 0.0

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block, only when no block is in use (else nothing changes).

        With nothing in use every block is free (already blank) or evictable, so blanking the
        evictable blocks onto the free list (and dropping the copies into them) gives a fresh
        pool."""
        if self.num_free < self._num_blocks:
            return False
        for block in self._evictor.blocks():
            self._blank(block - self._first_id)
            self._free.push(block)
        self._evictor.clear()
        self._cached.clear()
        self.pending_cows.clear()
        self._hits = 0
        self._queries = 0
        if self._events is not None:
            self._events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVEvent]:
        """The KV events published since the last call, oldest first (none when built with
        ``publish_events=False``)."""
        events = self._events
        if events is None:
            return []
        self._events = []
        return events

    # --- the observable state ------------------------------------------------------------------

    def _render(self, index: int) -> BlockView:
        found = self._prefixes_of.get(index)
        return BlockView(
            ref_count=self._ref_counts[index],
            tokens=unpacked(self._tokens[index]),
            content_hash=self._hashes[index],
            prefix=None if found is None else Prefix(found[0], self._starts[index], found[1]),
            computed=self._computed[index] == 1,
            last_accessed=self._last_accessed[index],
        )

    def block(self, block: BlockId) -> BlockView:
        return self._render(check_block_id(self._config, block) - self._first_id)

    def lookup(self, content_hash: BlockHash) -> BlockId | None:
        return self._cached.get(check_content_hash(content_hash))

    def view(self, untouched: Mapping[BlockId, tuple[int, float]] | None = None) -> PoolView:
        """Free blocks render from their (blank) fields, so the invariants check the blanking.
        ``untouched`` maps held blocks to accesses a caller keeps aside, (stamp, time): each
        shows as it will once ``touch`` gives it to the block. Rendered from ``compact``, so
        the two never say different things."""
        return view_of_pool(self.compact(untouched))

    def fingerprint(self) -> tuple[object, ...]:
        """Everything ``compact`` reads of this pool, copied at C speed (bytes of the arrays,
        shallow copies of the lists and dicts, whose items are immutable): equal fingerprints
        mean an equal ``compact`` for the same ``untouched``. A reader that keeps the compact
        state between calls compares these to know whether its copy still holds
        (``model_tests/oracle/incremental_compact.py``), at a quarter of ``compact``'s cost."""
        return (
            self._ref_counts.tobytes(),
            self._tokens.copy(),
            self._hashes.copy(),
            self._starts.tobytes(),
            self._prefixes_of.fingerprint(),
            bytes(self._computed),
            self._last_accessed.tobytes(),
            self._access_stamps.tobytes(),
            self._free.heap.copy(),  # the same list is the same set (a copy, not a set: cheaper)
            self._evictor.fingerprint(),
            self._cached.copy(),
            self.pending_cows.copy(),
            self._hits,
            self._queries,
        )

    def compact_of(
        self,
        fingerprint: tuple[object, ...],
        untouched: Mapping[BlockId, tuple[int, float]] | None = None,
    ) -> CompactPool:
        """``compact`` as it was when ``fingerprint`` was taken of this pool (its configuration
        never changes): the same columns, read from the fingerprint's copies instead of the
        pool. A reader that compares fingerprints after each call builds the columns only when
        it must look at them (``model_tests/oracle/incremental_compact.py``); that they are
        ``compact``'s is held at every checkpoint of ``pagedkv soak``, and after every call of
        random walks by ``model_tests/tests/test_soak_paired.py``."""
        (
            ref_counts,
            tokens,
            hashes,
            starts,
            prefixes,
            computed,
            accessed,
            access_stamps,
            free,
            evictable,
            cached,
            cows,
            hits,
            queries,
        ) = cast(tuple[Any, ...], fingerprint)
        last_accessed = array("d", accessed).tolist()
        if untouched:
            first_id, stamps = self._first_id, array("q", access_stamps)
            for block, (stamp, now) in untouched.items():
                if stamp > stamps[block - first_id]:
                    last_accessed[block - first_id] = now
        parents, keys = columns_of(prefixes)
        return CompactPool(
            self._config,
            array("q", ref_counts).tolist(),
            tokens,
            hashes,
            parents,
            array("q", starts).tolist(),
            keys,
            [mark == 1 for mark in computed],
            last_accessed,
            frozenset(free),
            frozenset(evictable),
            cached,
            {},
            tuple((source, destination) for destination, (_, source) in cows.items())
            if cows
            else (),
            hits,
            queries,
        )

    def compact(self, untouched: Mapping[BlockId, tuple[int, float]] | None = None) -> CompactPool:
        """The whole observable state as columns (``specs/compact_state.py``): this pool's own
        lists, to be compared at once, never kept or changed; the columns kept out of the
        collector's sight (arrays, ``BlockPrefixes``) are copied into lists, as the compact state
        holds them."""
        last_accessed = self._last_accessed.tolist()
        if untouched:
            first_id, stamps = self._first_id, self._access_stamps
            for block, (stamp, now) in untouched.items():
                if stamp > stamps[block - first_id]:
                    last_accessed[block - first_id] = now
        cows = self.pending_cows
        parents, keys = self._prefixes_of.columns()
        return CompactPool(
            self._config,
            self._ref_counts.tolist(),
            self._tokens,
            self._hashes,
            parents,
            self._starts.tolist(),
            keys,
            [mark == 1 for mark in self._computed],
            last_accessed,
            self._free.blocks(),
            self._evictor.blocks(),
            self._cached,
            {},
            tuple((source, destination) for destination, (_, source) in cows.items())
            if cows
            else (),
            self._hits,
            self._queries,
        )


def common_length(chains: Sequence[Sequence[BlockId]], limit: int) -> int:
    """The length of the longest list that is a prefix of every chain, at most ``limit``. Prefix
    equality is monotone in the length, so a binary search over C-speed slice comparisons finds
    it."""
    first = chains[0]
    others = chains[1:]
    low, high = 0, limit
    if all(other[:high] == first[:high] for other in others):
        return high
    while low < high - 1:  # first[:low] is common, first[:high] is not
        middle = (low + high) // 2
        if all(other[:middle] == first[:middle] for other in others):
            low = middle
        else:
            high = middle
    return low
