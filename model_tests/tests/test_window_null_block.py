"""A windowed manager whose null block is taken at the first append (policy ``null_block=
at_first_append``, ``specs/policy.md``) keeps exactly one block back for it until then: an append
that fits with that one block fits. The machines run the default policy, which takes the block at
creation, so a count that kept two back went unseen (a gap found by ``make mutate``,
``specs/mutation.md``)."""

from __future__ import annotations

from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.types import ManagerConfig


def test_the_pending_null_block_is_one_block() -> None:
    config = ManagerConfig(block_size=1, num_gpu_blocks=3, num_cpu_blocks=1, sliding_window=2)
    manager = ReferenceBlockSpaceManager(
        config, PAGEDKV.overridden({"null_block": "at_first_append"})
    )
    manager.allocate(1, [1], [5])
    assert manager.get_null_block() is None and manager.get_num_free_gpu_blocks() == 2
    assert manager.can_append_slots(1, 1)  # one block for the token, one for the null block
    manager.append_slots(1, [6])
    assert manager.get_null_block() is not None and manager.get_num_free_gpu_blocks() == 0
