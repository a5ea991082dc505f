"""What the optimized manager leaves for the garbage collector to walk, and ``BlockPrefixes``, which
keeps each hashed block's parent hash and extra key out of its sight.

A full collection visits every tracked object and every reference it holds; on a pool of a
million blocks the pool's per-block lists and a few objects per sequence made its pauses grow
faster with the pool than the calls between them (``pagedkv bench``'s growth section). And every
tracked object allocated counts towards the next young collection, even one the collector stops
tracking as soon as it sees it (a tuple of ints): at a million blocks, a tuple of tokens per
filled block set the pace of the young collections, six times the control's. These tests pin the
footprint down: a single-sequence group keeps two tracked objects (its table and its group) and
allocates a few more, however many blocks it fills, and the pool's tokens, computed marks, parent
hashes and extra keys are in untracked storage, whatever the pool's size.
"""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.block_prefixes import LIMIT, BlockPrefixes
from pagedkv.specs.content_hash import ROOT, Prefix
from pagedkv.specs.types import ExtraKey, ManagerConfig, PoolConfig

TRACKED_PER_GROUP = 2
"""A single-sequence group's tracked objects: its ``BlockTable`` and its ``SequenceGroup`` (its
tokens are a ``bytearray``, its sequence ids and its blocks tuples of ints)."""

ALLOCATED_PER_GROUP = 5
"""What a single-sequence group leaves allocated between two collections, however many blocks it
fills: its two tracked objects and three tuples of ints (its sequence ids, its blocks, its
computed prefix), which the collector stops tracking once it has seen them."""


def _tracked() -> int:
    gc.collect()  # untracks the tuples and dicts that hold only untracked objects
    return len(gc.get_objects())


def _allocated(run: Callable[[], None]) -> int:
    """The tracked objects ``run`` leaves alive with the collector off: each one counts towards
    the next young collection, whether or not that collection goes on tracking it."""
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        run()
        return len(gc.get_objects()) - before
    finally:
        gc.enable()


def test_a_single_sequence_group_leaves_two_tracked_objects() -> None:
    config = ManagerConfig(block_size=4, num_gpu_blocks=4096, num_cpu_blocks=64)
    manager = OptimizedBlockSpaceManager(config)
    groups = 200
    for group in range(groups):  # each group decodes across a block boundary: tables grow
        manager.allocate(group, [group], [group * 7 + i for i in range(10)])
        for token in range(4):
            manager.append_slots(group, [token])
        manager.mark_blocks_as_computed(group)
    before = _tracked()
    for group in range(groups, 2 * groups):
        manager.allocate(group, [group], [group * 7 + i for i in range(10)])
        for token in range(4):
            manager.append_slots(group, [token])
        manager.mark_blocks_as_computed(group)
        manager.get_common_computed_block_ids([group])
    added = _tracked() - before
    assert added <= TRACKED_PER_GROUP * groups + 20, f"{added / groups:.2f} tracked per group"


def test_filling_blocks_allocates_no_tracked_object_per_block() -> None:
    """Each group fills twelve blocks (ten in its prompt, two more while decoding): what is left
    allocated stays a few objects per group, none per block (a block's tokens are packed
    ``bytes``, no object to the collector)."""
    config = ManagerConfig(block_size=4, num_gpu_blocks=8192, num_cpu_blocks=64)
    manager = OptimizedBlockSpaceManager(config)
    groups = 200
    prompts = [tuple(group * 100 + i for i in range(40)) for group in range(groups)]

    def admit_and_decode() -> None:
        for group, prompt in enumerate(prompts):
            manager.allocate(group, [group], prompt)
            for token in range(8):
                manager.append_slots(group, [token])
            manager.mark_blocks_as_computed(group)
            manager.get_common_computed_block_ids([group])

    added = _allocated(admit_and_decode)
    assert manager.get_num_free_gpu_blocks() == 8192 - 12 * groups
    assert added <= ALLOCATED_PER_GROUP * groups + 80, f"{added / groups:.2f} allocated per group"


def test_the_pool_keeps_per_block_marks_and_prefixes_untracked() -> None:
    pool = OptimizedBlockPool(PoolConfig(num_blocks=64, block_size=2))
    prefix = Prefix(ROOT, 0, ExtraKey())
    block = pool.allocate_immutable(prefix, (1, 2))
    pool.mark_computed([block])
    assert not gc.is_tracked(pool._computed)
    storage = pool._prefixes_of
    walked = [  # an array is one object to the collector, a list an object per entry
        column
        for column in gc.get_referents(storage)
        if isinstance(column, list | tuple | dict) and len(column) >= 64
    ]
    assert walked == [], "a per-block column the collector walks"
    assert pool.prefix_of(block) == (ROOT, 0, ExtraKey())
    assert pool.is_computed(block) is True


def test_block_prefixes_round_trip_and_reuse_key_slots() -> None:
    prefixes = BlockPrefixes(4)
    lora, salted = ExtraKey(lora_id=1), ExtraKey(cache_salt="s")
    prefixes.set(0, b"a" * 32, lora)
    prefixes.set(1, b"b" * 32, salted)
    prefixes.set(2, b"c" * 32, lora)
    assert prefixes.get(1) == (b"b" * 32, salted) and prefixes.get(3) is None
    prefixes.clear(1)
    prefixes.clear(3)  # no prefix: nothing to clear
    assert prefixes.columns() == ([b"a" * 32, None, b"c" * 32, None], [lora, None, lora, None])
    prefixes.clear(0)
    prefixes.clear(2)  # the last block naming lora
    prefixes._free_unnamed()  # the pass a full table makes: no key is kept alive
    assert all(key is None for key in prefixes._table)
    prefixes.set(3, b"d" * 32, salted)
    assert len(prefixes._table) == 2 and prefixes.get(3) == (b"d" * 32, salted)
    prefixes.set(3, b"e" * 32, lora)  # overwritten without a clear: salted's slot is freed
    prefixes._free_unnamed()
    assert prefixes.get(3) == (b"e" * 32, lora) and salted not in prefixes._table


def test_the_key_table_stays_bounded_as_keys_come_and_go() -> None:
    """Every request may bring a key object of its own: the entries no block names are freed
    when the table fills up (and their slots reused), so the table stays small, and every block
    reads back its own key."""
    prefixes = BlockPrefixes(8)
    keys = [ExtraKey(lora_id=i) for i in range(2000)]
    for number, key in enumerate(keys):
        prefixes.set(number % 8, bytes([number % 256]) * 32, key)
        if number % 3 == 0:
            prefixes.clear((number + 5) % 8)
    assert len(prefixes._table) <= 2 * LIMIT
    for index in range(8):
        found = prefixes.get(index)
        last = max(n for n in range(2000) if n % 8 == index)
        if found is not None:
            assert found == (bytes([last % 256]) * 32, keys[last])


def test_a_copied_block_prefixes_finds_its_own_keys() -> None:
    """A copy's keys are new objects: the identities it looks them up by are rebuilt, so
    freeing the entry of a key no block names frees its slot (a stale identity would raise or
    confuse two keys)."""
    prefixes = BlockPrefixes(3)
    prefixes.set(0, b"a" * 32, ExtraKey(lora_id=1))
    prefixes.set(1, b"b" * 32, ExtraKey(lora_id=2))
    for copied in (copy.deepcopy(prefixes), pickle.loads(pickle.dumps(prefixes))):
        key = copied.get(1)
        assert key is not None and key[1] == ExtraKey(lora_id=2)
        copied.set(2, b"c" * 32, key[1])  # the copy's own key object: its slot, not a new one
        assert len(copied._table) == 2
        for index in range(3):
            copied.clear(index)
        copied._free_unnamed()
        assert copied._table == [None, None] and sorted(copied._free_slots) == [0, 1]


def test_set_all_and_overwrites_leave_unnamed_keys_to_the_pass() -> None:
    """``set_all`` (a chain's blocks, evicted ones among them) overwrites each block's slot: a
    key that no block names any more is freed by the next pass, one still named is kept."""
    prefixes = BlockPrefixes(5)
    lora, salted = ExtraKey(lora_id=1), ExtraKey(cache_salt="s")
    prefixes.set(0, b"a" * 32, lora)
    prefixes.set(1, b"b" * 32, salted)
    prefixes.set_all([0, 1, 2], [b"c" * 32, b"d" * 32, b"e" * 32], lora)
    assert prefixes.columns() == (
        [b"c" * 32, b"d" * 32, b"e" * 32, None, None],
        [lora, lora, lora, None, None],
    )
    prefixes._free_unnamed()
    assert salted not in prefixes._table  # its last block went to lora
    for index in (0, 1):
        prefixes.clear(index)
    prefixes._free_unnamed()
    assert lora in prefixes._table  # block 2 still names it
    prefixes.clear(2)
    prefixes._free_unnamed()
    assert all(key is None for key in prefixes._table)
