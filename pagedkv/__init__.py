"""pagedkv: paged KV-cache block management, specified, implemented twice, and checked.

The public face. Everything here is re-exported from the four layers (``specs/``, ``reference/``,
``optimized/``, ``model_tests/``); the command line is ``pagedkv.cli``. The KV store and its torch
kernels are in ``pagedkv.kv`` (the one part that needs torch).

    import pagedkv

    manager = pagedkv.OptimizedBlockSpaceManager(
        pagedkv.ManagerConfig(block_size=16, num_gpu_blocks=1024, num_cpu_blocks=256,
                              enable_caching=True))
    result = pagedkv.check("mypkg.adapter:make_manager", steps=2000)   # result.passed

``BlockSpaceManager`` and ``BlockPool`` are the protocols (``specs/interface.py``) an engine's
adapter implements for the oracle.
"""

from __future__ import annotations

from model_tests.oracle.api import check, record, replay
from model_tests.oracle.check import CheckResult
from model_tests.oracle.trace import Trace, Verdict
from optimized.block_manager import OptimizedBlockSpaceManager
from optimized.block_pool import OptimizedBlockPool
from optimized.defragmenter import OptimizedDefragmenter
from reference.manager_adapter import ReferenceBlockSpaceManager
from reference.pool_adapter import ReferenceBlockPool
from specs.content_hash import ROOT, Prefix, block_hash
from specs.errors import (
    ConfigurationError,
    DoubleFreeError,
    DuplicateSequenceError,
    ForeignBlockError,
    InvalidArgumentError,
    OutOfBlocksError,
    PagedKVError,
    SequenceStateError,
    TooManyTokensError,
    UnallocatedBlockError,
    UnknownSequenceError,
    UnsupportedError,
)
from specs.interface import (
    BlockPool,
    BlockPoolFactory,
    BlockSpaceManager,
    BlockSpaceManagerFactory,
)
from specs.types import AllocStatus, DefragConfig, Device, ExtraKey, ManagerConfig, PoolConfig

__version__ = "0.2.0"

__all__ = [
    "ROOT",
    "AllocStatus",
    "BlockPool",
    "BlockPoolFactory",
    "BlockSpaceManager",
    "BlockSpaceManagerFactory",
    "CheckResult",
    "ConfigurationError",
    "DefragConfig",
    "Device",
    "DoubleFreeError",
    "DuplicateSequenceError",
    "ExtraKey",
    "ForeignBlockError",
    "InvalidArgumentError",
    "ManagerConfig",
    "OptimizedBlockPool",
    "OptimizedBlockSpaceManager",
    "OptimizedDefragmenter",
    "OutOfBlocksError",
    "PagedKVError",
    "PoolConfig",
    "Prefix",
    "ReferenceBlockPool",
    "ReferenceBlockSpaceManager",
    "SequenceStateError",
    "TooManyTokensError",
    "Trace",
    "UnallocatedBlockError",
    "UnknownSequenceError",
    "UnsupportedError",
    "Verdict",
    "block_hash",
    "check",
    "record",
    "replay",
]
