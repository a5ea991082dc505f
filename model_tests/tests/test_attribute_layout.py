"""The optimized objects on the hot path keep their attributes in CPython's compact layout.

CPython 3.11 stores an instance's attributes as inline values over keys its class shares, and
specializes ``self.x`` for that layout, only while the class has fewer than
``SHARED_KEYS_MAX_SIZE`` (30) attribute names: the 30th makes every instance's attributes an
ordinary dict, and every read of ``self.x`` slower. The pool reads a dozen of its fields per
``append_slots``: its 30th field (``_block_bytes``, when a block's tokens became packed) cost the
manager about 40 ns a decode step, 2% end to end. No timing here: a field past the limit fails
this count instead."""

from __future__ import annotations

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.specs.request_types import RequestConfig
from pagedkv.specs.types import Device, ManagerConfig

SHARED_KEYS_MAX_SIZE = 30
"""CPython's ``SHARED_KEYS_MAX_SIZE`` (``Objects/dictobject.c``): an instance given this many
attribute names leaves the compact layout (measured on 3.11: 29 stay compact, 30 do not)."""


def _managers(caching: bool) -> tuple[OptimizedBlockSpaceManager, RequestManager]:
    config = ManagerConfig(
        block_size=4, num_gpu_blocks=16, num_cpu_blocks=8, enable_caching=caching
    )
    manager = OptimizedBlockSpaceManager(config)
    manager.allocate(0, [0], list(range(10)))  # a used manager: every lazy field set
    manager.append_slots(0, [10, 11, 12])
    manager.swap_out(0)
    manager.swap_in(0)
    request = RequestManager(RequestConfig(num_blocks=8, block_size=2, enable_caching=caching))
    return manager, request


@pytest.mark.parametrize("caching", [True, False])
def test_hot_objects_stay_within_the_shared_key_limit(caching: bool) -> None:
    manager, request = _managers(caching)
    gpu, cpu = manager.pools()
    standalone = OptimizedBlockPool(
        ManagerConfig(block_size=4, num_gpu_blocks=8, num_cpu_blocks=1).pool_config(Device.GPU)
    )
    for each in (manager, gpu, cpu, standalone, request):
        names = vars(each)
        assert len(names) < SHARED_KEYS_MAX_SIZE, (
            f"{type(each).__name__} has {len(names)} attributes: at {SHARED_KEYS_MAX_SIZE} "
            "CPython gives up its compact layout, and every self.x read gets slower"
        )
