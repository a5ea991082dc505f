"""Stand-ins for what vLLM v1's ``block_pool.py`` and ``kv_cache_utils.py`` import from the rest
of vLLM. The pool never reaches most of them (KV-cache configuration, multimodal features,
metrics are None): those are named placeholders that refuse to be used, so a
path that does reach one fails loudly instead of running on a fake."""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any, NoReturn

from pagedkv.model_tests.peers.sources import module
from pagedkv.model_tests.peers.standins.vllm_v1_events import kv_events_module


def _placeholder(name: str) -> type:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"pagedkv's stand-in for vLLM's {name} is not meant to be used")

    return type(name, (), {"__init__": refuse, "__doc__": f"pagedkv placeholder for {name}"})


def _unused(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"pagedkv's stand-in for vLLM's {name} is not meant to be used")

    refuse.__name__ = name
    return refuse


logging.getLogger("pagedkv.peers").addHandler(logging.NullHandler())
"""The engine's warnings (a refused prefix-cache reset, ...) are answers the oracle reads, not
news for the terminal."""


def init_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"pagedkv.peers.{name}")


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def _placeholders(*names: str) -> dict[str, object]:
    return {name: _placeholder(name) for name in names}


MODULES: dict[str, ModuleType] = {
    "vllm.envs": module("vllm.envs", {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": False}),
    "vllm.config": module("vllm.config", _placeholders("VllmConfig")),
    "vllm.logger": module("vllm.logger", {"init_logger": init_logger}),
    "vllm.multimodal.utils": module(
        "vllm.multimodal.utils",
        {"get_mm_features_in_window": _unused("get_mm_features_in_window")},
    ),
    "vllm.utils.hashing": module(
        "vllm.utils.hashing", {"xxhash": _unused("xxhash"), "xxhash_cbor": _unused("xxhash_cbor")}
    ),
    "vllm.utils.math_utils": module("vllm.utils.math_utils", {"cdiv": cdiv}),
    "vllm.v1.kv_cache_interface": module(
        "vllm.v1.kv_cache_interface",
        {
            **_placeholders(
                "KVCacheConfig",
                "KVCacheGroupSpec",
                "KVCacheSpec",
                "MambaSpec",
                "UniformTypeKVCacheSpecs",
            ),
            "iter_layer_specs": _unused("iter_layer_specs"),
        },
    ),
    "vllm.v1.kv_cache_spec_registry": module(
        "vllm.v1.kv_cache_spec_registry", _placeholders("KVCacheSpecRegistry")
    ),
    "vllm.v1.request": module("vllm.v1.request", _placeholders("Request")),
    "vllm.v1.utils": module("vllm.v1.utils", {"tensor_data": _unused("tensor_data")}),
    "vllm.distributed.kv_events": kv_events_module(),
    "vllm.v1.core.kv_cache_metrics": module(
        "vllm.v1.core.kv_cache_metrics", _placeholders("KVCacheMetricsCollector")
    ),
}
