"""Stand-ins for what vLLM v1's request level (``KVCacheManager``, its coordinators, the
single-type managers, ``BlockPool``, ``Request``) imports from the rest of vLLM.

vLLM's own files run: the manager, the pool, ``kv_cache_utils`` (the block hasher), ``Request``,
the KV-cache spec registry and the hash functions. What stands in here is what those files only
carry or read: the KV-cache spec classes (only the fields the managers read: block size, the
window; no dtypes, heads or page sizes), the KV events (plain records of the fields vLLM fills),
the sampling parameters a ``Request`` reads at construction, and modules whose names the files
import but whose code the request level never runs (placeholders that refuse to be used, as in
``vllm_v1.py``)."""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NoReturn

from pagedkv.model_tests.peers.sources import module
from pagedkv.model_tests.peers.standins import vllm_v1
from pagedkv.model_tests.peers.standins.vllm_v1_events import kv_events_module


def _placeholders(*names: str) -> dict[str, object]:
    return {name: vllm_v1._placeholder(name) for name in names}


# --- KV-cache specs -------------------------------------------------------------------------


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int
    dcp_sharded: bool = field(default=False, kw_only=True)

    @property
    def prefix_cacheable(self) -> bool:
        return True


@dataclass(frozen=True)
class AttentionSpec(KVCacheSpec):
    pass


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    pass


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int = 0
    extra_retained_tokens: int = 0

    def max_admission_blocks_per_request(
        self, max_in_flight_tokens: int, max_model_len: int
    ) -> int | None:
        """Read only by the scheduler's full-sequence admission gate
        (``allocate_slots(full_sequence_must_fit=True)``), which the adapter never asks for:
        no cap."""
        return None


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: KVCacheSpec
    is_eagle_group: bool = False
    role: str | None = None


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[Any]
    kv_cache_groups: list[KVCacheGroupSpec]
    prefix_cache_retention_interval: int | None = None
    needs_kv_cache_zeroing: bool = False
    has_mamba_layers: bool = False


class KVCacheSpecKind(enum.StrEnum):
    FULL_ATTENTION = "full_attention"
    SLIDING_WINDOW = "sliding_window"
    UNKNOWN = "unknown"


def get_kv_cache_spec_kind(spec: KVCacheSpec) -> KVCacheSpecKind:
    if isinstance(spec, SlidingWindowSpec):
        return KVCacheSpecKind.SLIDING_WINDOW
    if isinstance(spec, FullAttentionSpec):
        return KVCacheSpecKind.FULL_ATTENTION
    return KVCacheSpecKind.UNKNOWN


def get_kv_cache_spec_sliding_window(spec: KVCacheSpec) -> int | None:
    return spec.sliding_window if isinstance(spec, SlidingWindowSpec) else None


def iter_layer_specs(spec: KVCacheSpec) -> tuple[KVCacheSpec, ...]:
    """One spec per group here (no ``UniformTypeKVCacheSpecs`` wrapper)."""
    return (spec,)


def _refuse(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"pagedkv's stand-in for vLLM's {name} is not meant to be used")

    return refuse


# --- what a Request reads -------------------------------------------------------------------


@dataclass
class SamplingParams:
    max_tokens: int = 1 << 30
    extra_args: dict[str, Any] | None = None
    skip_reading_prefix_cache: bool | None = None


@dataclass(frozen=True)
class LoRARequest:
    """The fields vLLM's hasher (``lora_name``, ``lora_path``) and its events (``adapter_id``,
    ``name``) read."""

    lora_name: str
    adapter_id: int
    lora_path: str = ""

    @property
    def name(self) -> str:
        return self.lora_name


@dataclass(frozen=True)
class PlaceholderRange:
    offset: int
    length: int


@dataclass(frozen=True)
class MultiModalFeatureSpec:
    """The fields the block hasher reads: where the input sits and its content hash."""

    identifier: str
    mm_position: PlaceholderRange


def get_mm_features_in_window(
    mm_features: Sequence[MultiModalFeatureSpec], start: int, end: int
) -> tuple[int, int]:
    """The indices ``[lo, hi)`` of the inputs that overlap tokens ``[start, end)`` (inputs
    sorted by offset and disjoint, as vLLM assumes)."""
    ends = [f.mm_position.offset + f.mm_position.length for f in mm_features]
    offsets = [f.mm_position.offset for f in mm_features]
    return bisect.bisect_right(ends, start), bisect.bisect_left(offsets, end)


class ConstantList(Sequence[Any]):
    """A read-only view of a list (``Request.all_token_ids``)."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)


def length_from_prompt_token_ids_or_embeds(
    prompt_token_ids: Sequence[int] | None, prompt_embeds: object
) -> int:
    if prompt_token_ids is None or prompt_embeds is not None:
        raise NotImplementedError("pagedkv's stand-in takes token ids only")
    return len(prompt_token_ids)


class StructuredOutputRequest:
    @staticmethod
    def from_sampling_params(sampling_params: object) -> None:
        return None


class PrefillStats:
    """Created with every ``Request``; the request level never reads it."""


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4


def _refusing_cbor(*args: Any, **kwargs: Any) -> NoReturn:
    raise NotImplementedError("the adapter hashes with vLLM's default sha256 (pickle), not CBOR")


_SPEC_PLACEHOLDERS = (
    "ChunkedLocalAttentionSpec",
    "CircularBufferSpec",
    "CrossAttentionSpec",
    "EncoderOnlyAttentionSpec",
    "HiddenStateCacheSpec",
    "HiSparseHotSpec",
    "HiSparseResidentSpec",
    "KVCacheGroupRole",
    "MambaSpec",
    "MLAAttentionSpec",
    "RSWASpec",
    "SinkFullAttentionSpec",
    "SlidingWindowMLASpec",
    "UniformTypeKVCacheSpecs",
)

MODULES: dict[str, ModuleType] = {
    **{
        name: stand_in
        for name, stand_in in vllm_v1.MODULES.items()
        if name
        not in (
            "vllm.utils.hashing",
            "vllm.utils.math_utils",
            "vllm.v1.kv_cache_interface",
            "vllm.v1.kv_cache_spec_registry",
            "vllm.v1.request",
            "vllm.distributed.kv_events",
            "vllm.multimodal.utils",
            "vllm.v1.utils",
        )
    },
    "torch": module("torch", _placeholders("Tensor")),
    "cbor2": module("cbor2", {"dumps": _refusing_cbor}),
    "vllm.utils": module(
        "vllm.utils",
        {
            "__path__": [],  # its submodules hashing and math_utils are vLLM's own files
            "length_from_prompt_token_ids_or_embeds": length_from_prompt_token_ids_or_embeds,
        },
    ),
    "vllm.v1.kv_cache_interface": module(
        "vllm.v1.kv_cache_interface",
        {
            **_placeholders(*_SPEC_PLACEHOLDERS),
            "KVCacheSpec": KVCacheSpec,
            "AttentionSpec": AttentionSpec,
            "FullAttentionSpec": FullAttentionSpec,
            "SlidingWindowSpec": SlidingWindowSpec,
            "KVCacheGroupSpec": KVCacheGroupSpec,
            "KVCacheConfig": KVCacheConfig,
            "get_kv_cache_spec_kind": get_kv_cache_spec_kind,
            "get_kv_cache_spec_sliding_window": get_kv_cache_spec_sliding_window,
            "iter_layer_specs": iter_layer_specs,
            "get_mamba_prefill_checkpoint_position": _refuse(
                "get_mamba_prefill_checkpoint_position"
            ),
            "is_mamba_prefill_checkpoint_valid": _refuse("is_mamba_prefill_checkpoint_valid"),
        },
    ),
    "vllm.distributed.kv_events": kv_events_module(),
    "vllm.multimodal.utils": module(
        "vllm.multimodal.utils", {"get_mm_features_in_window": get_mm_features_in_window}
    ),
    "vllm.multimodal.inputs": module(
        "vllm.multimodal.inputs", {"MultiModalFeatureSpec": MultiModalFeatureSpec}
    ),
    "vllm.pooling_params": module("vllm.pooling_params", _placeholders("PoolingParams")),
    "vllm.sampling_params": module("vllm.sampling_params", {"SamplingParams": SamplingParams}),
    "vllm.v1.engine": module(
        "vllm.v1.engine",
        {
            **_placeholders("EngineCoreEvent", "EngineCoreEventType", "EngineCoreRequest"),
            "FinishReason": FinishReason,
        },
    ),
    "vllm.v1.kv_hints": module("vllm.v1.kv_hints", _placeholders("KvHintsEnvelope")),
    "vllm.v1.metrics.stats": module(
        "vllm.v1.metrics.stats",
        {
            **_placeholders("PrefixCacheStats", "RequestSpecDecodeMetrics"),
            "PrefillStats": PrefillStats,
        },
    ),
    "vllm.v1.structured_output.request": module(
        "vllm.v1.structured_output.request",
        {"StructuredOutputRequest": StructuredOutputRequest},
    ),
    "vllm.v1.utils": module(
        "vllm.v1.utils", {"ConstantList": ConstantList, "tensor_data": _refuse("tensor_data")}
    ),
}
