"""One sequence's block table, kept mutable so that a scheduler step costs O(new tokens), not
O(sequence length); at the end, the sequence group that holds the tables (each holds the other).

Logical block ``i`` holds tokens ``i * block_size .. (i + 1) * block_size - 1`` and lives in
physical block ``blocks[i]``. Every function makes the same pool calls in the same order as
``pagedkv.reference.block_table``, so the pool ends in the same state; the table adds what lets the
three questions a scheduler asks of every running sequence at every step cost O(1) amortized:

- ``last_hash``: with caching, the content hash of the last full block, so that filling the next
  one hashes that block alone, once, after its parent's hash
  (``pagedkv.reference.block_table.prefix_at`` starts over from the root each time). The hashes
  of the blocks before it are never needed again (the pool keeps each block's own).
- what the garbage collector walks: a full collection visits every reference of every live
  container, and with a million blocks per-sequence lists of ids and hashes made its pauses grow
  faster with the pool than the work itself. ``tokens`` is a ``bytearray`` of packed tokens,
  which the collector does not track at all (an ``array`` is one more object for it to walk per
  sequence); ``blocks`` a tuple, replaced whenever an entry changes (at a block boundary, a
  swap or a window release, never for a token that fits its block), which the collector stops
  tracking once it has seen that it holds only ints, and which a caller gets a list of at the
  cost of copying references (an array would make an int object per entry for each answer).
- a pending access (``access_time``, ``access_stamp``, ``access_end``): the last
  ``access_all_blocks_in_seq`` (which sets the three: every held entry up to ``access_end`` was
  accessed at ``access_time``; a later access has a higher stamp and covers every entry an older
  one did, so it simply replaces it) is kept here instead of being written into every block, and is
  written into a block (``pool.touch``) only when the table stops holding it there: before a
  release, an append that may replace the block, or a swap. A block's access time is only ever
  read once nobody holds it (the eviction order), and ``view`` shows the pending access as if it
  had been written, so the observable state is the same.
- ``marked``: the entries whose blocks the table's last ``mark_blocks_as_computed`` found full;
  a mark looks only at blocks filled since.
- ``computed_run``: how many leading entries are known computed. A full block is never written
  again and keeps its mark while held (a swap carries it along), so the run only grows.
- ``computed_ids``: the last answer to ``get_common_computed_block_ids`` for this table alone, a
  tuple (the manager hands out a list of it) kept until the run grows. The entries of
  the run never change while the table stays on its device: a swap, which gives them new ids, and
  a window release, which points them at the null block, drop it. Once it holds every entry but
  the last, it is the answer until the table grows.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.tokens import TOKEN_BYTES
from pagedkv.specs.accounting import blocks_touched_by_append
from pagedkv.specs.compact_state import GroupFields
from pagedkv.specs.content_hash import ROOT, BlockHasher
from pagedkv.specs.types import BlockHash, BlockId, Device, ExtraKey, Token

pack_one = struct.Struct("<Q").pack
"""One token as ``packed`` packs it: a decode step's, with a prepared ``Struct`` (as fast as
``array.extend``)."""


def packed(tokens: Sequence[Token]) -> bytes:
    """Tokens as ``BlockTable.tokens`` and the pool hold them (``TOKEN_BYTES`` each, u64
    little-endian, the content hash's encoding: a full block's bytes are hashed as they are; they
    are checked: each fits in 63 bits)."""
    return struct.pack(f"<{len(tokens)}Q", *tokens)


def num_out_of_window(num_tokens: int, window: int, block_size: int, num_blocks: int) -> int:
    """How many leading blocks no token from ``num_tokens`` on attends to: those wholly before
    ``num_tokens - window + 1`` (``pagedkv.reference.block_table.out_of_window`` lists them)."""
    return max(0, min((num_tokens - window + 1) // block_size, num_blocks))


@dataclass(slots=True)
class BlockTable:
    """A sequence's tokens, its physical blocks (lookahead slots past the last token included),
    and the bookkeeping above."""

    group: SequenceGroup
    tokens: bytearray
    """The sequence's tokens, packed (``packed``: ``TOKEN_BYTES`` each)."""
    blocks: tuple[BlockId, ...]
    last_hash: BlockHash
    """With caching: the content hash of block ``len(tokens) // block_size - 1`` (``ROOT`` while
    no block is full)."""
    num_released: int = 0
    """Leading entries that point at the null block: a window releases the oldest blocks first
    and never takes them back, so exactly this many entries are the null block."""
    access_time: float = 0.0
    access_stamp: int = 0
    access_end: int = 0
    """Entries ``num_released .. access_end`` have not been given the pending access yet."""
    marked: int = 0
    computed_run: int = 0
    computed_ids: tuple[BlockId, ...] = ()

    @classmethod
    def for_prompt(
        cls, group: SequenceGroup, pool: OptimizedBlockPool, tokens: Sequence[Token]
    ) -> BlockTable:
        """Full chunks of the prompt as immutable blocks (cache hits where possible), the tail as
        a mutable block. The caller has checked that the pool has a block for every chunk."""
        size = pool.block_size
        prompt = packed(tokens)
        step = size * TOKEN_BYTES
        full = len(prompt) // step * step
        chunks = [prompt[start : start + step] for start in range(0, full, step)]
        hashes = group.hasher.chain_of_packed(ROOT, prompt[:full], size) if pool.caching else None
        blocks = pool.take_full_blocks(chunks, hashes, group.extra_key)
        if full < len(prompt):
            blocks.append(pool.fill(pool.take(), None, prompt[full:], None))
        return cls(group, bytearray(prompt), tuple(blocks), hashes[-1] if hashes else ROOT)

    def fork(self) -> BlockTable:
        """A child's table: the same entries (the caller raises their ref counts). The parent's
        pending access stays the parent's; it reaches the shared blocks all the same."""
        return BlockTable(
            self.group,
            bytearray(self.tokens),
            self.blocks,
            self.last_hash,
            self.num_released,
            marked=self.marked,
            computed_run=self.computed_run,
            computed_ids=self.computed_ids,
        )

    def held_blocks(self) -> tuple[BlockId, ...]:
        """The entries that hold a reference: every one but those pointing at the null block."""
        return self.blocks[self.num_released :]

    def blocks_touched_by_append(self, block_size: int, num_new: int, lookahead: int) -> int:
        return blocks_touched_by_append(
            self.num_tokens(), len(self.blocks), block_size, num_new, lookahead
        )

    def num_tokens(self) -> int:
        return len(self.tokens) // TOKEN_BYTES

    # --- the pending access ---------------------------------------------------------------------

    def untouched(self, into: dict[BlockId, tuple[int, float]]) -> None:
        """Add the blocks still waiting for the pending access to ``into`` (block -> (stamp,
        time)), keeping the later access of a block two tables share: what the state would
        show had the access been given to every block at once."""
        stamp, now = self.access_stamp, self.access_time
        for block in self.blocks[self.num_released : self.access_end]:
            known = into.get(block)
            if known is None or known[0] < stamp:
                into[block] = (stamp, now)

    def settle(self, pool: OptimizedBlockPool, start: int = 0) -> None:
        """Give the pending access to the blocks of entries ``start ..`` that still wait for it;
        from then on those entries are no longer covered by it."""
        end = self.access_end
        if end <= start:
            return
        now, stamp = self.access_time, self.access_stamp
        for block in self.blocks[max(start, self.num_released) : end]:
            pool.touch(block, now, stamp)
        self.access_end = start

    # --- changing the entries -------------------------------------------------------------------

    def release_all(self, pool: OptimizedBlockPool) -> None:
        """Give back every held block (the sequence is freed)."""
        self.settle(pool)
        for block in self.held_blocks():
            pool.release(block)

    def release_out_of_window(
        self, pool: OptimizedBlockPool, window: int, null_block: BlockId
    ) -> None:
        """Before appending: release every block whose tokens all precede the oldest position the
        new tokens attend to (``len(tokens) - window + 1``) and point its entry at the null
        block. Only the blocks not released before are looked at."""
        num_out = num_out_of_window(self.num_tokens(), window, pool.block_size, len(self.blocks))
        if num_out <= self.num_released:
            return
        blocks = self.blocks
        for index in range(self.num_released, num_out):
            if index < self.access_end:
                pool.touch(blocks[index], self.access_time, self.access_stamp)
            pool.release(blocks[index])
        self.blocks = (null_block,) * num_out + blocks[num_out:]  # those before: null already
        self.num_released = num_out
        self.computed_ids = ()  # a null entry ends every run

    def append(self, pool: OptimizedBlockPool, new: bytes, lookahead: int) -> None:
        """Append the packed tokens ``new`` block by block (the pool copies shared blocks and
        dedups filled ones), then make sure ``lookahead`` empty slots follow them. The caller has
        checked the worst case (``blocks_touched_by_append``) against the free blocks."""
        tokens, blocks = self.tokens, self.blocks
        size = pool.block_size
        position = len(tokens) // TOKEN_BYTES
        tokens += new
        end = len(tokens) // TOKEN_BYTES
        if position < end:
            index = position // size
            # The common case: the tokens go into the block that holds the last ones, which is
            # the table's own and does not fill, so the entry stays as it is.
            if not (
                end < (index + 1) * size
                and index < len(blocks)
                and pool.append_in_place(blocks[index], new)
            ):
                if self.access_end > index:
                    self.settle(pool, index)  # the block receiving tokens may be replaced
                self._fill_blocks(pool, new, position)
        if len(self.blocks) * size < end + lookahead:  # lookahead slots past the last block
            missing = -((end + lookahead) // -size) - len(self.blocks)
            self.blocks += tuple(pool.take() for _ in range(missing))

    def _fill_blocks(self, pool: OptimizedBlockPool, new: bytes, position: int) -> None:
        """Hand the packed tokens ``new`` (already in ``tokens``, from ``position`` on) to their
        blocks, one block at a time, taking new blocks past the table's end; a block that fills
        is hashed, once, from its bytes in ``tokens``."""
        size, width = pool.block_size, TOKEN_BYTES
        tokens = self.tokens
        base = position
        end = position + len(new) // width
        first = position // size
        kept = self.blocks[first:]  # the entries that may change, from the first one
        blocks = list(kept)
        while position < end:
            index = position // size - first
            if index == len(blocks):
                blocks.append(pool.take())
            block_end = (index + first + 1) * size
            if end < block_end:  # the last tokens, which do not fill their block
                chunk = new[(position - base) * width :]
                blocks[index] = pool.fill(blocks[index], None, chunk, None)
                break
            chunk = new[(position - base) * width : (block_end - base) * width]
            if pool.caching:
                start = block_end - size
                parent = self.last_hash  # the block before's: the blocks fill in order
                content_hash = self.last_hash = self.group.hasher.of_packed(
                    parent, tokens[start * width : block_end * width]
                )
                prefix = (parent, start, self.group.extra_key)
                blocks[index] = pool.fill(blocks[index], prefix, chunk, content_hash)
            else:
                blocks[index] = pool.fill(blocks[index], None, chunk, None)
            position = block_end
        tail = tuple(blocks)
        if tail != kept:  # most fills keep their blocks: nothing to replace
            self.blocks = self.blocks[:first] + tail

    # --- what is computed -----------------------------------------------------------------------

    def mark_computed(self, pool: OptimizedBlockPool, num_full: int) -> None:
        """``mark_blocks_as_computed`` for this table, whose first ``num_full`` blocks are full:
        they hold their KV now. Only blocks filled since the last mark are new."""
        start = max(self.marked, self.num_released)
        if start < num_full:
            pool.set_computed(self.blocks[start:num_full])
        self.marked = max(self.marked, num_full)

    def computed_prefix_length(self, pool: OptimizedBlockPool, end: int) -> int:
        """How many leading entries of ``blocks[:end]`` are computed. A null entry (the first
        one, once the window released any) is never computed."""
        if self.num_released:
            return 0
        run = self.computed_run
        if run >= end:
            return end
        run = pool.computed_run(self.blocks, run, end)
        self.computed_run = run
        return run

    def computed_prefix(self, pool: OptimizedBlockPool) -> tuple[BlockId, ...]:
        """The leading computed entries, the last entry excluded (the model computes at least
        one token of every sequence): the same tuple as last time unless the run grew."""
        run = self.computed_prefix_length(pool, len(self.blocks) - 1)
        ids = self.computed_ids
        if len(ids) != run:
            ids = self.computed_ids = self.blocks[:run]
        return ids

    def moved(self) -> None:
        """The table's blocks were swapped to another device: every entry has a new id."""
        self.computed_ids = ()

    def num_cached_tokens(self, pool: OptimizedBlockPool) -> int:
        """Tokens in the leading run of computed blocks: the prefill a cache lets it skip. Only
        full blocks are ever computed, so each counts ``block_size`` tokens."""
        return self.computed_prefix_length(pool, len(self.blocks)) * pool.block_size


# --- the group a table belongs to ---------------------------------------------------------------


@dataclass(slots=True)
class SequenceGroup:
    """A sequence group (``specs/block_manager.md`` §3, "Group"): the sequences that share a prompt
    and move between devices together. It lives beside its tables because each table holds it.
    ``seq_ids``: its live sequences, in the group's order (``allocate``'s ids, then forked
    children), whose tables the manager looks up: a tuple of ints, which the garbage collector
    stops tracking once it has seen it, where a dict of the tables was one more object per group
    for every full collection to walk (most groups have one sequence). An encoder-decoder group
    also owns its cross-attention table.
    ``hasher`` hashes the group's full blocks under its extra key (every group with that key
    shares it, as an empty ``cross_blocks`` is shared: a manager may hold tens of thousands of
    groups, and the garbage collector walks every object each of them keeps).
    ``common_ids``: see its note."""

    group_id: int
    seq_ids: tuple[int, ...]
    device: Device
    extra_key: ExtraKey
    encoder_tokens: tuple[Token, ...] = ()
    cross_blocks: tuple[BlockId, ...] = ()
    hasher: BlockHasher = field(init=False)
    common_ids: tuple[tuple[tuple[BlockId, ...], ...], tuple[BlockId, ...]] | None = None
    """The last ``get_common_computed_block_ids`` of several sequences, the first of them in this
    group: the computed prefixes it was asked about, and their common prefix. The prefixes are
    tuples, replaced whenever they change, so the same prefixes have the same answer."""

    def __post_init__(self) -> None:
        self.hasher = hasher_for(self.extra_key)

    def fields(self) -> GroupFields:
        """The group as the compact state holds it (``specs/compact_state.py``): the cross
        table lives with the group, so it is on the group's device."""
        device, seq_ids = self.device, self.seq_ids
        return (seq_ids, device, self.extra_key, self.encoder_tokens, self.cross_blocks, device)


@lru_cache(maxsize=1024)
def hasher_for(extra_key: ExtraKey) -> BlockHasher:
    return BlockHasher(extra_key)
