"""The optimized manager's state, as its view shows it, is the reference's after every step of
a scenario the faster killers did not cover: a forked group accessed at two times (the later
access wins, though its time is the smaller), swapped out and in (each distinct block moves
once, with its pending access; pairs returned; the computed blocks answered by their new ids),
and a swap that only just fits. Found by ``make
mutate``'s first pass (``specs/mutation.md``); the lockstep machines find these too, minutes
later."""

from __future__ import annotations

from collections.abc import Callable

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import OutOfBlocksError
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.types import ManagerConfig


def test_accesses_and_swaps_leave_the_same_state() -> None:
    config = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=5, enable_caching=True)
    steps: list[Callable[[BlockSpaceManager], object]] = [
        lambda m: m.allocate(1, [1], [1, 2, 3, 4, 5]),
        lambda m: m.mark_blocks_as_computed(1),
        lambda m: m.get_common_computed_block_ids([1]),
        lambda m: m.fork(1, 2),
        lambda m: m.access_all_blocks_in_seq(1, 5.0),
        lambda m: m.access_all_blocks_in_seq(2, 3.0),
        lambda m: m.swap_out(1),
        lambda m: m.access_all_blocks_in_seq(2, 7.0),
        lambda m: m.swap_in(1),
        lambda m: m.get_common_computed_block_ids([1]),
        lambda m: m.append_slots(2, [4, 5]),
        lambda m: m.access_all_blocks_in_seq(1, 9.0),
        lambda m: m.swap_out(1),
    ]
    _agree(config, steps)


def test_a_swap_renames_the_computed_blocks() -> None:
    """The computed block 0 is evicted while its group is on the CPU (another group holds it
    now): swapped in, the group's computed prefix names the block it landed in."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=5, num_cpu_blocks=4, enable_caching=True)
    steps: list[Callable[[BlockSpaceManager], object]] = [
        lambda m: m.allocate(1, [1], [1, 2, 3]),
        lambda m: m.mark_blocks_as_computed(1),
        lambda m: m.get_common_computed_block_ids([1]),
        lambda m: m.swap_out(1),
        lambda m: m.allocate(3, [3], [7, 7, 7, 7, 7, 7, 7, 7]),
        lambda m: m.allocate(4, [4], [9, 9]),
        lambda m: m.free(3),
        lambda m: m.swap_in(1),
        lambda m: m.mark_blocks_as_computed(1),
        lambda m: m.get_common_computed_block_ids([1]),
    ]
    answers = _agree(config, steps)
    assert answers[2] == [0] and answers[-1] not in ([], [0])


def _agree(
    config: ManagerConfig, steps: list[Callable[[BlockSpaceManager], object]]
) -> list[object]:
    """Runs the steps on both managers: the same answer and the same view after each."""
    reference, optimized = ReferenceBlockSpaceManager(config), OptimizedBlockSpaceManager(config)
    answers = []
    for number, step in enumerate(steps):
        answer = step(reference)
        assert answer == step(optimized), number
        assert reference.view() == optimized.view(), number
        answers.append(answer)
    return answers


def test_a_swap_that_just_fits_runs_and_one_that_does_not_changes_nothing() -> None:
    """Two blocks into three CPU blocks; then two more into the last one: refused whole,
    before the first block moves."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=3)
    for make in (ReferenceBlockSpaceManager, OptimizedBlockSpaceManager):
        manager = make(config)
        manager.allocate(1, [1], [1, 2, 3])
        assert manager.swap_out(1) == [(0, 4), (1, 5)]
        manager.allocate(2, [2], [1, 2, 3])
        before = manager.view()
        try:
            manager.swap_out(2)
        except OutOfBlocksError:
            pass
        else:
            raise AssertionError(f"{make.__name__} swapped two blocks into one")
        assert manager.view() == before


def test_a_windowed_reset_keeps_its_null_block() -> None:
    """The null block's pin is no use of the pool: a reset succeeds with only it held, and
    fails (touching nothing) while a sequence holds a block."""
    config = ManagerConfig(2, 4, 2, enable_caching=True, sliding_window=2)
    steps: list[Callable[[BlockSpaceManager], object]] = [
        lambda m: m.reset_prefix_cache(),
        lambda m: m.allocate(1, [1], [1, 2]),  # one block besides the null block
        lambda m: m.mark_blocks_as_computed(1),
        lambda m: m.reset_prefix_cache(),
        lambda m: m.free(1),
        lambda m: m.reset_prefix_cache(),
        lambda m: m.allocate(2, [2], [1, 2, 3]),
        lambda m: m.get_block_table(2),
    ]
    answers = _agree(config, steps)
    assert [answers[i] for i in (0, 3, 5, 7)] == [True, False, True, [1, 2]]


def test_a_window_and_a_free_give_the_pending_access_to_their_blocks() -> None:
    """Accessed blocks that a window releases, or a free gives back, stay cached with the
    access they had: the evictor orders them by it."""
    config = ManagerConfig(2, 12, 2, enable_caching=True, sliding_window=3)
    steps: list[Callable[[BlockSpaceManager], object]] = [
        lambda m: m.allocate(1, [1], [1, 2, 3, 4, 5]),
        lambda m: m.fork(1, 2),
        lambda m: m.access_all_blocks_in_seq(1, 2.0),
        lambda m: m.append_slots(1, [6]),
        lambda m: m.append_slots(1, [7, 8]),
        lambda m: m.access_all_blocks_in_seq(1, 4.0),
        lambda m: m.access_all_blocks_in_seq(2, 3.0),
        lambda m: m.append_slots(1, [9, 9, 9]),
        lambda m: m.append_slots(2, [6, 6, 6, 6]),
        lambda m: m.access_all_blocks_in_seq(2, 5.0),
        lambda m: m.free(1),
        lambda m: m.free(2),
        lambda m: m.allocate(3, [3], [31, 32]),
        lambda m: m.access_all_blocks_in_seq(3, 6.0),
        lambda m: m.append_slots(3, [33, 34]),  # a block the access did not cover
        lambda m: m.append_slots(3, [35, 36, 37, 38]),
        lambda m: m.append_slots(3, [39]),  # the window passes both
    ]
    _agree(config, steps)


def test_appends_of_every_size_with_lookahead_and_shared_blocks() -> None:
    """Tokens that stay in the last block, fill it, or run past it, with lookahead slots, into a
    block a fork shares and one accessed before: the same tables, pairs and state."""
    config = ManagerConfig(4, 24, 2, enable_caching=True)
    steps: list[Callable[[BlockSpaceManager], object]] = [
        lambda m: m.allocate(1, [1], [1, 2, 3, 4, 5]),
        lambda m: m.access_all_blocks_in_seq(1, 1.0),
        lambda m: m.fork(1, 2),
        lambda m: m.append_slots(1, [6]),
        lambda m: m.append_slots(2, [6, 7, 8], 2),
        lambda m: m.access_all_blocks_in_seq(2, 2.0),
        lambda m: m.append_slots(2, [9]),
        lambda m: m.append_slots(1, [7, 8, 9, 10, 11], 5),
        lambda m: m.append_slots(1, []),
        lambda m: m.append_slots(2, [], 3),
        lambda m: m.append_slots(2, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        lambda m: [m.get_block_table(s) for s in (1, 2)],
    ]
    _agree(config, steps)
