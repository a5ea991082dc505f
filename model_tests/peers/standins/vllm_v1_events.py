"""Stand-ins for vLLM's KV events (``vllm.distributed.kv_events``): plain records of the fields
vLLM fills, shared by the pool level's and the request level's stand-ins."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pagedkv.model_tests.peers.sources import module


class KVCacheEvent:
    """A record of the keyword arguments vLLM builds an event with."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        """Only for the type checker: every field vLLM set is found before this is asked."""
        raise AttributeError(name)

    def __repr__(self) -> str:
        inner = ", ".join(f"{key}={value!r}" for key, value in self.__dict__.items())
        return f"{type(self).__name__}({inner})"


class BlockStored(KVCacheEvent):
    pass


class BlockRemoved(KVCacheEvent):
    pass


class AllBlocksCleared(KVCacheEvent):
    pass


def kv_events_module() -> ModuleType:
    return module(
        "vllm.distributed.kv_events",
        {
            "MEDIUM_GPU": "GPU",
            "MEDIUM_CPU": "CPU",
            "KVCacheEvent": KVCacheEvent,
            "BlockStored": BlockStored,
            "BlockRemoved": BlockRemoved,
            "AllBlocksCleared": AllBlocksCleared,
        },
    )
