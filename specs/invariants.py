"""Invariants of ``specs/invariants.md`` as predicates: I1-I3 over a ``PoolView``, the
defragmenter's part of I4 and I8 over ``DefragmenterView``s.

Each returns the list of violations it found (empty when the invariant holds), so a failing test
can print all of them at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from pagedkv.specs import defrag_rule
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.pool_view import BLANK, PoolView
from pagedkv.specs.types import BlockId, TableKey


def ref_counts(view: PoolView, held: Mapping[BlockId, int]) -> list[str]:
    """I1: each block's count is the number of references the callers hold on it."""
    problems = []
    for block, block_view in view.blocks.items():
        expected = held.get(block, 0)
        if block_view.ref_count != expected:
            problems.append(f"block {block}: ref count {block_view.ref_count}, held {expected}")
    for block in held:
        if block not in view.blocks:
            problems.append(f"block {block} is held but not in the pool")
    return problems


def accounting(view: PoolView) -> list[str]:
    """I2: free + evictable + used = total, the three sets disjoint, free blocks blank."""
    problems = []
    total = view.config.num_blocks
    if set(view.blocks) != set(view.config.block_ids):
        problems.append(f"the pool's ids are not {view.config.block_ids}")
    for name, left, right in (
        ("free", view.free, view.evictable),
        ("free", view.free, view.used),
        ("evictable", view.evictable, view.used),
    ):
        if left & right:
            problems.append(f"blocks {sorted(left & right)} are both {name} and in use/evictable")
    count = len(view.free) + len(view.evictable) + len(view.used)
    if count != total:
        problems.append(
            f"free {len(view.free)} + evictable {len(view.evictable)} + used {len(view.used)}"
            f" = {count}, not {total}"
        )
    for block in view.free:
        if view.blocks.get(block) != BLANK:
            problems.append(f"free block {block} is not blank: {view.blocks.get(block)}")
    return problems


def hash_index(view: PoolView) -> list[str]:
    """I3: the index names each hash's one block, hashes recompute, evictable = cached at 0."""
    problems = []
    for content_hash, block in view.cached.items():
        block_view = view.blocks.get(block)
        if block_view is None or block_view.content_hash != content_hash:
            problems.append(f"hash {content_hash.hex()[:12]} names block {block}, which lacks it")
            continue
        if block_view.prefix is None:
            problems.append(f"cached block {block} has no prefix")
        elif block_view.prefix.child_hash(block_view.tokens) != content_hash:
            problems.append(f"cached block {block}: hash does not recompute from its contents")
        if len(block_view.tokens) != view.config.block_size:
            problems.append(f"cached block {block} is not full: {len(block_view.tokens)} tokens")
    for content_hash, later in view.duplicates.items():
        if view.cached.get(content_hash) in later or len(set(later)) != len(later):
            problems.append(f"hash {content_hash.hex()[:12]}'s holders repeat a block")
        for block in later:
            if view.blocks[block].content_hash != content_hash:
                problems.append(
                    f"hash {content_hash.hex()[:12]} names block {block}, which lacks it"
                )
    for block, block_view in view.blocks.items():
        if block_view.content_hash is not None:
            named = view.cached.get(block_view.content_hash) == block
            if not named and block not in view.duplicates.get(block_view.content_hash, ()):
                problems.append(f"block {block} has a hash the index does not map to it")
        elif block_view.prefix is not None:
            problems.append(f"block {block} has a prefix but no hash")
    if not view.config.enable_caching and view.cached:
        problems.append("a pool without caching has cached blocks")
    holders = [*view.cached.values(), *(b for later in view.duplicates.values() for b in later)]
    cached_unused = {b for b in holders if view.blocks[b].ref_count == 0}
    if cached_unused != set(view.evictable):
        problems.append(
            f"evictable {sorted(view.evictable)} != cached blocks at count 0"
            f" {sorted(cached_unused)}"
        )
    return problems


def pool_invariants(view: PoolView) -> list[str]:
    """I2 and I3, which need nothing but the pool."""
    return accounting(view) + hash_index(view)


def defragmenter_state(
    view: DefragmenterView, tables: Mapping[TableKey, Sequence[BlockId]]
) -> list[str]:
    """I4 for a defragmenter told about ``tables``: the forward and backward tables are inverse
    permutations, reserved ids map to themselves, it holds exactly those tables, and each
    physical id's ref count is the references they hold on it through ``forward``."""
    problems = []
    ids = range(view.config.num_blocks)
    if sorted(view.forward) != list(ids) or sorted(view.backward) != list(ids):
        problems.append("the forward or backward table is not a permutation of the ids")
    elif any(view.backward[physical] != logical for logical, physical in enumerate(view.forward)):
        problems.append("the forward and backward tables are not inverse permutations")
    moved = [b for b in sorted(view.config.reserved) if view.forward[b] != b]
    if moved:
        problems.append(f"reserved ids {moved} have moved")
    held = {key: tuple(table) for key, table in tables.items()}
    if dict(view.tables) != held:
        problems.append(
            f"the defragmenter holds tables {dict(view.tables)}, the caller's are {held}"
        )
    if not problems:
        expected = Counter(view.forward[b] for table in held.values() for b in table)
        if dict(view.ref_counts) != dict(expected):
            problems.append(
                f"ref counts {dict(sorted(view.ref_counts.items()))}, the tables hold"
                f" {dict(sorted(expected.items()))}"
            )
    return problems


def defragmentation(
    before: DefragmenterView, after: DefragmenterView, pairs: Sequence[tuple[BlockId, BlockId]]
) -> list[str]:
    """I8: one ``defragment()``. It acts exactly when the trigger says; each pair moves a used
    block down into a free id (neither reserved, no id in two pairs); the used ids end
    ``compacted`` with ``minimum_exchanges`` pairs; each logical id's data follows its pair."""
    config = before.config
    used = before.used
    if not defrag_rule.triggered(config, used):
        if pairs or after != before:
            return [
                f"not triggered (max used {max(used, default=None)}, {len(used)} used), yet it"
                f" exchanged {list(pairs)}"
            ]
        return []
    problems = []
    seen: set[BlockId] = set()
    for source, destination in pairs:
        if source not in used or source in config.reserved:
            problems.append(f"pair ({source}, {destination}): {source} is not a movable used id")
        if destination in used or destination in config.reserved:
            problems.append(f"pair ({source}, {destination}): {destination} is not a free id")
        if destination >= source:
            problems.append(f"pair ({source}, {destination}) moves a used block upward")
        if source in seen or destination in seen:
            problems.append(f"pair ({source}, {destination}) reuses an id of an earlier pair")
        seen.update((source, destination))
    wanted = defrag_rule.minimum_exchanges(config, used)
    if len(pairs) != wanted:
        problems.append(f"{len(pairs)} exchanges, the minimum that compacts is {wanted}")
    if after.used != defrag_rule.compacted(config, used):
        problems.append(
            f"used ids {sorted(after.used)} after, as compact as the cap allows is"
            f" {sorted(defrag_rule.compacted(config, used))}"
        )
    moved = dict(pairs) | {d: s for s, d in pairs}
    expected_backward = tuple(before.backward[moved.get(p, p)] for p in range(config.num_blocks))
    if after.backward != expected_backward:
        problems.append(f"backward table {after.backward}, the pairs give {expected_backward}")
    if after.tables != before.tables:
        problems.append("a defragmentation changed the tables it was told about")
    return problems
