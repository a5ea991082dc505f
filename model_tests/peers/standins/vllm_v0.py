"""Stand-ins for what vLLM 0.6.3's block manager imports from ``vllm.sequence`` and
``vllm.utils``: the sequence and group objects its scheduler passes in (only the fields the block
manager reads), the device enum, and two list helpers."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType

from pagedkv.model_tests.peers.sources import module


class SequenceStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    SWAPPED = 2


@dataclass
class SequenceData:
    num_computed_tokens: int = 0

    def get_num_computed_tokens(self) -> int:
        return self.num_computed_tokens


@dataclass
class Sequence:
    seq_id: int
    token_ids: list[int]
    status: SequenceStatus = SequenceStatus.WAITING
    lora_int_id: int = 0
    """Carried as the scheduler would; 0.6.3's block manager never reads it (nor a salt)."""
    data: SequenceData = field(default_factory=SequenceData)

    def get_token_ids(self) -> list[int]:
        return self.token_ids


@dataclass
class SequenceGroup:
    request_id: str
    seqs: list[Sequence]
    encoder_seq: Sequence | None = None

    def get_seqs(self, status: SequenceStatus | None = None) -> list[Sequence]:
        return [s for s in self.seqs if status is None or s.status == status]

    def is_encoder_decoder(self) -> bool:
        return self.encoder_seq is not None

    def get_encoder_seq(self) -> Sequence | None:
        return self.encoder_seq


class Device(enum.Enum):
    GPU = enum.auto()
    CPU = enum.auto()


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def chunk_list(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


MODULES: dict[str, ModuleType] = {
    "vllm.sequence": module(
        "vllm.sequence",
        {
            "Sequence": Sequence,
            "SequenceData": SequenceData,
            "SequenceGroup": SequenceGroup,
            "SequenceStatus": SequenceStatus,
        },
    ),
    "vllm.utils": module(
        "vllm.utils",
        {
            "Device": Device,
            "cdiv": cdiv,
            "chunk_list": chunk_list,
            "STR_NOT_IMPL_ENC_DEC_SWA": "sliding window is not supported for encoder/decoder",
            "STR_NOT_IMPL_ENC_DEC_PREFIX_CACHE": (
                "prefix caching is not supported for encoder/decoder"
            ),
        },
    ),
}
