"""One sequence's block table, kept mutable so that decoding costs O(new tokens).

Logical block ``i`` holds tokens ``i * block_size .. (i + 1) * block_size - 1`` and lives in
physical block ``blocks[i]``. Beside the tokens and blocks the table keeps ``prefixes``: the prefix
of every block whose predecessors are all full, so that filling a block hashes that block alone
instead of the whole sequence (``reference.block_table.prefix_at`` starts over from the root each
time). Every function makes the same pool calls in the same order as ``reference.block_table``, so
the pool ends in the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optimized.block_pool import OptimizedBlockPool
from specs.accounting import blocks_touched_by_append
from specs.content_hash import Prefix
from specs.types import BlockId, ExtraKey, Token


def next_prefix(prefix: Prefix, block_tokens: Sequence[Token], caching: bool) -> Prefix:
    """The prefix of the block after a full block holding ``block_tokens``.

    Only a caching pool reads a prefix's hash (to hash the block it fills); without caching the
    chain keeps the root hash and skips SHA-256, which ``check_prefix`` accepts all the same."""
    if caching:
        return prefix.extend(block_tokens)
    return Prefix(prefix.hash, prefix.num_tokens + len(block_tokens), prefix.extra_key)


def num_out_of_window(num_tokens: int, window: int, block_size: int, num_blocks: int) -> int:
    """How many leading blocks no token from ``num_tokens`` on attends to: those wholly before
    ``num_tokens - window + 1`` (``reference.block_table.out_of_window`` lists them)."""
    return max(0, min((num_tokens - window + 1) // block_size, num_blocks))


@dataclass(slots=True)
class BlockTable:
    """A sequence's tokens, its physical blocks (lookahead slots past the last token included),
    and the prefixes of blocks ``0 .. len(tokens) // block_size``."""

    group_id: int
    tokens: list[Token]
    blocks: list[BlockId]
    prefixes: list[Prefix]
    num_released: int = 0
    """Leading entries that point at the null block: a window releases the oldest blocks first
    and never takes them back, so exactly this many entries are the null block."""

    @classmethod
    def for_prompt(
        cls, group_id: int, pool: OptimizedBlockPool, tokens: Sequence[Token], key: ExtraKey
    ) -> BlockTable:
        """Full chunks of the prompt as immutable blocks (cache hits where possible), the tail as
        a mutable block. The caller has checked that the pool has a block for every chunk."""
        size = pool.config.block_size
        caching = pool.config.enable_caching
        blocks: list[BlockId] = []
        prefixes = [Prefix(extra_key=key)]
        for start in range(0, len(tokens), size):
            chunk = tokens[start : start + size]
            prefix = prefixes[-1]
            if len(chunk) == size:
                blocks.append(pool.allocate_immutable(prefix, chunk))
                prefixes.append(next_prefix(prefix, chunk, caching))
            else:
                block = pool.allocate_mutable()
                blocks.append(pool.append_tokens(block, prefix, chunk))
        return cls(group_id, list(tokens), blocks, prefixes)

    def fork(self) -> BlockTable:
        """A child's table: the same entries (the caller raises their ref counts)."""
        return BlockTable(
            self.group_id,
            self.tokens.copy(),
            self.blocks.copy(),
            self.prefixes.copy(),
            self.num_released,
        )

    def held_blocks(self) -> list[BlockId]:
        """The entries that hold a reference: every one but those pointing at the null block."""
        return self.blocks[self.num_released :]

    def prefix_of(self, index: int) -> Prefix:
        """The prefix of logical block ``index``. Blocks past the last partial one are empty
        lookahead slots whose prefix nobody reads; they get the last known one."""
        return self.prefixes[min(index, len(self.prefixes) - 1)]

    def blocks_touched_by_append(self, block_size: int, num_new: int, lookahead: int) -> int:
        return blocks_touched_by_append(
            len(self.tokens), len(self.blocks), block_size, num_new, lookahead
        )

    def release_out_of_window(
        self, pool: OptimizedBlockPool, window: int, null_block: BlockId
    ) -> None:
        """Before appending: release every block whose tokens all precede the oldest position the
        new tokens attend to (``len(tokens) - window + 1``) and point its entry at the null
        block. Only the blocks not released before are looked at."""
        num_out = num_out_of_window(
            len(self.tokens), window, pool.config.block_size, len(self.blocks)
        )
        for index in range(self.num_released, num_out):
            if self.blocks[index] != null_block:
                pool.free(self.blocks[index])
                self.blocks[index] = null_block
        self.num_released = max(self.num_released, num_out)

    def append(self, pool: OptimizedBlockPool, new_tokens: Sequence[Token], lookahead: int) -> None:
        """Append ``new_tokens`` block by block (the pool copies shared blocks and dedups filled
        ones), then make sure ``lookahead`` empty slots follow them. The caller has checked the
        worst case (``blocks_touched_by_append``) against the free blocks."""
        size = pool.config.block_size
        caching = pool.config.enable_caching
        tokens, blocks, prefixes = self.tokens, self.blocks, self.prefixes
        position = len(tokens)
        tokens.extend(new_tokens)
        end = len(tokens)
        while position < end:
            index = position // size
            if index == len(blocks):
                blocks.append(pool.allocate_mutable())
            block_end = (index + 1) * size
            chunk_end = min(end, block_end)
            blocks[index] = pool.append_tokens(
                blocks[index], prefixes[index], tokens[position:chunk_end]
            )
            if chunk_end == block_end:
                block_tokens = tokens[index * size : block_end]
                prefixes.append(next_prefix(prefixes[index], block_tokens, caching))
            position = chunk_end
        while len(blocks) * size < end + lookahead:
            blocks.append(pool.allocate_mutable())

    def num_cached_tokens(self, pool: OptimizedBlockPool) -> int:
        """Tokens in the leading run of computed blocks: the prefill a cache lets it skip. An
        entry outside ``pool`` (the GPU null block of a swapped-out table) ends the run."""
        ids = pool.config.block_ids
        cached = 0
        for block in self.blocks:
            if block not in ids:
                break
            view = pool.block(block)
            if not view.computed:
                break
            cached += len(view.tokens)
        return cached
