"""Concrete manager cases on both managers, for what the machines reach only rarely."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.tokens import plain_tokens
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import DuplicateSequenceError, InvalidArgumentError, SequenceStateError
from pagedkv.specs.interface import BlockSpaceManager, BlockSpaceManagerFactory
from pagedkv.specs.types import MAX_TOKEN, AllocStatus, ManagerConfig
from pagedkv.specs.validation import check_tokens

FACTORIES: list[BlockSpaceManagerFactory] = [
    ReferenceBlockSpaceManager,
    OptimizedBlockSpaceManager,
]


@pytest.fixture(params=FACTORIES, ids=lambda f: f.__name__)
def manager(request: pytest.FixtureRequest) -> BlockSpaceManager:
    factory: BlockSpaceManagerFactory = request.param
    return factory(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4, watermark=0.0))


def test_a_group_swapped_out_cannot_be_appended_to(manager: BlockSpaceManager) -> None:
    """Its blocks are CPU blocks: an append would write KV where the model cannot read it.
    (The ``ci`` profile reaches this in under 1 % of examples.)"""
    manager.allocate(1, [10, 11], [5, 6, 7])
    assert manager.can_swap_out(1) is AllocStatus.OK
    manager.swap_out(1)
    before = manager.view().comparable()
    with pytest.raises(SequenceStateError, match="group 1: its blocks are on the cpu"):
        manager.append_slots(10, [8])
    with pytest.raises(SequenceStateError, match="group 1"):
        manager.append_slots(11, [], 1)
    with pytest.raises(SequenceStateError, match="group 1"):
        manager.can_append_slots(1)
    assert manager.view().comparable() == before
    manager.swap_in(1)
    assert len(manager.append_slots(10, [8])) == 1  # back on the GPU: the shared block is copied


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_cached_tokens_stop_at_a_released_block_on_either_device(
    factory: BlockSpaceManagerFactory,
) -> None:
    """With a sliding window the leading entries name the null block (a GPU block, which a
    swapped-out table's CPU pool does not hold): the run of computed blocks ends there, before
    the computed blocks after it, on the GPU and after a swap out alike."""
    config = ManagerConfig(
        block_size=1,
        num_gpu_blocks=6,
        num_cpu_blocks=6,
        watermark=0.0,
        sliding_window=1,
        enable_caching=True,
    )
    manager = factory(config)
    manager.allocate(1, [10], [1, 2])
    manager.mark_blocks_as_computed(1)
    assert manager.get_num_cached_tokens(10) == 2
    manager.append_slots(10, [3])
    manager.mark_blocks_as_computed(1)
    null_block = manager.view().null_block
    assert manager.get_block_table(10)[0] == null_block
    assert manager.get_num_cached_tokens(10) == 0
    manager.swap_out(1)
    assert manager.get_block_table(10)[0] == null_block
    assert manager.get_num_cached_tokens(10) == 0


@pytest.mark.parametrize(
    ("group_id", "seq_ids", "says"),
    [
        (1, [20], "group 1 already exists"),
        (2, [10], "sequence 10 already exists"),
        (2, [20, 21, 20], "sequence 20 already exists"),
    ],
)
def test_allocate_refuses_a_group_or_sequence_id_in_use(
    manager: BlockSpaceManager, group_id: int, seq_ids: list[int], says: str
) -> None:
    """A live group's id, a live sequence's id, or one id twice in the call."""
    manager.allocate(1, [10], [5, 6, 7])
    before = manager.view().comparable()
    with pytest.raises(DuplicateSequenceError, match=says):
        manager.allocate(group_id, seq_ids, [1])
    assert manager.view().comparable() == before


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_common_computed_blocks_of_no_sequence_and_of_one_swapped_back(
    factory: BlockSpaceManagerFactory,
) -> None:
    """No sequence shares nothing; a group that went to the CPU and back has new ids, and its
    answer names them, not the ones it had before (the optimized manager keeps answers)."""
    config = ManagerConfig(
        block_size=2, num_gpu_blocks=8, num_cpu_blocks=8, watermark=0.0, enable_caching=True
    )
    manager = factory(config)
    assert manager.get_common_computed_block_ids([]) == []
    manager.allocate(1, [10, 11], [1, 2, 3, 4, 5])
    manager.mark_blocks_as_computed(1)
    before = manager.get_common_computed_block_ids([10, 11])
    assert before == manager.get_block_table(10)[:2]
    assert manager.get_common_computed_block_ids([]) == []
    manager.swap_out(1)
    manager.allocate(2, [20], [9, 9, 9, 9, 9, 9])  # takes the GPU blocks group 1 gave up
    manager.free(20)
    manager.swap_in(1)
    after = manager.get_common_computed_block_ids([10, 11])
    assert after == manager.get_block_table(11)[:2] == manager.get_common_computed_block_ids([10])


def test_the_optimized_managers_common_computed_blocks_cannot_be_changed() -> None:
    """It keeps one answer per table until the answer changes: a caller that changes the list it
    was handed must not change the answer of the next caller."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=8, enable_caching=True)
    manager = OptimizedBlockSpaceManager(config)
    manager.allocate(1, [10], [1, 2, 3, 4, 5])
    manager.allocate(2, [20, 21], [1, 2, 3, 4, 5])
    manager.mark_blocks_as_computed(1)
    manager.mark_blocks_as_computed(2)
    for seq_ids in ([10], [20, 21]):
        expected = manager.get_block_table(seq_ids[0])[:2]
        changes: list[Callable[[list[int]], object]] = [
            lambda found: found.append(7),
            lambda found: found.extend([7]),
            lambda found: found.pop(),
            lambda found: found.clear(),
            lambda found: found.__setitem__(0, 7),
            lambda found: found.__delitem__(0),
            lambda found: found.sort(reverse=True),
        ]
        for change in changes:
            found = manager.get_common_computed_block_ids(seq_ids)
            assert type(found) is list and found == expected
            change(found)
            assert manager.get_common_computed_block_ids(seq_ids) == expected, seq_ids


class _Level(enum.IntEnum):
    LOW = 3


TOKEN_LIKE = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, 1, MAX_TOKEN, MAX_TOKEN + 1, -1, 2**64 - 1, 2**64, -(2**63) - 1]),
    st.sampled_from([True, False, _Level.LOW, 1.0, None, "1"]),
)


@given(st.lists(TOKEN_LIKE, max_size=40) | st.tuples(TOKEN_LIKE, TOKEN_LIKE))
def test_the_optimized_prompt_check_passes_only_what_check_tokens_passes(tokens: Any) -> None:
    """``optimized/tokens.py`` checks a prompt in C loops: what it passes ``check_tokens``
    passes, and a prompt of plain ints that ``check_tokens`` passes, it passes too."""
    try:
        accepted = check_tokens(tokens, allow_empty=True) == list(tokens)
    except InvalidArgumentError:
        accepted = False
    if plain_tokens(tokens):
        assert accepted
    elif accepted:
        assert not all(type(token) is int for token in tokens)


def test_a_prompt_the_fast_check_refuses_gets_the_full_checks_answer() -> None:
    """On both managers: an int subclass is a token, a bool, a value past MAX_TOKEN or an empty
    prompt is not, with the same error."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=8)
    for factory in FACTORIES:
        manager = factory(config)
        assert manager.can_allocate((_Level.LOW, 5, 6)) is AllocStatus.OK
        for bad in ((1, True), [MAX_TOKEN + 1], (), [-1, 2]):
            with pytest.raises(InvalidArgumentError):
                manager.can_allocate(bad)
        assert manager.can_allocate((MAX_TOKEN, 0)) is AllocStatus.OK
