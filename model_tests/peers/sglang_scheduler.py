"""What SGLang's scheduler keeps per request and reads through ``RadixCache.checkpoint``: the
``Req`` fields the tree reads (``managers/schedule_batch.py``'s ``Req`` and its ``kv`` record,
which pull the whole server in) and the request-to-token pool (``memory_pool.ReqToTokenPool``,
a GPU tensor there, a growing CPU tensor here), as ``sglang_radix.py`` plays the scheduler."""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import Any

import torch

from pagedkv.specs.request_types import Request
from pagedkv.specs.types import Token


def pad_value(identifier: str) -> Token:
    """The token SGLang writes over a multimodal input's placeholders (``pad_input_ids``: a
    value from the item's content hash), negative here so that it never equals a text token."""
    return -1 - int(hashlib.sha256(identifier.encode()).hexdigest()[:12], 16)


def tree_tokens(request: Request) -> list[Token]:
    """The tokens SGLang's tree keys a request by: its tokens, each multimodal input's
    placeholders replaced by the input's pad value."""
    tokens = list(request.tokens)
    for item in request.multimodal:
        value = pad_value(item.identifier)
        for position in range(item.offset, item.offset + item.length):
            tokens[position] = value
    return tokens


@dataclass
class KvRecord:
    """``Req.kv``: the fields the tree reads and writes."""

    req_pool_idx: int
    cache_protected_len: int
    cache_inserted_len: int
    swa_evict_floor: int = 0


class SglangRequest:
    """``Req`` as ``RadixCache.checkpoint`` reads it, and what the adapter keeps beside."""

    def __init__(self, request: Request, row: int, lock: Any, node: Any, num_hit: int) -> None:
        self.rid = request.request_id
        self.kv = KvRecord(row, num_hit, num_hit)
        self.lock = lock
        self.last_node = node
        self.priority = None
        self.allocated = 0
        """Slots in the row, a whole number of pages."""
        self.computed = num_hit
        """Tokens whose KV the request holds, as of its last ``allocate_slots``."""
        self.admitted_tokens = request.num_tokens
        """Its tokens when admitted: the extend (prefill) covers them, a chunk at a time."""
        self.scheduled_end = num_hit
        """The committed tokens whose KV is written once its last ``allocate_slots``'s tokens
        are computed: ``owned_kv_len`` at a finish."""
        self.request = request
        self.fill(request)

    def fill(self, request: Request) -> None:
        """The request as it stands: its tokens, keys and prompt."""
        self.request = request
        tokens = tree_tokens(request)
        self.full_untruncated_fill_ids = array("q", tokens)
        self.origin_input_ids = tokens[: request.num_prompt_tokens]
        extra = request.extra_key
        self.extra_key = None if extra.lora_id is None else f"lora-{extra.lora_id}"
        self.cache_salt = extra.cache_salt


class TokenRows:
    """``ReqToTokenPool``: one row of KV indices per running request."""

    def __init__(self) -> None:
        self.req_to_token = torch.zeros((0, 0), dtype=torch.int64)
        self._free: list[int] = []

    def take(self) -> int:
        if self._free:
            return self._free.pop()
        rows, width = self.req_to_token.shape
        self.req_to_token = torch.cat(
            (self.req_to_token, torch.zeros((1, width), dtype=torch.int64))
        )
        return int(rows)

    def give_back(self, index: int) -> None:
        self.req_to_token[index] = 0
        self._free.append(index)

    def write(self, where: tuple[int, slice], values: torch.Tensor) -> None:
        row, columns = where
        rows, width = self.req_to_token.shape
        end = columns.stop if columns.stop is not None else width
        if end > width:
            grown = torch.zeros((rows, end), dtype=torch.int64)
            grown[:, :width] = self.req_to_token
            self.req_to_token = grown
        self.req_to_token[row, columns] = values.to(torch.int64)

    def row(self, index: int, length: int) -> list[int]:
        return [int(i) for i in self.req_to_token[index, :length].tolist()]
