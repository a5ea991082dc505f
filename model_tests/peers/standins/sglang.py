"""Stand-ins for what SGLang 0.5.23's ``RadixCache`` and token allocator import from the rest of
SGLang.

SGLang's own files run: ``radix_cache.py``, ``base_prefix_cache.py``, ``cache_init_params.py``,
``evict_policy.py``, ``events.py`` (the KV event recorder) and the allocator's ``base.py`` and
``token.py``. What stands in here, and why:

- ``sglang.srt.mem_cache.utils``: SGLang's file imports MLA-buffer GPU kernels and a C++ hash
  extension built at import (``cpp_utils/native_hash``). The cache reads five names of it: the
  eviction-strategy factory (here over SGLang's own ``evict_policy`` classes), the hash-list
  split (the same slicing), ``hash_str_to_int64`` (the same first-64-bits reading) and the two
  page-hash functions. Those name each page by pagedkv's chained hash of the request that wrote
  it (``PageNames``, filled by the adapter before every insert): the events then carry names the
  adapter can map back, where SGLang's would be SHA-256 chains of the tree's tokens.
- ``sglang.srt.disaggregation.kv_events`` (it imports msgspec, zmq and pydantic): the event
  records (msgspec structs there; here the records vLLM's stand-in keeps, of the fields SGLang
  fills) and the namespace seed, which is ``None`` for events
  without a LoRA name table or salt (the adapter registers no LoRA names and sends salts through
  the tree key only: see ``sglang_radix.py``).
- the paged allocator's imports: its Triton kernels (``alloc_extend`` / ``alloc_decode``, which
  the adapter does not call: it allocates with ``alloc``, whole pages), the platform (no
  Triton), the environment flag (``SGLANG_DEBUG_MEMORY_POOL`` off) and ``is_hip`` (no);
- the metrics collector, the runtime context, the request-to-token pool, the component types
  and the allocator package's ``__init__`` (it imports the paged allocator's Triton kernels):
  names the files import but whose code this configuration never runs (metrics are off).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pagedkv.model_tests.peers.sources import module
from pagedkv.model_tests.peers.standins import vllm_v1_events as vllm_events
from pagedkv.model_tests.peers.standins.vllm_v1 import _placeholder, _unused


def _placeholders(*names: str) -> dict[str, object]:
    return {name: _placeholder(name) for name in names}


# --- the KV event records (sglang.srt.disaggregation.kv_events) ------------------------------


class StorageMedium(enum.StrEnum):
    GPU = "GPU"
    CPU = "CPU"


class BlockStored(vllm_events.BlockStored):
    """SGLang's record, read by the same conversion as vLLM's (``vllm_v1_events.py``): SGLang
    fills the same fields, ``group_idx`` aside (one group)."""

    group_idx = 0


class BlockRemoved(vllm_events.BlockRemoved):
    group_idx = 0


class AllBlocksCleared(vllm_events.AllBlocksCleared):
    pass


def kv_event_namespace_seed(*, extra_key: str | None, cache_salt: str | None) -> bytes | None:
    if extra_key is None and cache_salt is None:
        return None
    raise NotImplementedError("pagedkv's SGLang stand-in publishes no namespaced events")


def namespaced_block_hash(block_hash: int, *, namespace_seed: bytes | None) -> int:
    if namespace_seed is not None:
        raise NotImplementedError("pagedkv's SGLang stand-in publishes no namespaced events")
    return block_hash


# --- page names (sglang.srt.mem_cache.utils) ---------------------------------------------------


@dataclass
class PageNames:
    """Each KV page's name, hex: pagedkv's chained hash of the block the request that wrote the
    page holds there (the adapter sets it before SGLang inserts the page)."""

    page_size: int = 1
    names: dict[int, str] = field(default_factory=dict)

    def of_node(self, node: Any, page_size: int) -> list[str]:
        indices = node.value.tolist()
        return [
            self.names[int(indices[start]) // page_size]
            for start in range(0, len(indices), page_size)
        ]

    def of_node_for_events(self, node: Any, page_size: int) -> list[str]:
        """As SGLang's ``compute_node_event_hash_values``: a namespaced node (extra key or salt)
        keeps its names in ``event_hash_value``, set on it and on each ancestor still without,
        which the recorder reads for the parent hash."""
        if node.key.extra_key is None and node.key.cache_salt is None:
            return self.of_node(node, page_size)
        current = node
        while current is not None and current.key is not None and len(current.key) > 0:
            if current.event_hash_value is not None:
                break
            current.event_hash_value = self.of_node(current, page_size)
            current = current.parent
        return list(node.event_hash_value)


PAGE_NAMES = PageNames()
"""The one table the stand-in reads (one adapter at a time per process sets it)."""


def hash_str_to_int64(hash_str: str) -> int:
    value = int(hash_str[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def split_node_hash_value(
    child_hash_value: list[str] | None, split_len: int, page_size: int
) -> tuple[list[str] | None, list[str] | None]:
    if child_hash_value is None:
        return None, None
    pages = split_len // page_size
    return child_hash_value[:pages], child_hash_value[pages:]


def _utils_module(strategies: Mapping[str, Callable[..., Any]]) -> ModuleType:
    def get_eviction_strategy(policy: str, config: dict[str, Any] | None = None) -> Any:
        return strategies[policy.lower()](**(config or {}))

    return module(
        "sglang.srt.mem_cache.utils",
        {
            "get_eviction_strategy": get_eviction_strategy,
            "split_node_hash_value": split_node_hash_value,
            "hash_str_to_int64": hash_str_to_int64,
            "compute_node_hash_values": PAGE_NAMES.of_node,
            "compute_node_event_hash_values": PAGE_NAMES.of_node_for_events,
        },
    )


def _package(name: str, attributes: Mapping[str, object] | None = None) -> ModuleType:
    return module(name, {"__path__": [], **(attributes or {})})


_NO_TRITON = module("capabilities", {"supports_triton": False})
"""The platform as the paged allocator reads it: no Triton (its batched ``alloc_extend`` /
``alloc_decode`` kernels; the scheduler play here calls ``alloc``)."""


def ceil_align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def modules(strategies: Mapping[str, Callable[..., Any]]) -> dict[str, ModuleType]:
    """The stand-ins, the eviction strategies being SGLang's own classes (``evict_policy.py``,
    loaded first: it imports nothing of SGLang)."""
    return {
        "sglang.srt.mem_cache.utils": _utils_module(strategies),
        "sglang.srt.disaggregation": _package("sglang.srt.disaggregation"),
        "sglang.srt.disaggregation.kv_events": module(
            "sglang.srt.disaggregation.kv_events",
            {
                "StorageMedium": StorageMedium,
                "BlockStored": BlockStored,
                "BlockRemoved": BlockRemoved,
                "AllBlocksCleared": AllBlocksCleared,
                "kv_event_namespace_seed": kv_event_namespace_seed,
                "namespaced_block_hash": namespaced_block_hash,
            },
        ),
        "sglang.srt.utils": _package(
            "sglang.srt.utils",
            {
                "get_bool_env_var": lambda name, default="false": False,
                "is_hip": lambda: False,
                "get_num_new_pages": _unused("get_num_new_pages"),
                "next_power_of_2": _unused("next_power_of_2"),
            },
        ),
        "sglang.srt.platforms": module(
            "sglang.srt.platforms",
            {"current_platform": module("current_platform", {"capabilities": _NO_TRITON})},
        ),
        "sglang.kernels": _package("sglang.kernels"),
        "sglang.kernels.ops": _package("sglang.kernels.ops"),
        "sglang.kernels.ops.memory": _package("sglang.kernels.ops.memory"),
        "sglang.kernels.ops.memory.allocator": module(
            "sglang.kernels.ops.memory.allocator",
            {
                "alloc_decode_kernel": _unused("alloc_decode_kernel"),
                "alloc_extend_kernel": _unused("alloc_extend_kernel"),
            },
        ),
        "sglang.srt.utils.common": module("sglang.srt.utils.common", {"ceil_align": ceil_align}),
        "sglang.srt.mem_cache.allocator": _package(
            "sglang.srt.mem_cache.allocator", _placeholders("BaseTokenToKVPoolAllocator")
        ),
        "sglang.srt.mem_cache.memory_pool": module(
            "sglang.srt.mem_cache.memory_pool", _placeholders("ReqToTokenPool", "KVCache")
        ),
        "sglang.srt.mem_cache.unified_cache": _package("sglang.srt.mem_cache.unified_cache"),
        "sglang.srt.mem_cache.unified_cache.component_type": module(
            "sglang.srt.mem_cache.unified_cache.component_type", _placeholders("ComponentType")
        ),
        "sglang.srt.observability": _package("sglang.srt.observability"),
        "sglang.srt.observability.metrics_collector": module(
            "sglang.srt.observability.metrics_collector",
            {
                "STAT_LOGGER_ROLE_RADIX_CACHE": "radix_cache",
                **_placeholders("RadixCacheMetricsCollector"),
                "radix_cache_metric_labels": _unused("radix_cache_metric_labels"),
                "resolve_collector_class": _unused("resolve_collector_class"),
            },
        ),
        "sglang.srt.runtime_context": module(
            "sglang.srt.runtime_context",
            {
                "get_observability": _unused("get_observability"),
                "get_parallel": _unused("get_parallel"),
            },
        ),
    }
