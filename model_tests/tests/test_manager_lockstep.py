"""The block space manager machine, run against the optimized manager (exact mode), with the
KV data moved by the torch kernels and, in some runs, a defragmenter under the GPU ids (the
reference's and the optimized one, in lockstep)."""

from __future__ import annotations

from pagedkv.model_tests.machines.manager_machine import manager_lockstep_case
from pagedkv.model_tests.machines.torch_kv import TorchKV
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager

TestOptimizedManager = manager_lockstep_case(
    OptimizedBlockSpaceManager, target_kv=TorchKV, defragmenter=True
).TestCase
