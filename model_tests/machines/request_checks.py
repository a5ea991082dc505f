"""What must hold of a request-level manager whatever its policy: pure checks over its view
(``specs/request_view.py``), the scheduler's requests and the KV model, each returning the
problems it found in words. The request machine runs them after every step
(``request_invariants.py``); they read only the view, so any mode may use them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from pagedkv.model_tests.machines.request_book import Scheduled
from pagedkv.model_tests.machines.request_kv_model import Cell, Contents, RequestKVModel
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    RequestId,
)
from pagedkv.specs.request_view import CachedKey, RequestManagerView
from pagedkv.specs.types import BlockId


def holders(view: RequestManagerView) -> dict[BlockId, list[tuple[RequestId, int, int]]]:
    """Each block's holders: (request, group, index in that group's table)."""
    held: dict[BlockId, list[tuple[RequestId, int, int]]] = {}
    for request_id, table in view.requests.items():
        for group, blocks in enumerate(table.blocks):
            for index, block in enumerate(blocks):
                if block != NULL_BLOCK:
                    held.setdefault(block, []).append((request_id, group, index))
    return held


def accounting_problems(view: RequestManagerView) -> list[str]:
    """Ref counts equal holders; every other block is in the free queue exactly once; the null
    block is neither counted nor free; no table holds a block twice."""
    problems = []
    num_blocks = view.config.num_blocks
    if set(view.blocks) != set(range(1, num_blocks)):
        problems.append(f"the pool's blocks are {sorted(view.blocks)}, not 1..{num_blocks - 1}")
    held = holders(view)
    for block, places in held.items():
        tables = Counter((request_id, group) for request_id, group, _ in places)
        twice = [key for key, count in tables.items() if count > 1]
        if twice:
            problems.append(f"block {block} is held twice by one table: {twice}")
        seen = view.blocks.get(block)
        if seen is None:
            problems.append(f"a table holds block {block}, not a block of the pool")
        elif seen.ref_count != len(places):
            problems.append(
                f"block {block} has ref_count {seen.ref_count} but {len(places)} holders {places}"
            )
    for block, seen in view.blocks.items():
        if block not in held and seen.ref_count != 0:
            problems.append(f"block {block} has ref_count {seen.ref_count} and no holder")
    queue = Counter(view.free_queue)
    for block, count in queue.items():
        if count > 1:
            problems.append(f"block {block} is {count} times in the free queue")
        if block == NULL_BLOCK:
            problems.append("the null block is in the free queue")
        elif block in held:
            problems.append(f"block {block} is held and in the free queue")
    missing = sorted(b for b in view.blocks if b not in held and b not in queue)
    if missing:
        problems.append(f"blocks {missing} are neither held nor in the free queue (leaked)")
    return problems


def count_problems(view: RequestManagerView, free: int, usage: float) -> list[str]:
    """``num_free_blocks()`` is the free queue's length and ``usage()`` its exact formula."""
    problems = []
    if free != len(view.free_queue):
        problems.append(f"num_free_blocks() is {free}, the free queue holds {len(view.free_queue)}")
    total = view.config.num_blocks - 1
    wanted = 1.0 - len(view.free_queue) / total if total else 0.0
    if usage != wanted:
        problems.append(f"usage() is {usage!r}, not 1 - {len(view.free_queue)}/{total}")
    return problems


def table_problems(view: RequestManagerView, running: Sequence[Scheduled]) -> list[str]:
    """The manager holds tables for exactly the running requests, each with a slot for every
    computed token; the null block only as a window group's skipped prefix, never where the
    window still reads (``i < max(0, computed - W + 1) // B``), and never again where a block
    was released (``window_nulls``, updated here)."""
    problems = []
    size = view.config.block_size
    ids = {r.request_id for r in running}
    if set(view.requests) != ids:
        problems.append(f"the manager holds {sorted(view.requests)}, running are {sorted(ids)}")
    for request in running:
        table = view.requests.get(request.request_id)
        if table is None:
            continue
        computed = request.num_computed_tokens
        for group, (kind, blocks) in enumerate(zip(view.config.groups, table.blocks, strict=True)):
            name = f"{request.request_id!r} group {group}"
            if len(blocks) * size < computed:
                problems.append(f"{name} has {len(blocks)} blocks for {computed} computed tokens")
            nulls = next((i for i, b in enumerate(blocks) if b != NULL_BLOCK), len(blocks))
            if any(b == NULL_BLOCK for b in blocks[nulls:]):
                problems.append(f"{name}: a null block after a held one: {list(blocks)}")
            window = kind.sliding_window
            if window is None:
                if nulls:
                    problems.append(f"{name} (full attention) holds the null block: {list(blocks)}")
                continue
            allowed = max(0, computed - window + 1) // size
            if nulls > allowed:
                problems.append(
                    f"{name}: {nulls} leading null blocks, but the window of {window} still reads"
                    f" block {allowed} after {computed} computed tokens: {list(blocks)}"
                )
            before = request.window_nulls.get(group, 0)
            if nulls < before:
                problems.append(
                    f"{name}: a released block is read again ({before} leading nulls, now"
                    f" {nulls}): {list(blocks)}"
                )
            request.window_nulls[group] = nulls
    return problems


def sharing_problems(view: RequestManagerView, found: Mapping[RequestId, Contents]) -> list[str]:
    """A block held by two requests holds the same full block of both: same group, same
    index, same chained hash (so the same prefix, tokens and keys)."""
    problems = []
    for block, places in holders(view).items():
        if len(places) < 2:
            continue
        keys = set()
        for request_id, group, index in places:
            hashes = found[request_id].hashes if request_id in found else ()
            keys.add((group, index, hashes[index] if index < len(hashes) else None))
        if len(keys) > 1 or None in {key[2] for key in keys}:
            shown = [(r, g, i) for r, g, i in places]
            problems.append(
                f"block {block} is shared by (request, group, index) {shown} at different"
                " prefixes (or a block not full of committed tokens)"
            )
    return problems


def kv_problems(
    view: RequestManagerView,
    running: Sequence[Scheduled],
    found: Mapping[RequestId, Contents],
    kv: RequestKVModel,
) -> list[str]:
    """Every running request's computed tokens are in its blocks, and every cached block holds
    what its hash says: a wrong hit or a block cached before it was computed reads as wrong
    data."""
    problems = []
    for request in running:
        table = view.requests.get(request.request_id)
        if table is None:
            continue
        cells = found[request.request_id].cells
        for group, blocks in enumerate(table.blocks):
            problems += kv.misread(group, blocks, cells, range(request.num_computed_tokens))
    for block, seen in view.blocks.items():
        if seen.cached is not None:
            wrong = kv.cached_misread(block, seen.cached.block_hash)
            if wrong is not None:
                problems.append(wrong)
    return problems


def cached_keys(view: RequestManagerView) -> Counter[CachedKey]:
    return Counter(seen.cached for seen in view.blocks.values() if seen.cached is not None)


def fold_events(
    folded: Counter[CachedKey], events: Sequence[KVEvent], kv: RequestKVModel, block_size: int
) -> list[str]:
    """Adds ``events`` to the keys they say are cached (``folded``, updated); returns what is
    wrong with any of them: a removal of a key not cached, a stored run whose tokens, parent or
    block size are not those of its hashes."""
    problems = []
    for item in events:
        if isinstance(item, AllBlocksCleared):
            folded.clear()
        elif isinstance(item, BlockRemoved):
            for block_hash in item.block_hashes:
                key = CachedKey(item.group, block_hash)
                if folded[key] <= 0:
                    problems.append(f"BlockRemoved of {block_hash.hex()[:12]}, not cached")
                folded[key] -= 1
                if folded[key] <= 0:
                    del folded[key]
        elif isinstance(item, BlockStored):
            problems += stored_problems(item, kv, block_size)
            for block_hash in item.block_hashes:
                folded[CachedKey(item.group, block_hash)] += 1
        else:
            problems.append(f"take_events answered {item!r}, not a KV event")
    return problems


def stored_problems(item: BlockStored, kv: RequestKVModel, block_size: int) -> list[str]:
    """A ``BlockStored`` names exactly the run of consecutive blocks it stored
    (``specs/request_level.md`` §4.7): at least one hash, each the next block of the same chain,
    its parent the hash before the first (None at a request's start), its tokens exactly those
    blocks' tokens. A router that trusts the tokens or the parent is misled by anything else."""
    if item.block_size != block_size or not item.block_hashes:
        return [f"{item!r}: block size {item.block_size} or no hashes"]
    blocks: list[tuple[Cell, ...]] = []
    for block_hash in item.block_hashes:
        known = kv.by_hash.get(block_hash)
        if known is None:
            return [f"BlockStored of {block_hash.hex()[:12]}, no request's full block"]
        blocks.append(known)
    problems = []
    for j in range(1, len(blocks)):
        before, here = item.block_hashes[j - 1], item.block_hashes[j]
        if blocks[j][0].parent != before:
            problems.append(f"BlockStored's {here.hex()[:12]} does not follow {before.hex()[:12]}")
    first = blocks[0][0]
    parent = None if first.position == 0 else first.parent
    if item.parent_hash != parent:
        problems.append(f"BlockStored's parent is {item.parent_hash!r}, not {parent!r}")
    tokens = tuple(cell.token for cells in blocks for cell in cells)
    if tuple(item.token_ids) != tokens:
        problems.append(f"BlockStored's tokens are {item.token_ids}, its blocks hold {tokens}")
    if item.lora_id != first.extra_key.lora_id:
        problems.append(f"BlockStored's lora id is {item.lora_id}, not {first.extra_key.lora_id}")
    return problems


def none_problems(
    before: RequestManagerView, after: RequestManagerView, request_id: RequestId
) -> list[str]:
    """``allocate_slots`` answered None: nothing changed but blocks of ``request_id``'s window
    groups released to the null block (each such block's ref count one lower, back in the free
    queue if no one else holds it)."""
    problems = []
    released: Counter[BlockId] = Counter()
    if set(before.requests) != set(after.requests):
        problems.append(f"requests {sorted(before.requests)} became {sorted(after.requests)}")
    for rid, was in before.requests.items():
        now = after.requests.get(rid)
        if now is None or now == was:
            continue
        if rid != request_id or now.num_cached_blocks != was.num_cached_blocks:
            problems.append(f"request {rid!r}'s table changed: {was} -> {now}")
            continue
        groups = zip(before.config.groups, was.blocks, now.blocks, strict=True)
        for group, (kind, old, new) in enumerate(groups):
            if len(old) != len(new) or (kind.sliding_window is None and old != new):
                problems.append(f"request {rid!r} group {group}: {list(old)} -> {list(new)}")
                continue
            for o, n in zip(old, new, strict=True):
                if o != n and n != NULL_BLOCK:
                    problems.append(f"request {rid!r} group {group}: {list(old)} -> {list(new)}")
                    break
                if o != n:
                    released[o] += 1
    for block, was_block in before.blocks.items():
        now_block = after.blocks[block]
        wanted = was_block.ref_count - released[block]
        if now_block.ref_count != wanted or now_block.cached != was_block.cached:
            problems.append(f"block {block}: {was_block} -> {now_block}")
    kept = [b for b in after.free_queue if b in set(before.free_queue)]
    if kept != list(before.free_queue):
        problems.append(f"the free queue {before.free_queue} became {after.free_queue}")
    return problems


def answer_problems(
    view: RequestManagerView, request_id: RequestId, answer: Sequence[Sequence[BlockId]]
) -> list[str]:
    """``allocate_slots``' new blocks: one list per group, never the null block, each block
    held by this request alone, at the end of its table."""
    table = view.requests.get(request_id)
    if table is None or len(answer) != len(table.blocks):
        return [f"allocate_slots answered {answer} for {request_id!r}'s table {table}"]
    problems = []
    for group, (new, blocks) in enumerate(zip(answer, table.blocks, strict=True)):
        if NULL_BLOCK in new:
            problems.append(f"group {group}'s new blocks {list(new)} include the null block")
        elif new and tuple(blocks[len(blocks) - len(new) :]) != tuple(new):
            problems.append(f"group {group}'s new blocks {list(new)} do not end {list(blocks)}")
        elif any(view.blocks[b].ref_count != 1 for b in new):
            problems.append(f"group {group}'s new blocks {list(new)} are held by others too")
    return problems
