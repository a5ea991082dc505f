"""One test per policy option (``specs/policy.md``): a small scripted scenario run on the
reference under every value of the option, all else pagedkv's, and the documented difference
asserted. Each test also names every value of its option, so a value added without a scenario
fails here. The last tests hold the option table to the reference (each cited rule exists) and
to this file (one test per option, none for a non-option), and ``specs/policy.md`` to the table.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import TypeVar

import pytest

from pagedkv.model_tests.formal import policy_page
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import operations
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError, UnsupportedError
from pagedkv.specs.policy import (
    OPTIONS,
    PAGEDKV,
    POLICY_TESTS,
    PROFILES,
    Policy,
    markdown_table,
    markdown_values,
    profile,
    value_text,
)
from pagedkv.specs.request_types import (
    AllBlocksCleared,
    AttentionKind,
    KVGroup,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import (
    NEVER_ACCESSED,
    AllocStatus,
    Device,
    ExtraKey,
    ManagerConfig,
    PoolConfig,
)

Outcome = TypeVar("Outcome")
ROOT = Prefix()


def under_each_value(name: str, scenario: Callable[[Policy], Outcome]) -> dict[str, Outcome]:
    """The scenario's outcome under each value of option ``name``, pagedkv's for the rest."""
    return {value: scenario(PAGEDKV.overridden({name: value})) for value in OPTIONS[name].values}


def manager(policy: Policy, **config: object) -> ReferenceBlockSpaceManager:
    settings: dict[str, object] = {"block_size": 1, "num_gpu_blocks": 4, "num_cpu_blocks": 4}
    settings["watermark"] = 0.0
    settings.update(config)
    return ReferenceBlockSpaceManager(ManagerConfig(**settings), policy)  # type: ignore[arg-type]


def pool(policy: Policy, num_blocks: int = 4, block_size: int = 1) -> ReferenceBlockPool:
    return ReferenceBlockPool(PoolConfig(num_blocks, block_size), policy)


def after(prefix: Prefix, *blocks: list[int]) -> Prefix:
    for tokens in blocks:
        prefix = prefix.extend(tokens)
    return prefix


def attempt(call: Callable[..., object], *args: object) -> object:
    """The call's result, or the name of the typed error it raised."""
    try:
        return call(*args)
    except PagedKVError as error:
        return type(error).__name__


# --- the sliding window ------------------------------------------------------------------------


def test_null_block() -> None:
    """A windowed manager's free GPU count right after construction differs by the null block;
    after the first append both hold it, at different ids."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, sliding_window=2)
        made = (m.get_null_block(), m.get_num_free_gpu_blocks())
        m.allocate(1, [1], [5])
        allocated = m.get_num_free_gpu_blocks()
        m.append_slots(1, [6])
        return made, allocated, (m.get_null_block(), m.get_num_free_gpu_blocks())

    assert under_each_value("null_block", scenario) == {
        "at_creation": ((0, 3), 2, (0, 1)),
        "at_first_append": ((None, 4), 3, (1, 1)),
    }


def test_window_release() -> None:
    """Window 1, six tokens: an append without tokens releases nothing token-exactly, vLLM's
    three; with a token, token-exact releases all six, vLLM's count still three."""

    def scenario(policy: Policy) -> tuple[list[int], list[int]]:
        m = manager(policy, num_gpu_blocks=10, sliding_window=1)
        m.allocate(1, [1], [1, 2, 3, 4, 5, 6])
        m.append_slots(1, [])
        without_tokens = m.get_block_table(1)
        m.append_slots(1, [7])
        return without_tokens, m.get_block_table(1)

    assert under_each_value("window_release", scenario) == {
        "token_exact": ([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0, 1]),
        "computed_blocks": ([0, 0, 0, 4, 5, 6], [0, 0, 0, 4, 5, 6, 1]),
    }


# --- worst cases and admission -----------------------------------------------------------------


def test_append_worst_case() -> None:
    """One partial, unshared block and no free block: (nothing appended, one token appended)
    fits under pagedkv's count as (yes, no: the block may need a copy), under vLLM's as (no, no:
    a partial block always counts), under nano-vllm's as (yes, yes: no block is added). With one
    block free, four new tokens, or four lookahead slots, need two new blocks under every count
    (nano-vllm's adds the tokens and the slots: a sum that subtracted either was a gap found by
    ``make mutate``)."""

    def scenario(policy: Policy) -> tuple[bool, bool, bool, bool]:
        m = manager(policy, block_size=2, num_gpu_blocks=1)
        m.allocate(1, [1], [1])
        roomy = manager(policy, block_size=2, num_gpu_blocks=2)
        roomy.allocate(1, [1], [1])
        return (
            m.can_append_slots(1, 0, 0),
            m.can_append_slots(1, 1, 0),
            roomy.can_append_slots(1, 4, 0),
            roomy.can_append_slots(1, 0, 4),
        )

    assert under_each_value("append_worst_case", scenario) == {
        "touched_blocks": (True, False, False, False),
        "token_chunks": (False, False, False, False),
        "new_blocks": (True, True, False, False),
    }


def test_admission() -> None:
    """Ten GPU blocks, a watermark of one, one held: nine blocks wait (LATER) under the
    watermark and fit (OK) by free blocks; ten are NEVER against LATER."""

    def scenario(policy: Policy) -> tuple[AllocStatus, AllocStatus]:
        m = manager(policy, num_gpu_blocks=10, watermark=0.1)
        m.allocate(1, [1], [0])
        return m.can_allocate(list(range(9))), m.can_allocate(list(range(10)))

    assert under_each_value("admission", scenario) == {
        "watermark": (AllocStatus.LATER, AllocStatus.NEVER),
        "free_blocks": (AllocStatus.OK, AllocStatus.LATER),
    }


def test_atomic() -> None:
    """An append whose worst case (a copy) exceeds the free count is refused up front by an
    atomic manager, and runs (no copy was needed) without the check; a prompt that does not fit
    is refused up front, or fails midway at the block that is missing; a swap counted against its
    cache hits is refused, or runs; the adapter declares which."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, block_size=2, num_gpu_blocks=1)
        m.allocate(1, [1], [1])
        appended = attempt(m.append_slots, 1, [2])
        tight = manager(policy, num_gpu_blocks=2)
        with pytest.raises(OutOfBlocksError) as failed:
            tight.allocate(1, [1], [1, 2, 3])
        swapped = manager(policy, enable_caching=True, num_cpu_blocks=2)
        swapped.allocate(1, [1], [1])
        swapped.swap_out(1)
        swapped.allocate(2, [2], [1, 2])
        return (
            m.atomic,
            appended,
            m.get_block_table(1),
            "needs 3 GPU blocks" in str(failed.value),
            swapped.can_swap_out(2),
            attempt(swapped.swap_out, 2),
        )

    assert under_each_value("atomic", scenario) == {
        "true": (True, "OutOfBlocksError", [0], True, AllocStatus.LATER, "OutOfBlocksError"),
        "false": (False, [], [0], False, AllocStatus.LATER, [(1, 5)]),
    }


# --- swapping ----------------------------------------------------------------------------------


def test_swap_pairs() -> None:
    """Two sequences share a full and a partial block, one has an empty lookahead block: the
    pairs are each distinct block's one real copy, or every table entry, sequence by sequence.
    Table by table, an atomic swap counts every entry up front: two entries of one cached block
    do not fit one CPU block, though the second would be a hit."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, block_size=2, num_cpu_blocks=5)
        m.allocate(1, [1, 2], [1, 2, 3])
        m.append_slots(1, [], 2)
        cached = manager(policy, block_size=2, num_cpu_blocks=1, enable_caching=True)
        cached.allocate(1, [1, 2], [1, 2])
        return m.swap_out(1), attempt(cached.swap_out, 1)

    assert under_each_value("swap_pairs", scenario) == {
        "copies": ([(0, 4), (1, 5)], [(0, 4)]),
        "every_entry": ([(0, 4), (1, 5), (2, 6), (0, 7), (1, 8)], "OutOfBlocksError"),
    }


def test_swap_worst_case() -> None:
    """Two tables over one full and one partial block, three CPU blocks: two distinct blocks
    fit; two table entries plus a chunk per table (four) never do. One table of two full blocks
    and one CPU block: no chunk, but each full entry the CPU does not hold costs one, so never
    under either count (a full block counted as partial, free, was a gap found by ``make
    mutate``)."""

    def scenario(policy: Policy) -> tuple[AllocStatus, AllocStatus]:
        m = manager(policy, block_size=2, num_cpu_blocks=3)
        m.allocate(1, [1, 2], [1, 2, 3])
        full = manager(policy, block_size=2, num_cpu_blocks=1)
        full.allocate(1, [1], [1, 2, 3, 4])
        return m.can_swap_out(1), full.can_swap_out(1)

    assert under_each_value("swap_worst_case", scenario) == {
        "distinct_blocks": (AllocStatus.OK, AllocStatus.NEVER),
        "table_entries": (AllocStatus.NEVER, AllocStatus.NEVER),
    }


def test_swap_never() -> None:
    """A swapped-out group of all ten GPU blocks, a watermark of one: NEVER back in with the
    watermark kept, LATER when only the capacity bounds it."""

    def scenario(policy: Policy) -> AllocStatus:
        m = manager(policy, num_gpu_blocks=10, num_cpu_blocks=10, watermark=0.1)
        m.allocate(1, [1], list(range(10)))
        m.swap_out(1)
        return m.can_swap_in(1)

    assert under_each_value("swap_never", scenario) == {
        "with_watermark": AllocStatus.NEVER,
        "without_watermark": AllocStatus.LATER,
    }


def test_swap_out_answer() -> None:
    """A group larger than the CPU: NEVER, or (a bool's answer) LATER; one that fits is OK."""

    def scenario(policy: Policy) -> tuple[AllocStatus, AllocStatus]:
        m = manager(policy, num_cpu_blocks=1)
        m.allocate(1, [1], [1, 2])
        m.allocate(2, [2], [9])
        return m.can_swap_out(1), m.can_swap_out(2)

    assert under_each_value("swap_out_answer", scenario) == {
        "status": (AllocStatus.NEVER, AllocStatus.OK),
        "ok_or_later": (AllocStatus.LATER, AllocStatus.OK),
    }


def test_swap_cross_tables() -> None:
    """An encoder-decoder group swapped out: its cross block moves to the CPU with it, or stays
    on the GPU (no pair, still held there)."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, block_size=2)
        m.allocate(1, [1], [1, 2], ExtraKey(), [7, 8])
        pairs = m.swap_out(1)
        return pairs, m.get_cross_block_table(1), m.get_num_free_gpu_blocks()

    assert under_each_value("swap_cross_tables", scenario) == {
        "moved": ([(0, 4), (1, 5)], [5], 4),
        "kept_on_gpu": ([(0, 4)], [1], 3),
    }


# --- appending ---------------------------------------------------------------------------------


def test_append_order() -> None:
    """Two sequences share a partial block; one appends two tokens: the copy takes the lowest
    free block before the new block, or after it (slots first)."""

    def scenario(policy: Policy) -> tuple[list[int], list[tuple[int, int]]]:
        m = manager(policy, block_size=2)
        m.allocate(1, [1, 2], [1])
        pairs = m.append_slots(1, [2, 3])
        return m.get_block_table(1), pairs

    assert under_each_value("append_order", scenario) == {
        "token_by_token": ([1, 2], [(0, 1)]),
        "slots_first": ([2, 1], [(0, 2)]),
    }


def test_lookahead() -> None:
    """Lookahead slots are taken, or refused with UnsupportedError; appends without them work
    either way."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, block_size=2)
        m.allocate(1, [1], [1])
        asked = (
            attempt(m.can_allocate, [1], 2),
            attempt(m.can_append_slots, 1, 1, 2),
            attempt(m.append_slots, 1, [2], 2),
        )
        return asked, attempt(m.append_slots, 1, [3]), m.get_block_table(1)

    assert under_each_value("lookahead", scenario) == {
        "true": ((AllocStatus.OK, True, []), [], [0, 1]),
        "false": (("UnsupportedError",) * 3, [], [0]),
    }


def test_encoder() -> None:
    """An encoder prompt gets a cross-attention table, or UnsupportedError and nothing taken."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, block_size=2)
        asked = attempt(m.can_allocate, [1], 0, [7])
        made = attempt(m.allocate, 1, [1], [1], ExtraKey(), [7])
        return asked, made, m.get_num_free_gpu_blocks()

    assert under_each_value("encoder", scenario) == {
        "true": (AllocStatus.OK, None, 2),
        "false": ("UnsupportedError", "UnsupportedError", 4),
    }


def test_groups() -> None:
    """A request with two sequences shares its prompt, or is UnsupportedError; one sequence is
    admitted either way."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy)
        pair = attempt(m.allocate, 1, [1, 2], [1])
        single = attempt(m.allocate, 2, [3], [1])
        return pair, single, m.get_num_free_gpu_blocks()

    assert under_each_value("groups", scenario) == {
        "many_sequences": (None, None, 2),
        "one_sequence": ("UnsupportedError", None, 3),
    }


# --- promotion, copy-on-write and the hash index -----------------------------------------------


def test_promotion() -> None:
    """A shared partial block filled to content cached elsewhere, no free block but one
    evictable: pagedkv switches to the cached block and evicts nothing; vLLM 0.6.3 copies first
    (the copy evicts the cached block), then switches; append-only keeps the filled copy as a
    second holder of the hash, its pair pending."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy, num_blocks=3)
        p.allocate_immutable(ROOT, [1])
        spare = p.allocate_immutable(ROOT, [7])
        p.free(spare)
        mine = p.allocate_mutable()
        p.fork([mine])
        held = p.append_tokens(mine, ROOT, [1])
        still_cached = p.lookup(ROOT.child_hash([7])) is not None
        return held, still_cached, p.clear_copy_on_writes(), p.num_free_blocks()

    assert under_each_value("promotion", scenario) == {
        "dedup": (0, True, [], 1),
        "copy_then_dedup": (0, False, [], 1),
        "keep": (1, False, [(2, 1)], 0),
    }

    def cached_in_the_evictable_block(policy: Policy) -> tuple[object, ...]:
        """The content cached in the one block the copy can take: vLLM 0.6.3's copy evicts it,
        so the filled copy is the cached block then (a lookup after the copy finds none)."""
        p = pool(policy, num_blocks=3)
        p.free(p.allocate_immutable(ROOT, [1]))
        mine = p.allocate_mutable()
        p.fork([mine])
        p.allocate_mutable()
        held = p.append_tokens(mine, ROOT, [1])
        found = p.lookup(ROOT.child_hash([1]))
        return held, found, p.clear_copy_on_writes(), p.block(held).tokens

    assert under_each_value("promotion", cached_in_the_evictable_block) == {
        "dedup": (0, 0, [], (1,)),
        "copy_then_dedup": (0, 0, [(1, 0)], (1,)),
        "keep": (0, 0, [(1, 0)], (1,)),
    }


def test_duplicates() -> None:
    """Under ``promotion=keep``, two blocks filled with one content: a lookup finds the first
    (the second waits, and is found once the first is evicted), or the latest (the first loses
    its hash)."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(replace(policy, promotion="keep"), num_blocks=2)
        first = p.allocate_mutable()
        p.append_tokens(first, ROOT, [1])
        second = p.allocate_mutable()
        p.append_tokens(second, ROOT, [1])
        found = p.lookup(ROOT.child_hash([1]))
        first_hashed = p.block(first).content_hash is not None
        p.free(first)
        p.allocate_mutable()
        return found, first_hashed, p.lookup(ROOT.child_hash([1]))

    assert under_each_value("duplicates", scenario) == {
        "first_stays": (0, True, 1),
        "latest_replaces": (1, False, 1),
    }


def test_copy_on_write() -> None:
    """A block with three holders: ``cow_if_not_appendable`` and an append copy it, or both
    raise UnsupportedError and no pair is recorded."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy, block_size=2)
        shared = p.allocate_mutable()
        p.append_tokens(shared, ROOT, [1])
        p.fork([shared])
        p.fork([shared])
        copied = attempt(p.cow_if_not_appendable, shared)
        appended = attempt(p.append_tokens, shared, ROOT, [2])
        return copied, appended, p.clear_copy_on_writes(), p.block(shared).ref_count

    assert under_each_value("copy_on_write", scenario) == {
        "true": (1, 2, [(0, 1), (0, 2)], 1),
        "false": ("UnsupportedError", "UnsupportedError", [], 3),
    }


def test_cow_pairs() -> None:
    """A copy whose destination is given back before the pairs are drained is dropped, or kept;
    a copy from a block still awaiting its own copy reads that copy's source, or the block."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy, block_size=2)
        block = p.allocate_mutable()
        p.append_tokens(block, ROOT, [1])
        p.fork([block])
        p.free(p.cow_if_not_appendable(block))
        given_back = p.clear_copy_on_writes()
        p.fork([block])
        copy = p.cow_if_not_appendable(block)
        p.fork([copy])
        p.cow_if_not_appendable(copy)
        return given_back, p.clear_copy_on_writes()

    assert under_each_value("cow_pairs", scenario) == {
        "pending": ([], [(0, 1), (0, 2)]),
        "as_recorded": ([(0, 1)], [(0, 1), (1, 2)]),
    }


def test_pool_null_block() -> None:
    """A pool keeps its first block for itself, or gives every block; its null block is no use
    of the pool, so a reset succeeds with it held."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy, num_blocks=3)
        made = (p.get_null_block(), p.num_free_blocks())
        reset = p.reset_prefix_cache()
        return made, reset, p.get_null_block(), p.allocate_mutable()

    assert under_each_value("pool_null_block", scenario) == {
        "false": ((None, 3), True, None, 0),
        "true": ((0, 2), True, 0, 1),
    }


def test_keep_freed_cache() -> None:
    """A freed cached block stays cached (a later prompt hits it), or loses its hash."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy)
        p.free(p.allocate_immutable(ROOT, [1]))
        cached = p.lookup(ROOT.child_hash([1]))
        p.allocate_immutable(ROOT, [1])
        return cached, p.hit_rate(), p.num_free_blocks()

    assert under_each_value("keep_freed_cache", scenario) == {
        "true": (0, 0.5, 3),
        "false": (None, 0.0, 3),
    }


def test_eviction() -> None:
    """Two cached blocks given back, the first accessed later: LRU evicts the older access,
    release order the first given back. A sequence gives its blocks back tail first, so its tail
    is evicted first under release order too. A cached block given back before a blank one:
    the blank one is taken, or under one free list the cached one, first in line."""

    def scenario(policy: Policy) -> tuple[int, list[int], bool, int]:
        p = pool(policy, num_blocks=2)
        later = p.allocate_immutable(ROOT, [1])
        earlier = p.allocate_immutable(ROOT, [2])
        p.mark_accessed([later], 5.0)
        p.mark_accessed([earlier], 1.0)
        p.free(later)
        p.free(earlier)
        m = manager(policy, enable_caching=True, num_gpu_blocks=2)
        m.allocate(1, [1], [1, 2])
        m.free(1)
        m.allocate(2, [2], [9])
        head_cached = m.view().gpu.cached.get(ROOT.child_hash([1])) == 0
        line = pool(policy, num_blocks=2)
        cached = line.allocate_immutable(ROOT, [3])
        blank = line.allocate_mutable()
        line.free(cached)
        line.free(blank)
        return p.allocate_mutable(), m.get_block_table(2), head_cached, line.allocate_mutable()

    assert under_each_value("eviction", scenario) == {
        "lru": (1, [1], True, 1),
        "release_order": (0, [1], True, 1),
        "free_list": (0, [1], True, 0),
    }


def test_lookup() -> None:
    """A prompt whose first block misses while its second is still cached (held by a windowed
    sequence that let its head go, since evicted): the second is a hit, or (after the first miss)
    is never looked up: a fresh block is taken for it (evicting another cached block) before its
    content dedups onto the cached one."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, enable_caching=True, num_gpu_blocks=5, sliding_window=2)
        m.allocate(1, [1], [1, 2])
        m.append_slots(1, [3])
        m.allocate(2, [2], [9, 8])
        m.free(2)
        m.allocate(3, [3], [1, 2])
        other_cached = ROOT.child_hash([9]) in m.view().gpu.cached
        return m.get_block_table(3), m.get_prefix_cache_hit_rate(Device.GPU), other_cached

    assert under_each_value("lookup", scenario) == {
        "every_block": ([1, 2], 1 / 6, True),
        "stop_at_first_miss": ([1, 2], 0.0, False),
    }


# --- access times and computed marks -----------------------------------------------------------


def test_revival_access() -> None:
    """A hit on a cached block in the evictor keeps its last access, or resets it to never
    accessed; a hit on a held block keeps it either way."""

    def scenario(policy: Policy) -> tuple[float, float]:
        p = pool(policy)
        revived = p.allocate_immutable(ROOT, [1])
        p.mark_accessed([revived], 5.0)
        p.free(revived)
        p.allocate_immutable(ROOT, [1])
        held = p.allocate_immutable(ROOT, [2])
        p.mark_accessed([held], 3.0)
        p.allocate_immutable(ROOT, [2])
        return p.block(revived).last_accessed, p.block(held).last_accessed

    assert under_each_value("revival_access", scenario) == {
        "kept": (5.0, 3.0),
        "reset": (NEVER_ACCESSED, 3.0),
    }


def test_access_time() -> None:
    """``access_all_blocks_in_seq`` reaches the blocks at once, or (caching only) when the
    sequence is freed; without caching, never."""

    def scenario(policy: Policy) -> tuple[float, float, float]:
        caching = manager(policy, enable_caching=True)
        caching.allocate(1, [1], [1, 2])
        caching.access_all_blocks_in_seq(1, 3.0)
        at_once = caching.view().gpu.blocks[0].last_accessed
        caching.free(1)
        naive = manager(policy)
        naive.allocate(1, [1], [1, 2])
        naive.access_all_blocks_in_seq(1, 3.0)
        naive_time = naive.view().gpu.blocks[0].last_accessed
        return at_once, caching.view().gpu.blocks[0].last_accessed, naive_time

    assert under_each_value("access_time", scenario) == {
        "immediate": (3.0, 3.0, 3.0),
        "at_free": (NEVER_ACCESSED, 3.0, NEVER_ACCESSED),
    }


def test_computed_marks() -> None:
    """``mark_computed`` of one of two blocks promoted since the last mark marks that one, or
    both; a hit that revives a cached block nobody marked leaves it uncomputed, or makes it
    computed; a swap carries the marks of a group's blocks, or its copies are promoted blocks
    that wait for the next mark; marking a swapped-out group marks its own blocks, or what the
    GPU promoted since the last mark."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        p = pool(policy)
        named = p.allocate_immutable(ROOT, [1])
        other = p.allocate_immutable(ROOT, [2])
        p.mark_computed([named])
        marked = (p.block(named).computed, p.block(other).computed)
        unmarked = p.allocate_immutable(ROOT, [3])
        p.free(unmarked)
        p.mark_computed([])
        p.allocate_immutable(ROOT, [3])
        m = manager(policy, enable_caching=True, num_gpu_blocks=5)
        m.allocate(1, [1], [1, 2, 3])
        m.mark_blocks_as_computed(1)
        m.swap_out(1)
        m.allocate(2, [2], [4, 5])
        m.mark_blocks_as_computed(1)
        swapped = (m.get_num_cached_tokens(1), m.get_common_computed_block_ids([2]))
        return marked, p.block(unmarked).computed, swapped

    assert under_each_value("computed_marks", scenario) == {
        "data": ((True, False), False, (3, [])),
        "promoted_batch": ((True, True), True, (0, [3])),
    }


def test_computed_list() -> None:
    """A sequence asked for its computed blocks before they were computed: afterwards the answer
    is recomputed, or the kept list stopped at the gap and stays empty until the sequence is
    freed (a new sequence over the same blocks finds them). A window that releases the head of a
    kept list empties it: no list names a released block."""

    def scenario(policy: Policy) -> tuple[object, ...]:
        m = manager(policy, enable_caching=True, num_gpu_blocks=8)
        m.allocate(1, [1], [1, 2, 3])
        before = m.get_common_computed_block_ids([1])
        m.mark_blocks_as_computed(1)
        after = m.get_common_computed_block_ids([1])
        m.free(1)
        m.allocate(2, [2], [1, 2, 3])
        return before, after, m.get_common_computed_block_ids([2]), windowed(policy)

    def windowed(policy: Policy) -> tuple[list[int], list[int]]:
        m = manager(policy, enable_caching=True, num_gpu_blocks=8, sliding_window=2)
        m.allocate(1, [1], [1, 2, 3])
        m.mark_blocks_as_computed(1)
        found = m.get_common_computed_block_ids([1])
        m.append_slots(1, [4])
        return found, m.get_common_computed_block_ids([1])

    assert under_each_value("computed_list", scenario) == {
        "recomputed": ([], [0, 1], [0, 1], ([1, 2], [])),
        "cached_per_sequence": ([], [], [0, 1], ([1, 2], [])),
    }


def test_computed_list_swap() -> None:
    """A kept list that stopped at a gap (asked before anything was computed), then a swap out
    and in: the list starts over and finds the block the swap in took back computed, or stays
    stopped and empty (vLLM's tracker outlives the swap); a list that had grown keeps its
    length, over the blocks the entries now hold."""

    def scenario(policy: Policy) -> tuple[list[int], list[int], list[int]]:
        kept = replace(PROFILES["vllm-v0"], computed_list_swap=policy.computed_list_swap)
        m = manager(kept, block_size=4, enable_caching=True, num_gpu_blocks=7, num_cpu_blocks=6)
        m.allocate(3, [4], [3, 1, 4, 1, 5])
        before = m.get_common_computed_block_ids([4])
        m.swap_out(3)
        m.swap_in(3)
        grown = manager(kept, enable_caching=True, num_gpu_blocks=8, num_cpu_blocks=8)
        grown.allocate(1, [1], [1, 2, 3])
        grown.mark_blocks_as_computed(1)
        found = grown.get_common_computed_block_ids([1])
        grown.swap_out(1)
        grown.swap_in(1)
        assert grown.get_common_computed_block_ids([1]) == found
        return before, m.get_common_computed_block_ids([4]), found

    assert under_each_value("computed_list_swap", scenario) == {
        "starts_over": ([], [0], [0, 1]),
        "kept": ([], [], [0, 1]),
    }


def test_common_prefix() -> None:
    """Two sequences, one with nothing computed before its last block: the common prefix is
    empty, or the other's run (empty runs dropped); one sequence alone gets its run."""

    def scenario(policy: Policy) -> tuple[list[int], list[int]]:
        m = manager(policy, enable_caching=True, num_gpu_blocks=8)
        m.allocate(1, [1], [1, 2, 3])
        m.mark_blocks_as_computed(1)
        m.allocate(2, [2], [9])
        return m.get_common_computed_block_ids([1, 2]), m.get_common_computed_block_ids([1])

    assert under_each_value("common_prefix", scenario) == {
        "every_run": ([], [0, 1]),
        "nonempty_runs": ([0, 1], [0, 1]),
    }


def test_cached_tokens() -> None:
    """A computed prompt, then a second prompt sharing two of its blocks: the first counts its
    three computed tokens, or none (it had no hits when allocated); the second two either way.
    With blocks of two tokens the hits are counted in tokens: two hit blocks are four (a count
    divided by the block size instead was a gap found by ``make mutate``)."""

    def scenario(policy: Policy) -> tuple[int, int, int]:
        m = manager(policy, enable_caching=True, num_gpu_blocks=8)
        m.allocate(1, [1], [1, 2, 3])
        m.mark_blocks_as_computed(1)
        m.allocate(2, [2], [1, 2, 4])
        pairs = manager(policy, enable_caching=True, block_size=2, num_gpu_blocks=8)
        pairs.allocate(1, [1], [1, 2, 3, 4, 5])
        pairs.mark_blocks_as_computed(1)
        pairs.allocate(2, [2], [1, 2, 3, 4, 6])
        return (
            m.get_num_cached_tokens(1),
            m.get_num_cached_tokens(2),
            pairs.get_num_cached_tokens(2),
        )

    assert under_each_value("cached_tokens", scenario) == {
        "computed_marks": (3, 2, 4),
        "hits_at_allocate": (0, 2, 4),
    }


# --- the request level ------------------------------------------------------------------------


def requests(policy: Policy, *groups: KVGroup, num_blocks: int = 8) -> ReferenceRequestKVManager:
    return ReferenceRequestKVManager(RequestConfig(num_blocks, 2, groups or (KVGroup(),)), policy)


def prompt(request_id: str, num_tokens: int, computed: int = 0) -> Request:
    return Request(request_id, tuple(range(num_tokens)), num_tokens, computed)


def test_request_hit_cap() -> None:
    """A cached 4-token prompt asked again: vLLM recomputes its last block for the logits."""

    def scenario(policy: Policy) -> tuple[list[list[int]], int]:
        m = requests(policy)
        m.allocate_slots(prompt("a", 4), 4)
        return m.get_computed_blocks(prompt("b", 4))

    assert under_each_value("request_hit_cap", scenario) == {
        "n_minus_1": ([[1]], 2),
        "n": ([[1, 2]], 4),
    }


def test_request_release_before_fit() -> None:
    """Window 4, block size 2, 4 usable blocks: 6 computed tokens and 10 more do not fit; the
    block that left the window is given back before the None, or not at all."""

    def scenario(policy: Policy) -> tuple[object, list[list[int]], tuple[int, ...]]:
        m = requests(policy, KVGroup(AttentionKind.SLIDING_WINDOW, 4), num_blocks=5)
        m.allocate_slots(prompt("a", 6), 6)
        answer = m.allocate_slots(prompt("a", 16, computed=6), 10)
        return answer, m.get_block_ids("a"), m.view().free_queue

    assert under_each_value("request_release_before_fit", scenario) == {
        "true": (None, [[0, 2, 3]], (4, 1)),
        "false": (None, [[1, 2, 3]], (4,)),
    }


def test_request_free_order() -> None:
    """Blocks 1, 2 cached and 3 not, freed: the tail first or the head first."""

    def scenario(policy: Policy) -> tuple[int, ...]:
        m = requests(policy)
        m.allocate_slots(prompt("a", 5), 5)
        m.free("a")
        return m.view().free_queue

    assert under_each_value("request_free_order", scenario) == {
        "tail_first": (3, 4, 5, 6, 7, 2, 1),
        "head_first": (3, 4, 5, 6, 7, 1, 2),
    }


def test_request_window_retention() -> None:
    """Window 3, block size 2: a 6-token prompt fills blocks 1, 2, 3; a replay of it resumes at
    token 5, whose window reads block 2 only. A longer prompt sharing the 6 tokens hits 6 tokens
    densely, 4 when only block 2 was kept."""

    def scenario(policy: Policy) -> tuple[list[int], int, list[object]]:
        m = requests(policy, KVGroup(AttentionKind.SLIDING_WINDOW, 3))
        m.allocate_slots(prompt("a", 6), 6)
        cached = [block for block, view in m.view().blocks.items() if view.cached is not None]
        events = [(e.block_hashes, e.token_ids) for e in m.take_events()]  # type: ignore[union-attr]
        return sorted(cached), m.get_computed_blocks(prompt("b", 8))[1], [len(e[0]) for e in events]

    assert under_each_value("request_window_retention", scenario) == {
        "dense": ([1, 2, 3], 6, [3]),
        "replay_boundary": ([2], 4, [1]),
    }


def test_request_clear_event() -> None:
    """Caching off, a reset: no event, or vLLM's ``AllBlocksCleared`` all the same."""

    def scenario(policy: Policy) -> tuple[bool, list[object]]:
        m = ReferenceRequestKVManager(RequestConfig(8, 2, enable_caching=False), policy)
        m.allocate_slots(prompt("a", 3), 3)
        m.free("a")
        return m.reset_prefix_cache(), list(m.take_events())

    assert under_each_value("request_clear_event", scenario) == {
        "with_caching": (True, []),
        "always": (True, [AllBlocksCleared()]),
    }


def test_request_eviction() -> None:
    """Window 3, block size 2, 5 usable blocks: ``a`` computes 8 tokens, so blocks 1 and 2 leave
    the window (given back first, cached), then ``a`` is freed (4, 3 behind them). Four new
    blocks: the free queue evicts 1 and 2 though 3 and 4 are chained on them; leaf-only eviction
    takes the chain from its tail and keeps its head, 1."""

    def scenario(policy: Policy) -> tuple[list[list[int]], tuple[int, ...]]:
        m = requests(policy, KVGroup(AttentionKind.SLIDING_WINDOW, 3), num_blocks=6)
        m.allocate_slots(prompt("a", 6), 6)
        m.allocate_slots(prompt("a", 8, computed=6), 2)
        m.free("a")
        new = m.allocate_slots(Request("b", tuple(range(50, 57)), 7, 0), 7)
        assert new is not None
        return new, m.view().free_queue

    assert under_each_value("request_eviction", scenario) == {
        "free_queue": ([[5, 2, 1, 4]], (3,)),
        "leaf_lru": ([[5, 4, 3, 2]], (1,)),
    }


def test_request_cache_timing() -> None:
    """``a`` schedules a 4-token prompt, decodes two tokens and finishes: how much of it a
    9-token ``b`` would hit at each point. At once (vLLM); once computed; or after each prefill
    chunk and at the finish, nothing while decoding (SGLang's checkpoints)."""

    def scenario(policy: Policy) -> tuple[int, ...]:
        m = requests(policy)
        b = prompt("b", 9)
        seen = []
        m.allocate_slots(prompt("a", 4), 4)
        seen.append(m.get_computed_blocks(b)[1])
        m.allocate_slots(Request("a", tuple(range(5)), 4, 4), 1)
        seen.append(m.get_computed_blocks(b)[1])
        m.allocate_slots(Request("a", tuple(range(6)), 4, 5), 1)
        seen.append(m.get_computed_blocks(b)[1])
        m.free("a")
        seen.append(m.get_computed_blocks(b)[1])
        return tuple(seen)

    assert under_each_value("request_cache_timing", scenario) == {
        "at_schedule": (4, 4, 6, 6),
        "after_compute": (0, 4, 4, 4),
        "at_checkpoint": (0, 4, 4, 6),
    }


def test_request_duplicates() -> None:
    """``a`` and then ``b`` schedule the same 4-token prompt, ``b`` offered no hit: ``b``'s own
    blocks are cached behind ``a``'s (vLLM), or given back for them, its table rewritten and no
    event naming them (SGLang's insert)."""

    def scenario(policy: Policy) -> tuple[list[list[int]], int, int]:
        m = requests(policy)
        m.allocate_slots(prompt("a", 4), 4)
        m.allocate_slots(prompt("b", 4), 4)
        return m.get_block_ids("b"), m.num_free_blocks(), len(m.take_events())

    assert under_each_value("request_duplicates", scenario) == {
        "keep": ([[3, 4]], 3, 2),
        "free_at_insert": ([[1, 2]], 5, 1),
    }


# --- operations an engine lacks ----------------------------------------------------------------


def test_unsupported() -> None:
    """Each operation of either level, named unsupported, raises UnsupportedError on the
    reference before it looks at its arguments; named nowhere, it runs."""
    for name in operations.OPERATIONS["manager"]:
        lacking = manager(PAGEDKV.overridden({"unsupported": name}))
        with pytest.raises(UnsupportedError, match=name):
            getattr(lacking, name)()
    for name in operations.required("pool"):
        lacking_pool = pool(PAGEDKV.overridden({"unsupported": f"{name},fork"}))
        with pytest.raises(UnsupportedError, match=name):
            getattr(lacking_pool, name)()
    m = manager(PAGEDKV.overridden({"unsupported": "fork"}))
    m.allocate(1, [1], [1])
    assert (attempt(m.fork, 1, 2), m.get_num_cached_tokens(1)) == ("UnsupportedError", 0)
    p = pool(PAGEDKV)
    assert (p.hit_rate(), p.fork([p.allocate_mutable()])) == (0.0, [0])
    with pytest.raises(ValueError, match="not an operation"):
        PAGEDKV.overridden({"unsupported": "allocate,defragment_all"})


# --- the option table, the reference, this file and the spec page ------------------------------

REPOSITORY = Path(__file__).resolve().parents[2]
HOLDING_TESTS = {
    "test_every_option_is_a_policy_field_with_meaningful_values",
    "test_every_rule_cites_a_definition",
    "test_one_test_per_option",
    "test_the_spec_page_shows_the_generated_table",
    "test_a_profile_names_its_overrides_once",
}
"""This file's tests that hold the table to the code and the page (no option's scenario)."""


def test_every_option_is_a_policy_field_with_meaningful_values() -> None:
    assert list(OPTIONS) == [f.name for f in fields(Policy)]
    for option in OPTIONS.values():
        expected = set(option.values) if option.values else {""}
        assert set(option.meaning) == expected, option.name
        for value in option.values:
            parsed = getattr(PAGEDKV.overridden({option.name: value}), option.name)
            assert value_text(parsed) == value
        for name, policy in PROFILES.items():
            shown = value_text(getattr(policy, option.name))
            assert not option.values or shown in option.values, (name, option.name, shown)


def definitions(path: Path) -> set[str]:
    """Every function and class a module defines, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def test_every_rule_cites_a_definition() -> None:
    """Each citation is ``path: name``: the file exists in the repository and defines ``name``."""
    for option in OPTIONS.values():
        assert option.rule, f"{option.name} cites no rule"
        for citation in option.rule:
            file, separator, name = citation.partition(": ")
            assert separator and name.isidentifier(), f"{option.name}: {citation!r}"
            path = REPOSITORY / file
            assert path.is_file(), f"{option.name}: no file {file}"
            assert file.startswith(("reference/", "specs/")), f"{option.name}: {file}"
            assert name in definitions(path), f"{option.name}: {file} defines no {name}"


def test_one_test_per_option() -> None:
    """``test_<option>`` for every option, and no other test but those holding the table."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    tests = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    assert tests >= HOLDING_TESTS
    assert tests - HOLDING_TESTS == {f"test_{name}" for name in OPTIONS}
    assert str(Path(__file__).resolve().relative_to(REPOSITORY)) == POLICY_TESTS


def test_the_spec_page_shows_the_generated_table() -> None:
    page = (REPOSITORY / "specs" / "policy.md").read_text(encoding="utf-8")
    assert markdown_table() in page, (
        "specs/policy.md's table differs from pagedkv.specs.policy.markdown_table(): make docs"
    )
    assert markdown_values() in page, (
        "specs/policy.md's values differ from pagedkv.specs.policy.markdown_values(): make docs"
    )
    assert policy_page.current(page) == page, "specs/policy.md is not current: make docs"
    index = (REPOSITORY / "specs" / "README.md").read_text(encoding="utf-8")
    assert "[policy.md](policy.md)" in index


def test_a_profile_names_its_overrides_once() -> None:
    chosen = profile("vllm-v0", {"atomic": "true", "unsupported": "hit_rate"})
    assert chosen.describe() == "vllm-v0 atomic=true unsupported=hit_rate"
    assert (chosen.policy.atomic, chosen.policy.unsupported) == (True, frozenset({"hit_rate"}))
    assert profile("nano-vllm").describe() == "nano-vllm"
