"""The block pool machine, run against the optimized pool (exact mode)."""

from __future__ import annotations

from pagedkv.model_tests.machines.pool_machine import lockstep_case
from pagedkv.optimized.block_pool import OptimizedBlockPool

TestOptimizedPool = lockstep_case(OptimizedBlockPool).TestCase
