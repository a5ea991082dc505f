"""A group's cross-attention block counts wherever the group's blocks do
(``specs/block_manager.md``): a swap of an encoder-decoder group needs a destination block for it
too. The machines' groups
rarely meet a CPU pool too small by exactly that block, so an answer that left it out went unseen
(a gap found by ``make mutate``, ``specs/mutation.md``)."""

from __future__ import annotations

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.interface import BlockSpaceManagerFactory
from pagedkv.specs.types import AllocStatus, ExtraKey, ManagerConfig


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_a_swap_counts_the_cross_block(make: BlockSpaceManagerFactory) -> None:
    config = ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=1)
    manager = make(config)
    manager.allocate(1, [1], [1, 2], ExtraKey(), [7, 8])
    assert manager.can_swap_out(1) is AllocStatus.NEVER
    roomy = make(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2))
    roomy.allocate(1, [1], [1, 2], ExtraKey(), [7, 8])
    assert roomy.can_swap_out(1) is AllocStatus.OK


@pytest.mark.parametrize("make", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_the_last_sequence_freed_takes_the_cross_block_with_it(
    make: BlockSpaceManagerFactory,
) -> None:
    """Freed on the GPU, or after a swap out on the CPU: every block comes back."""
    manager = make(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4))
    manager.allocate(1, [1, 2], [1, 2], ExtraKey(), [7, 8])
    manager.free(1)
    assert manager.get_num_free_gpu_blocks() == 2
    manager.free(2)
    assert manager.get_num_free_gpu_blocks() == 4
    manager.allocate(3, [3], [1, 2], ExtraKey(), [7, 8])
    manager.swap_out(3)
    manager.free(3)
    assert (manager.get_num_free_gpu_blocks(), manager.get_num_free_cpu_blocks()) == (4, 4)
