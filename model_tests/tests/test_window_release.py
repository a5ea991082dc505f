"""A sliding window releases exactly the leading blocks no new token attends to
(``specs/block_manager.md``), on the optimized manager as on the reference: every window and
block size up to four, tokens appended one at a time and in chunks, the tables and free counts
compared after every append. The machines reach a window's boundaries rarely, so the optimized
count of released blocks could change unseen by the faster killers (found by ``make mutate``'s
first pass, ``specs/mutation.md``)."""

from __future__ import annotations

import itertools

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.types import ManagerConfig


@pytest.mark.parametrize(
    ("window", "block_size"), list(itertools.product(range(1, 5), range(1, 5)))
)
def test_the_optimized_window_releases_what_the_reference_does(
    window: int, block_size: int
) -> None:
    config = ManagerConfig(
        block_size=block_size, num_gpu_blocks=16, num_cpu_blocks=4, sliding_window=window
    )
    managers = (ReferenceBlockSpaceManager(config), OptimizedBlockSpaceManager(config))
    for manager in managers:
        manager.allocate(1, [1], [1])
        manager.allocate(2, [2], list(range(block_size * 2 + 1)))
    for chunk in (1, 1, 2, 1, 3, 1, 1, 4, 1, 2, 1, 1):
        seen = []
        for manager in managers:
            for seq_id in (1, 2):
                manager.append_slots(seq_id, list(range(chunk)))
            seen.append(
                (
                    manager.get_block_table(1),
                    manager.get_block_table(2),
                    manager.get_num_free_gpu_blocks(),
                )
            )
        assert seen[0] == seen[1], (chunk, seen)
