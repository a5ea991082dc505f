"""Stand-ins for what nano-vllm's ``block_manager.py`` imports: its ``Sequence`` (only what the
block manager reads and writes), ``xxhash.xxh64`` and ``numpy.array(...).tobytes()``.

The hash stand-in is a 64-bit BLAKE2b, not xxh64: the block manager only compares hashes for
equality, so the values differ from a real nano-vllm process but not the behaviour (neither
pagedkv nor nano-vllm's manager depends on a particular 64-bit function)."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from types import ModuleType

from pagedkv.model_tests.peers.sources import module


@dataclass
class Sequence:
    """nano-vllm's sequence, as its block manager sees it: tokens, a block table, cached tokens.
    Its block size is the class attribute ``block_size`` (nano-vllm sets it from the config)."""

    token_ids: list[int]
    seq_id: int = 0
    block_size: int = 256
    num_cached_tokens: int = 0
    block_table: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_blocks(self) -> int:
        return (self.num_tokens + self.block_size - 1) // self.block_size

    def block(self, i: int) -> list[int]:
        assert 0 <= i < self.num_blocks
        return self.token_ids[i * self.block_size : (i + 1) * self.block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)


class _Hash64:
    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=8)

    def update(self, data: bytes) -> None:
        self._hash.update(data)

    def intdigest(self) -> int:
        return int.from_bytes(self._hash.digest(), "little")


class _Int64Array:
    def __init__(self, values: list[int]) -> None:
        self.values = values

    def tobytes(self) -> bytes:
        return struct.pack(f"<{len(self.values)}q", *self.values)


MODULES: dict[str, ModuleType] = {
    "nanovllm.engine.sequence": module("nanovllm.engine.sequence", {"Sequence": Sequence}),
    "xxhash": module("xxhash", {"xxh64": _Hash64}),
    "numpy": module("numpy", {"array": _Int64Array}),
}
