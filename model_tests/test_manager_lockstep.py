"""The block space manager machine, run against the optimized manager (exact mode), with the
KV data moved by the torch kernels."""

from __future__ import annotations

from model_tests.manager_machine import manager_lockstep_case
from optimized.block_manager import OptimizedBlockSpaceManager

TestOptimizedManager = manager_lockstep_case(OptimizedBlockSpaceManager).TestCase
