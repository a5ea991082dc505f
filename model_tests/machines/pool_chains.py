"""What the pool machine draws and holds: chains (a sequence's blocks, as a block table would
hold them), the tokens' template, extra keys, the swarm and the configurations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.types import BlockId, ExtraKey, PoolConfig, Token

T = TypeVar("T")

TEMPLATE: tuple[Token, ...] = (0, 1, 1, 0, 2, 0, 1, 2, 2, 1, 0, 0)
"""The shared 'system prompt' most chains follow, so that prefixes repeat across chains."""

COPYING = frozenset({"append_tokens", "cow_if_not_appendable"})
"""The calls that can record a copy-on-write pair."""
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=1), ExtraKey(cache_salt="tenant-b"))


@dataclass(eq=False)
class Chain:
    """One holder's view of its blocks: ids, and the tokens it put in each (so the prefix of
    each block follows from the chain itself, whatever pool holds it)."""

    extra_key: ExtraKey
    blocks: list[BlockId] = field(default_factory=list)
    contents: list[tuple[Token, ...]] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Chain(blocks={self.blocks}, lengths={self.lengths})"

    @property
    def lengths(self) -> list[int]:
        return [len(tokens) for tokens in self.contents]

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    def open_room(self, block_size: int) -> int:
        """Empty slots of the last block (0 when there is none or it is full)."""
        return block_size - len(self.contents[-1]) if self.blocks else 0

    def prefix_of_last(self) -> Prefix:
        """The prefix of the chain's last block: the full blocks before it."""
        prefix = Prefix(extra_key=self.extra_key)
        for tokens in self.contents[:-1]:
            prefix = prefix.extend(tokens)
        return prefix

    def prefix_of_next(self) -> Prefix:
        prefix = Prefix(extra_key=self.extra_key)
        for tokens in self.contents:
            prefix = prefix.extend(tokens)
        return prefix


CHAINS = Bundle("chains")
"""The live chains of a run."""

Mode = Literal["exact", "isomorphic", "safety"]

SWARM = ("extra keys", "parallel sampling")
"""Features a run may leave out (swarm testing); the rules are swarmed by Hypothesis itself
(``manager_machine.SWARM``)."""

swarms = st.one_of(st.just(frozenset[str]()), st.frozensets(st.sampled_from(SWARM)))

pool_configs = st.builds(
    PoolConfig,
    num_blocks=st.integers(1, 8),
    block_size=st.sampled_from([1, 2, 2, 3, 4]),
    enable_caching=st.sampled_from([True, True, True, False]),
    first_id=st.sampled_from([0, 0, 7]),
)
