"""vLLM 0.6.3.post1's own block manager code, imported from the peers cache with the stand-ins.

One place for the modules both vLLM 0.6.3 adapters use (the manager level,
``vllm_v0_manager.py``, and the pool level, ``vllm_v0_pool.py``) and for the translation of its
errors into ``pagedkv.specs.errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.standins import vllm_v0
from pagedkv.specs.errors import OutOfBlocksError, UnsupportedError
from pagedkv.specs.types import AllocStatus, Device

WANTED = (
    "vllm.core.interfaces",
    "vllm.core.block_manager",
    "vllm.core.block.interfaces",
    "vllm.core.block.naive_block",
    "vllm.core.block.prefix_caching_block",
)


def modules() -> dict[str, ModuleType]:
    return sources.load(sources.VLLM_V0, vllm_v0.MODULES, WANTED)


DEVICES = {Device.GPU: vllm_v0.Device.GPU, Device.CPU: vllm_v0.Device.CPU}


def alloc_status(theirs: Any) -> AllocStatus:
    """vLLM's ``AllocStatus`` member as pagedkv's (same names)."""
    return AllocStatus[theirs.name]


Result = TypeVar("Result")


def call(action: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """Run one vLLM call, its typed failures as ``pagedkv.specs.errors``: out of blocks
    (``BlockAllocator.NoFreeBlocksError``) and a refused feature (``NotImplementedError``).
    Anything else (an ``AssertionError`` inside vLLM) goes through untouched: the oracle reports
    it as an untyped error."""
    no_free_blocks = modules()["vllm.core.block.interfaces"].BlockAllocator.NoFreeBlocksError
    try:
        return action(*args, **kwargs)
    except no_free_blocks as error:
        raise OutOfBlocksError(f"vLLM: no free blocks ({type(error).__name__})") from error
    except NotImplementedError as error:
        raise UnsupportedError(f"vLLM: {error}") from error
