"""Plain value types of the request level (``specs/request_level.md``): the attention groups a
manager serves, a request as the scheduler owns it, and the KV events a router reads.

The request level is vLLM v1's ``KVCacheManager`` in pagedkv's words: the caller (the scheduler)
owns every request and passes it, as a value, to each call; the manager owns the blocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from pagedkv.specs.types import NO_EXTRA_KEY, BlockHash, BlockId, ExtraKey, Token

NULL_BLOCK: BlockId = 0
"""The block every group's table points at where it holds no block (a sliding window's skipped
prefix). It holds no KV, is never handed out, never freed and never counted free."""

RequestId: TypeAlias = str
GroupBlocks: TypeAlias = list[list[BlockId]]
"""Block ids per KV cache group, in the config's group order."""


class AttentionKind(enum.Enum):
    FULL = "full"
    SLIDING_WINDOW = "sliding_window"


@dataclass(frozen=True, slots=True)
class KVGroup:
    """One KV cache group: the layers of one attention kind, with a block table per request.

    A sliding-window group's attention reads only the last ``sliding_window`` tokens, so its
    blocks before the window go back to the pool and its table points at ``NULL_BLOCK`` there.
    """

    kind: AttentionKind = AttentionKind.FULL
    sliding_window: int | None = None
    """The window in tokens, for ``SLIDING_WINDOW`` only."""


FULL_ATTENTION: tuple[KVGroup, ...] = (KVGroup(),)


@dataclass(frozen=True, slots=True)
class RequestConfig:
    """One pool of ``num_blocks`` ids ``0 .. num_blocks - 1`` (id 0 is ``NULL_BLOCK``) shared by
    every group; every group uses ``block_size`` tokens per block."""

    num_blocks: int
    block_size: int
    groups: tuple[KVGroup, ...] = FULL_ATTENTION
    enable_caching: bool = True
    max_model_len: int | None = None
    """No request needs slots past this many tokens (``None``: no cap)."""


@dataclass(frozen=True, slots=True)
class MultimodalInput:
    """A placeholder of ``length`` tokens from ``offset`` whose KV depends on an image (or
    audio...) named by ``identifier``, its content hash as the engine computed it: opaque here.
    Every full block that overlaps it is keyed by ``identifier`` too."""

    offset: int
    length: int
    identifier: str


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the scheduler passes it: its committed tokens (prompt and accepted output;
    draft tokens are not among them), how many of them have KV computed, and its keys."""

    request_id: RequestId
    tokens: tuple[Token, ...]
    num_prompt_tokens: int
    num_computed_tokens: int = 0
    extra_key: ExtraKey = NO_EXTRA_KEY
    multimodal: tuple[MultimodalInput, ...] = ()

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks of ``group`` became cached under ``block_hashes`` (consecutive blocks of one
    request; ``parent_hash`` is the hash before the first, ``None`` at a request's start)."""

    block_hashes: tuple[BlockHash, ...]
    parent_hash: BlockHash | None
    token_ids: tuple[Token, ...]
    block_size: int
    lora_id: int | None
    group: int


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Cached blocks of ``group`` that are no longer cached (evicted)."""

    block_hashes: tuple[BlockHash, ...]
    group: int


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """Every cached block is gone (``reset_prefix_cache`` succeeded)."""


KVEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared
