"""Small scenarios for the reference manager's rarer branches (``reference/block_manager.py``):
kept computed lists and their common prefix, the null block still to be taken, a swap's count
table entry by table entry. The machines run pagedkv's own policy, or meet these states too
rarely, so a change to any of these lines went unseen (gaps found by ``make mutate``,
``specs/mutation.md``). Each expected value was worked out from ``specs/policy.md``'s rule."""

from __future__ import annotations

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import InvalidArgumentError, OutOfBlocksError
from pagedkv.specs.interface import BlockSpaceManagerFactory
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.types import AllocStatus, ExtraKey, ManagerConfig


def reference(policy: dict[str, str], **config: object) -> ReferenceBlockSpaceManager:
    """The reference under pagedkv's policy with ``policy``'s options overridden; one-token
    blocks, four of each, no watermark unless ``config`` says otherwise."""
    settings: dict[str, object] = {"block_size": 1, "num_gpu_blocks": 4, "num_cpu_blocks": 4}
    settings["watermark"] = 0.0
    settings.update(config)
    made = ManagerConfig(**settings)  # type: ignore[arg-type]
    return ReferenceBlockSpaceManager(made, PAGEDKV.overridden(policy))


KEPT = {"computed_list": "cached_per_sequence"}
ENTRIES = {"swap_worst_case": "table_entries"}


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_allocate_refuses_a_bad_extra_key(make: BlockSpaceManagerFactory) -> None:
    """The key is checked even where nothing hashes it (no caching), and before the free
    blocks are counted: a typed error, nothing taken."""
    manager = make(ManagerConfig(block_size=1, num_gpu_blocks=4, num_cpu_blocks=4))
    with pytest.raises(InvalidArgumentError):
        manager.allocate(1, [1], [1], ExtraKey(lora_id=-1))
    with pytest.raises(InvalidArgumentError):  # the argument first, the room after
        manager.allocate(1, [1], list(range(9)), ExtraKey(lora_id=-1))
    assert manager.get_num_free_gpu_blocks() == 4


# --- the window's null block, still to be taken -----------------------------------------------


def test_an_append_counts_the_null_block_still_to_be_taken() -> None:
    """Window 1, the null block taken at the first append, one free block: one token needs a
    block and the null block one more, so it does not fit, and the append is refused up front
    (though releasing the out-of-window block would have made room)."""
    manager = reference({"null_block": "at_first_append"}, num_gpu_blocks=2, sliding_window=1)
    manager.allocate(1, [1], [1])
    assert manager.get_num_free_gpu_blocks() == 1
    assert manager.can_append_slots(1, 1, 0) is False
    with pytest.raises(OutOfBlocksError):
        manager.append_slots(1, [2])
    assert manager.get_num_free_gpu_blocks() == 1


# --- kept computed lists (computed_list=cached_per_sequence) -----------------------------------


def test_a_kept_list_grows_with_the_table() -> None:
    """A list that reached its limit (all blocks but the last) is not stopped: after an append
    and a mark it grows to the new limit."""
    manager = reference(KEPT, enable_caching=True, num_gpu_blocks=8)
    manager.allocate(1, [1], [1, 2, 3])
    manager.mark_blocks_as_computed(1)
    assert manager.get_common_computed_block_ids([1]) == [0, 1]
    manager.append_slots(1, [4])
    manager.mark_blocks_as_computed(1)
    assert manager.get_common_computed_block_ids([1]) == [0, 1, 2]


def test_kept_lists_that_part_share_no_prefix_after() -> None:
    """``promotion=keep`` with ``duplicates=latest_replaces``: sequence 2 fills a second block
    with sequence 1's first content, which the index then names; sequence 3's prompt finds that
    block first and sequence 1's second block next. Sequences 1 and 3 part at their first block,
    so they share no prefix, though their second blocks are one."""
    policy = {**KEPT, "promotion": "keep", "duplicates": "latest_replaces"}
    manager = reference(policy, block_size=2, enable_caching=True, num_gpu_blocks=8)
    manager.allocate(1, [1], [5, 6, 7, 8, 9])
    manager.mark_blocks_as_computed(1)
    assert manager.get_common_computed_block_ids([1]) == [0, 1]
    manager.allocate(2, [2], [5])
    manager.append_slots(2, [6])
    manager.mark_blocks_as_computed(2)
    manager.allocate(3, [3], [5, 6, 7, 8, 1])
    assert manager.get_block_table(3) == [3, 1, 4]
    assert manager.get_common_computed_block_ids([3]) == [3, 1]
    assert manager.get_common_computed_block_ids([1, 3]) == []


def _two_groups(common_prefix: str) -> ReferenceBlockSpaceManager:
    """Sequence 1 computed over [0, 1]; sequence 2 shares block 0 and has [0]; sequence 3 has
    nothing computed before its last block."""
    manager = reference(
        {**KEPT, "common_prefix": common_prefix}, enable_caching=True, num_gpu_blocks=8
    )
    manager.allocate(1, [1], [1, 2, 3])
    manager.mark_blocks_as_computed(1)
    manager.allocate(2, [2], [1, 9])
    manager.mark_blocks_as_computed(2)
    manager.allocate(3, [3], [7])
    return manager


@pytest.mark.parametrize(
    ("common_prefix", "expected"),
    [
        ("every_run", ([0, 1], [0], [0], [0], [], [], [])),
        ("nonempty_runs", ([0, 1], [0], [0], [0], [0, 1], [0, 1], [0])),
    ],
)
def test_the_common_prefix_of_kept_lists(
    common_prefix: str, expected: tuple[list[int], ...]
) -> None:
    """Of several kept lists, the common prefix: lists of different lengths share their
    shorter one's run; an empty list empties it, or (``nonempty_runs``) is left out, in either
    order."""
    manager = _two_groups(common_prefix)
    asked = ([1], [2], [1, 2], [2, 1], [1, 3], [3, 1], [3, 2, 1])
    assert tuple(manager.get_common_computed_block_ids(ids) for ids in asked) == expected


# --- a swap counted table entry by table entry (swap_worst_case=table_entries) ------------------


@pytest.mark.parametrize(
    ("tokens", "cpu_blocks", "expected"),
    [
        ([1, 2], 1, AllocStatus.OK),  # one full block the CPU does not hold: one
        ([1, 2, 3, 4], 2, AllocStatus.OK),  # two full blocks, no chunk: two
        ([1], 1, AllocStatus.OK),  # one token: its chunk only
    ],
)
def test_a_swap_counts_each_entry_once(
    tokens: list[int], cpu_blocks: int, expected: AllocStatus
) -> None:
    manager = reference(ENTRIES, block_size=2, num_cpu_blocks=cpu_blocks)
    manager.allocate(1, [1], tokens)
    assert manager.can_swap_out(1) is expected


def test_a_swap_counts_an_empty_lookahead_block() -> None:
    """A full block and an empty lookahead block: two entries, which one CPU block never
    holds."""
    manager = reference(ENTRIES, block_size=2, num_cpu_blocks=1)
    manager.allocate(1, [1], [1, 2])
    manager.append_slots(1, [], 2)
    assert len(manager.get_block_table(1)) == 2
    assert manager.can_swap_out(1) is AllocStatus.NEVER


@pytest.mark.parametrize(
    ("cross_tables", "expected"),
    [("moved", AllocStatus.NEVER), ("kept_on_gpu", AllocStatus.OK)],
)
def test_a_swap_counts_the_cross_block_only_when_it_moves(
    cross_tables: str, expected: AllocStatus
) -> None:
    manager = reference(
        {**ENTRIES, "swap_cross_tables": cross_tables}, block_size=2, num_cpu_blocks=1
    )
    manager.allocate(1, [1], [1, 2], ExtraKey(), [7, 8])
    assert manager.can_swap_out(1) is expected


def test_a_block_the_cpu_holds_costs_nothing_unless_it_is_only_cached() -> None:
    """Group 1's block swapped out holds [1, 2] on the CPU; group 2's same block swapping out
    needs nothing more. Swapped back in, group 1's CPU blocks stay only cached: counted again
    (with its new partial block, three entries for two CPU blocks: never)."""
    manager = reference(ENTRIES, block_size=2, enable_caching=True, num_cpu_blocks=1)
    manager.allocate(1, [1], [1, 2])
    manager.swap_out(1)
    manager.allocate(2, [2], [1, 2])
    assert manager.get_num_free_cpu_blocks() == 0
    assert manager.can_swap_out(2) is AllocStatus.OK

    back = reference(ENTRIES, block_size=2, enable_caching=True, num_cpu_blocks=2)
    back.allocate(1, [1], [1, 2, 3, 4])
    back.swap_out(1)
    back.swap_in(1)
    back.append_slots(1, [5])
    assert back.get_num_free_cpu_blocks() == 2
    assert back.can_swap_out(1) is AllocStatus.NEVER


def test_a_swap_in_keeps_exactly_the_watermark_free() -> None:
    """``swap_never=without_watermark``: two blocks back with three free and a watermark of one
    leave exactly the watermark: OK."""
    policy = {"swap_never": "without_watermark"}
    manager = reference(policy, num_gpu_blocks=10, num_cpu_blocks=10, watermark=0.1)
    manager.allocate(1, [1], [1, 2])
    manager.swap_out(1)
    manager.allocate(2, [2], list(range(7)))
    assert manager.get_num_free_gpu_blocks() == 3
    assert manager.can_swap_in(1) is AllocStatus.OK


@pytest.mark.parametrize(
    ("cross_tables", "cpu_blocks", "pairs"),
    [("moved", 2, [(0, 4), (1, 5)]), ("kept_on_gpu", 1, [(0, 4)])],
)
def test_every_entry_moves_the_cross_block_only_when_it_moves(
    cross_tables: str, cpu_blocks: int, pairs: list[tuple[int, int]]
) -> None:
    """``swap_pairs=every_entry``: a pair per table entry, and one for the cross block when it
    goes with the group; one CPU block is room enough when it stays."""
    policy = {"swap_pairs": "every_entry", "swap_cross_tables": cross_tables}
    manager = reference(policy, block_size=2, num_cpu_blocks=cpu_blocks)
    manager.allocate(1, [1], [1, 2], ExtraKey(), [7, 8])
    assert manager.swap_out(1) == pairs


# --- slots first (append_order=slots_first) ----------------------------------------------------


def test_slots_first_takes_only_the_blocks_the_slots_need() -> None:
    """A token that fills the last block needs no new block; a token and two lookahead slots
    need two more one-token blocks, taken before the token is written."""
    manager = reference({"append_order": "slots_first"}, block_size=2)
    manager.allocate(1, [1], [1])
    manager.append_slots(1, [2])
    assert manager.get_block_table(1) == [0]
    single = reference({"append_order": "slots_first"})
    single.allocate(1, [1], [1])
    single.append_slots(1, [2], 2)
    assert single.get_block_table(1) == [0, 1, 2, 3]


def test_slots_first_takes_the_lookahead_blocks_before_the_copy() -> None:
    """Two sequences share a partial block; one appends a token and two lookahead slots: its
    new block is taken first, then the copy of the shared block (``test_policy.py``'s
    ``append_order`` scenario, with slots)."""
    manager = reference({"append_order": "slots_first"}, block_size=2)
    manager.allocate(1, [1, 2], [1])
    assert manager.append_slots(1, [2], 2) == [(0, 2)]
    assert manager.get_block_table(1) == [2, 1]


# --- pagedkv's own policy, both managers --------------------------------------------------------


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_a_swap_in_counts_the_lookahead_blocks(make: BlockSpaceManagerFactory) -> None:
    """A group of two one-token blocks swapped out, three or two of five GPU blocks left free:
    each lookahead slot needs one block more, and more than five never fit."""
    answers = []
    for held in (2, 3):
        manager = make(ManagerConfig(block_size=1, num_gpu_blocks=5, num_cpu_blocks=4))
        manager.allocate(1, [1], [1, 2])
        manager.swap_out(1)
        manager.allocate(2, [2], list(range(held)))
        answers.append([manager.can_swap_in(1, lookahead) for lookahead in range(5)])
    ok, later, never = AllocStatus.OK, AllocStatus.LATER, AllocStatus.NEVER
    assert answers == [[ok, ok, later, later, never], [ok, later, later, later, never]]


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_nothing_is_computed_before_a_mark(make: BlockSpaceManagerFactory) -> None:
    """Before the mark nothing is computed; the mark takes the full blocks, not the partial
    last one (eight cached tokens of eleven)."""
    manager = make(ManagerConfig(4, 8, 4, enable_caching=True))
    manager.allocate(1, [1], list(range(11)))
    assert manager.get_common_computed_block_ids([1]) == []
    assert manager.get_num_cached_tokens(1) == 0
    manager.mark_blocks_as_computed(1)
    assert manager.get_common_computed_block_ids([1]) == [0, 1]
    assert manager.get_num_cached_tokens(1) == 8


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_an_access_of_a_swapped_out_sequence_shows_on_the_cpu(
    make: BlockSpaceManagerFactory,
) -> None:
    """An access of a sequence swapped out goes to its CPU blocks, whose ids follow the GPU's:
    the view shows it there (the optimized manager keeps it pending on the table)."""
    manager = make(ManagerConfig(block_size=1, num_gpu_blocks=4, num_cpu_blocks=4))
    manager.allocate(1, [1], [1, 2])
    manager.swap_out(1)
    manager.access_all_blocks_in_seq(1, 7.0)
    blocks = manager.get_block_table(1)
    assert all(block >= 4 for block in blocks)
    view = manager.view()
    assert [view.cpu.blocks[block].last_accessed for block in blocks] == [7.0, 7.0]
