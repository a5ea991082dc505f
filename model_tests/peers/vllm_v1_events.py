"""vLLM v1's KV events, renamed into pagedkv's (``specs/request_types.py``): the pool level's
and the request level's adapters hand over what vLLM itself published, through this one
conversion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pagedkv.model_tests.peers.standins import vllm_v1_events as vllm
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import BlockHash


def pagedkv_event(event: Any, name: Callable[[bytes], BlockHash]) -> KVEvent:
    """``event`` as pagedkv's, each of vLLM's hashes renamed by ``name``."""
    if isinstance(event, vllm.BlockStored):
        parent = event.parent_block_hash
        return BlockStored(
            tuple(name(h) for h in event.block_hashes),
            None if parent is None else name(parent),
            tuple(event.token_ids),
            event.block_size,
            event.lora_id,
            event.group_idx,
        )
    if isinstance(event, vllm.BlockRemoved):
        return BlockRemoved(tuple(name(h) for h in event.block_hashes), event.group_idx)
    if isinstance(event, vllm.AllBlocksCleared):
        return AllBlocksCleared()
    raise TypeError(f"vLLM sent an event the adapter does not know: {event!r}")
