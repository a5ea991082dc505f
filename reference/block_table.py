"""Block tables: one sequence's logical blocks over one device's pool, as pure functions.

A table is a tuple of physical block ids; logical block ``i`` holds tokens
``i * block_size .. (i + 1) * block_size - 1``. Full chunks of a prompt are allocated as immutable
blocks (cache hits where possible), the tail as a mutable block; appends fill the last block and
add blocks as needed; lookahead slots are empty blocks past the last token; a sliding window
releases blocks that no future token can attend to and points them at the null block.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference import block_pool as pool_ops
from pagedkv.reference.allocation import Picker, lowest_id
from pagedkv.reference.pool_state import PoolState, is_computed
from pagedkv.specs.content_hash import Prefix, encodable  # noqa: F401  (read by the contracts)
from pagedkv.specs.types import MAX_TOKEN, BlockId, ExtraKey, Token  # noqa: F401


def prefix_at(tokens: Sequence[Token], index: int, block_size: int, key: ExtraKey) -> Prefix:
    """The prefix of logical block ``index``: the chained hash of all full blocks before it.

    pre: block_size >= 1 and 0 <= index and index * block_size <= len(tokens) and len(tokens) < 5
    pre: all(0 <= token <= MAX_TOKEN for token in tokens) and encodable(key)
    post: _.num_tokens == index * block_size and _.extra_key == key
    """
    prefix = Prefix(extra_key=key)
    for start in range(0, index * block_size, block_size):
        prefix = prefix.extend(tokens[start : start + block_size])
    return prefix


def allocate_prompt(
    pool: PoolState, tokens: Sequence[Token], key: ExtraKey, pick: Picker = lowest_id
) -> tuple[PoolState, tuple[BlockId, ...], int]:
    """The prompt's blocks: full chunks looked up in the cache (policy ``lookup``: after the
    first miss, or every one), the tail a mutable block. Also returns how many leading chunks
    were cache hits."""
    size = pool.config.block_size
    blocks: list[BlockId] = []
    prefix = Prefix(extra_key=key)
    leading_hits, missed = 0, False
    for start in range(0, len(tokens), size):
        chunk = tokens[start : start + size]
        if len(chunk) == size and not (missed and pool.policy.lookup == "stop_at_first_miss"):
            hits = pool.hits
            pool, block = pool_ops.allocate_immutable(pool, prefix, chunk, pick(pool))
            missed = missed or pool.hits == hits
            leading_hits += 0 if missed else 1
        else:
            pool, block = pool_ops.allocate_mutable(pool, pick(pool))
            pool, block = pool_ops.append_tokens(pool, block, prefix, chunk)
            missed = True
        if len(chunk) == size:
            prefix = prefix.extend(chunk)
        blocks.append(block)
    return pool, tuple(blocks), leading_hits


def out_of_window(
    num_blocks: int, first_new_position: int, window: int, block_size: int
) -> list[int]:
    """The logical blocks whose tokens all precede ``first_new_position - window + 1``, the
    oldest position the new tokens attend to. They are always a leading run of the table.

    pre: num_blocks >= 0 and first_new_position >= 0 and window >= 1 and block_size >= 1
    post: all((index + 1) * block_size <= first_new_position - window + 1 for index in _)
    post: _ == list(range(len(_))) and len(_) <= num_blocks
    post: len(_) == num_blocks or (len(_) + 1) * block_size > first_new_position - window + 1
    """
    first_needed = first_new_position - window + 1
    return [index for index in range(num_blocks) if (index + 1) * block_size <= first_needed]


def release_blocks(
    pool: PoolState, blocks: tuple[BlockId, ...], end: int, null_block: BlockId
) -> tuple[PoolState, tuple[BlockId, ...]]:
    """Release the table's entries before index ``end`` (those no future token attends to);
    each then names the null block."""
    table = list(blocks)
    for index in range(min(end, len(table))):
        if table[index] != null_block:
            pool = pool_ops.free(pool, table[index])
            table[index] = null_block
    return pool, tuple(table)


def append(
    pool: PoolState,
    tokens: Sequence[Token],
    blocks: tuple[BlockId, ...],
    new_tokens: Sequence[Token],
    key: ExtraKey,
    lookahead: int,
    pick: Picker = lowest_id,
) -> tuple[PoolState, tuple[BlockId, ...]]:
    """Append ``new_tokens`` to a sequence holding ``tokens`` in ``blocks``, then make sure
    ``lookahead`` empty slots follow them."""
    size = pool.config.block_size
    table = list(blocks)
    everything = [*tokens, *new_tokens]
    if pool.policy.append_order == "slots_first":
        while len(table) * size < len(everything) + lookahead:
            pool, block = pool_ops.allocate_mutable(pool, pick(pool))
            table.append(block)
    position = len(tokens)
    while position < len(everything):
        index = position // size
        if index == len(table):
            pool, block = pool_ops.allocate_mutable(pool, pick(pool))
            table.append(block)
        chunk = everything[position : min(len(everything), (index + 1) * size)]
        prefix = prefix_at(everything, index, size, key)
        pool, table[index] = pool_ops.append_tokens(pool, table[index], prefix, chunk, pick(pool))
        position += len(chunk)
    while len(table) * size < len(everything) + lookahead:
        pool, block = pool_ops.allocate_mutable(pool, pick(pool))
        table.append(block)
    return pool, tuple(table)


def num_cached_tokens(pool: PoolState, blocks: Sequence[BlockId]) -> int:
    """Tokens in the leading run of computed blocks: the prefill a cache lets a sequence skip."""
    cached = 0
    for block in blocks:
        if block not in pool.blocks or not is_computed(pool, block):
            break
        cached += len(pool.blocks[block].tokens)
    return cached
