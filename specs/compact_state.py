"""A manager's whole observable state as a few flat columns: the same verdict as comparing two
``ManagerView``s, at a price a soak can pay after every call (``specs/oracle.md`` §6, "The whole
state at every step").

Comparing two views builds a ``BlockView`` per block, a ``SeqView`` per sequence and a
``GroupView`` per group, and compares them field by field in Python. The compact state keeps each
block field as a column (a list indexed by ``block - first_id``), so that two pools compare with
a few ``==`` on lists in C, and each sequence and group as a plain tuple of its view's fields:

=====================  ==============================================================
``ManagerView``        compact column
=====================  ==============================================================
``config``             ``config``
``gpu``, ``cpu``       ``compact_pool`` of each (below)
``seqs[s]``            ``seqs[s] == (group_id, tokens, blocks)``, the tokens packed
                       (8 bytes each, little-endian, below)
``groups[g]``          ``groups[g] == (seq_ids, device, extra_key, encoder_tokens,
                       cross_blocks, cross_device)``
``null_block``         ``null_block``
``PoolView.config``    ``config``
``blocks[b]``          entry ``b - first_id`` of the columns ``ref_counts``, ``tokens``
                       (packed, as a sequence's), ``hashes``, ``parents``, ``starts``,
                       ``keys``, ``computed``, ``last_accessed`` (a prefix as its three
                       fields, ``(None, 0, None)`` for none)
``free`` ...           ``free``, ``evictable``, ``cached``, ``duplicates``,
                       ``pending_cows``, ``hits``, ``queries``, as they are
=====================  ==============================================================

A sequence's tokens, and a block's, are packed, 8 bytes each, little-endian and signed (every
token fits: ``MAX_TOKEN``; the content hash's encoding, ``packed_tokens``), as ``bytes`` or
``bytearray``, which compare equal exactly when their bytes are: an implementation that keeps them
packed (the optimized block table and pool) hands its own over with no copy, and two of them
compare in C, where a tuple would make an int object per token at every call. A view whose
tokens do not pack (a target's bad value) keeps them as a tuple, which no bytes equal: its compact
state then differs from any packed one, and the views, compared next, say whether the states do.
(Never a column type that compares unequal to another holding the same values, as a ``list`` to an
``array``: every column has one type, or, for the tokens, types that compare by content.)

``compact_manager`` is that mapping, and ``view_of_compact`` undoes it: every field of the view
is in the compact state, so two compact states are equal exactly when the views they come from
are (``model_tests/tests/test_compact_state.py`` holds ``view_of_compact(compact_manager(v)) ==
v`` on random walks). An implementation may build its compact state straight from its own
structures (``OptimizedBlockSpaceManager.compact``) if it equals ``compact_manager(self.view())``
in every state; the same test holds the optimized manager to that at every step of its walks.
The view stays the comparison the spec states; this is only a faster way to the same answer.
A reader may keep parts of a compact state between calls (the soak's, of the optimized manager:
``model_tests/oracle/incremental_compact.py``, rebuilding only the rows and pools the manager's
record of its changes names, or a pool whose fingerprint changed) only if a fresh one, nothing
kept, is built and held equal to it at every checkpoint (``specs/oracle.md`` §6). A kept part
must be a copy, never the implementation's own object (a kept row holds its tokens as
``bytes``, not the table's ``bytearray``): a kept part that changed along with the manager
would equal the fresh one at the checkpoint whatever the comparisons after the calls saw.
Where two optimized managers with pagedkv's code alone are compared (a subclass without code
of its own against the optimized stand-in), a pool is kept as its ``fingerprint`` (copies of
everything its ``compact`` reads) and two pools compare by their fingerprints, pending accesses,
configuration and first id; its columns are built from the fingerprint
(``OptimizedBlockPool.compact_of``) only where two fingerprints differ and at each checkpoint,
where they are held equal to the fresh compact state like any kept part.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.manager_view import GroupView, ManagerView, SeqView
from pagedkv.specs.pool_view import BlockView, PoolView
from pagedkv.specs.types import (
    BlockHash,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    PoolConfig,
    Token,
)


class CompactPool(NamedTuple):
    """A ``PoolView``, a column per block field (entry ``block - config.first_id``)."""

    config: PoolConfig
    ref_counts: list[int]
    tokens: Sequence[bytes | tuple[Token, ...]]
    """Each block's tokens, packed (``packed_tokens``): a list, as every column."""
    hashes: list[BlockHash | None]
    parents: list[BlockHash | None]
    starts: list[int]
    keys: list[ExtraKey | None]
    computed: list[bool]
    last_accessed: list[float]
    free: frozenset[BlockId]
    evictable: frozenset[BlockId]
    cached: dict[BlockHash, BlockId]
    duplicates: dict[BlockHash, tuple[BlockId, ...]]
    pending_cows: tuple[CopyPair, ...]
    hits: int
    queries: int


SeqFields = tuple[int, "bytes | bytearray | tuple[Token, ...]", tuple[BlockId, ...]]
"""A ``SeqView``'s fields, in order, the tokens packed (``packed_tokens``)."""

GroupFields = tuple[
    tuple[int, ...], Device, ExtraKey, tuple[Token, ...], tuple[BlockId, ...], Device
]
"""A ``GroupView``'s fields, in order."""


class CompactManager(NamedTuple):
    """A ``ManagerView``: its pools compact, each sequence and group a tuple of its fields."""

    config: ManagerConfig
    gpu: CompactPool
    cpu: CompactPool
    seqs: dict[int, SeqFields]
    groups: dict[int, GroupFields]
    null_block: BlockId | None


def compact_pool(view: PoolView) -> CompactPool:
    """The pool's view as columns. Its blocks must be exactly the configuration's ids (both
    implementations render every block); else ``ValueError``, as no column could hold them."""
    ids = view.config.block_ids
    if len(view.blocks) != len(ids) or any(block not in view.blocks for block in ids):
        raise ValueError("a pool view whose blocks are not its configuration's ids")
    return compact_of_blocks(
        view.config,
        [view.blocks[block] for block in ids],
        view.free,
        view.evictable,
        view.cached,
        view.duplicates,
        view.pending_cows,
        view.hits,
        view.queries,
    )


def compact_of_blocks(
    config: PoolConfig,
    blocks: Sequence[BlockView],
    free: frozenset[BlockId],
    evictable: frozenset[BlockId],
    cached: Mapping[BlockHash, BlockId],
    duplicates: Mapping[BlockHash, tuple[BlockId, ...]],
    pending_cows: tuple[CopyPair, ...],
    hits: int,
    queries: int,
) -> CompactPool:
    """A pool's columns from its blocks' views in the configuration's order and its other
    fields: ``compact_pool``'s work once the blocks are in order (a reader that has them so
    already, as the reference's frozen state does, skips the view)."""
    prefixes = [block.prefix for block in blocks]
    return CompactPool(
        config,
        [block.ref_count for block in blocks],
        [packed_tokens(block.tokens) for block in blocks],
        [block.content_hash for block in blocks],
        [None if prefix is None else prefix.hash for prefix in prefixes],
        [0 if prefix is None else prefix.num_tokens for prefix in prefixes],
        [None if prefix is None else prefix.extra_key for prefix in prefixes],
        [block.computed for block in blocks],
        [block.last_accessed for block in blocks],
        free,
        evictable,
        dict(cached),
        dict(duplicates),
        pending_cows,
        hits,
        queries,
    )


def packed_tokens(tokens: Sequence[Token]) -> bytes | tuple[Token, ...]:
    """A sequence's (or a block's) tokens as the compact state holds them: 8 bytes each,
    little-endian, or where they do not all pack (a value that is not an int of 64 bits) a tuple,
    which no bytes equal."""
    try:
        packed = array("q", tokens)
    except (TypeError, OverflowError):
        return tuple(tokens)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpacked_tokens(tokens: bytes | bytearray | tuple[Token, ...]) -> tuple[Token, ...]:
    """The tokens ``packed_tokens`` packed."""
    if isinstance(tokens, tuple):
        return tokens
    found = array("q")
    found.frombytes(tokens)
    if sys.byteorder == "big":
        found.byteswap()
    return tuple(found)


def compact_manager(view: ManagerView) -> CompactManager:
    """The manager's view as the compact state (the table in the module's docstring)."""
    return CompactManager(
        view.config,
        compact_pool(view.gpu),
        compact_pool(view.cpu),
        {
            seq_id: (seq.group_id, packed_tokens(seq.tokens), seq.blocks)
            for seq_id, seq in view.seqs.items()
        },
        compact_groups(view.groups),
        view.null_block,
    )


def compact_groups(groups: Mapping[int, GroupView]) -> dict[int, GroupFields]:
    """Each group as the tuple of its view's fields."""
    return {
        group_id: (
            group.seq_ids,
            group.device,
            group.extra_key,
            group.encoder_tokens,
            group.cross_blocks,
            group.cross_device,
        )
        for group_id, group in groups.items()
    }


def view_of_pool(pool: CompactPool) -> PoolView:
    """The pool view a compact pool came from."""
    columns = zip(
        pool.config.block_ids,
        pool.ref_counts,
        pool.tokens,
        pool.hashes,
        pool.parents,
        pool.starts,
        pool.keys,
        pool.computed,
        pool.last_accessed,
        strict=True,
    )
    blocks = {
        block: BlockView(
            count,
            unpacked_tokens(packed),
            content_hash,
            None if parent is None or key is None else Prefix(parent, start, key),
            computed,
            accessed,
        )
        for block, count, packed, content_hash, parent, start, key, computed, accessed in columns
    }
    return PoolView(
        pool.config,
        blocks,
        pool.free,
        pool.evictable,
        pool.cached,
        pool.duplicates,
        pool.pending_cows,
        pool.hits,
        pool.queries,
    )


def view_of_compact(compact: CompactManager) -> ManagerView:
    """The manager view a compact state came from: ``compact_manager`` loses nothing."""
    return ManagerView(
        compact.config,
        view_of_pool(compact.gpu),
        view_of_pool(compact.cpu),
        {
            seq_id: SeqView(group_id, unpacked_tokens(tokens), blocks)
            for seq_id, (group_id, tokens, blocks) in compact.seqs.items()
        },
        {group_id: GroupView(*fields) for group_id, fields in compact.groups.items()},
        compact.null_block,
    )
