"""pagedkv: paged KV-cache block management, specified, implemented twice, and checked.

The public face. Every name here is re-exported from a layer (``pagedkv.specs``,
``pagedkv.reference``, ``pagedkv.optimized``, ``pagedkv.model_tests``); the command line is
``pagedkv.cli``. The KV store and its torch kernels are in ``pagedkv.kv`` (the one part that needs
torch).

    import pagedkv

    manager = pagedkv.OptimizedBlockSpaceManager(
        pagedkv.ManagerConfig(block_size=16, num_gpu_blocks=1024, num_cpu_blocks=256,
                              enable_caching=True))
    result = pagedkv.check("mypkg.adapter:make_manager", steps=2000)   # result.passed

``BlockSpaceManager`` and ``BlockPool`` are the protocols (``specs/interface.py``) an engine's
adapter implements for the oracle.

``import pagedkv`` itself imports nothing of the layers: each name loads its module when it is
first used (PEP 562), so that a scheduler that wants the optimized manager never pays for the
oracle and Hypothesis, and the console script can install its signal handlers before anything
slow is imported. There is no ``__dir__`` listing the names not yet loaded: tools that walk
every module's members (``inspect.getmembers``, CrossHair's type search) would load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker and a reader see; at run time, __getattr__ below
    from pagedkv.model_tests.oracle.api import check, record, replay
    from pagedkv.model_tests.oracle.check import CheckResult
    from pagedkv.model_tests.oracle.trace import Trace, Verdict
    from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
    from pagedkv.optimized.block_pool import OptimizedBlockPool
    from pagedkv.optimized.defragmenter import OptimizedDefragmenter
    from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
    from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
    from pagedkv.reference.pool_adapter import ReferenceBlockPool
    from pagedkv.specs.content_hash import ROOT, Prefix, block_hash
    from pagedkv.specs.errors import (
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
    from pagedkv.specs.interface import (
        BlockPool,
        BlockPoolFactory,
        BlockSpaceManager,
        BlockSpaceManagerFactory,
        Defragmenter,
    )
    from pagedkv.specs.types import (
        AllocStatus,
        DefragConfig,
        Device,
        ExtraKey,
        ManagerConfig,
        PoolConfig,
    )

__version__ = "0.2.0"

_HOMES: dict[str, tuple[str, ...]] = {
    "pagedkv.model_tests.oracle.api": ("check", "record", "replay"),
    "pagedkv.model_tests.oracle.check": ("CheckResult",),
    "pagedkv.model_tests.oracle.trace": ("Trace", "Verdict"),
    "pagedkv.optimized.block_manager": ("OptimizedBlockSpaceManager",),
    "pagedkv.optimized.block_pool": ("OptimizedBlockPool",),
    "pagedkv.optimized.defragmenter": ("OptimizedDefragmenter",),
    "pagedkv.reference.defrag_adapter": ("ReferenceDefragmenter",),
    "pagedkv.reference.manager_adapter": ("ReferenceBlockSpaceManager",),
    "pagedkv.reference.pool_adapter": ("ReferenceBlockPool",),
    "pagedkv.specs.content_hash": ("ROOT", "Prefix", "block_hash"),
    "pagedkv.specs.errors": (
        "ConfigurationError",
        "DoubleFreeError",
        "DuplicateSequenceError",
        "ForeignBlockError",
        "InvalidArgumentError",
        "OutOfBlocksError",
        "PagedKVError",
        "SequenceStateError",
        "TooManyTokensError",
        "UnallocatedBlockError",
        "UnknownSequenceError",
        "UnsupportedError",
    ),
    "pagedkv.specs.interface": (
        "BlockPool",
        "BlockPoolFactory",
        "BlockSpaceManager",
        "BlockSpaceManagerFactory",
        "Defragmenter",
    ),
    "pagedkv.specs.types": (
        "AllocStatus",
        "DefragConfig",
        "Device",
        "ExtraKey",
        "ManagerConfig",
        "PoolConfig",
    ),
}
"""Where each public name lives: the module ``__getattr__`` imports on its first use."""

_HOME_OF: dict[str, str] = {name: module for module, names in _HOMES.items() for name in names}

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
    "Defragmenter",
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
    "ReferenceDefragmenter",
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


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pagedkv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next use is a plain attribute
    return value
