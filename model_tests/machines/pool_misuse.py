"""Pool calls that must fail, and configurations the spec rejects (checked against the
reference)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, TypeVar, cast

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pagedkv.model_tests.lockstep.calls import construction_outcome
from pagedkv.model_tests.machines.pool_base import PoolMachineBase
from pagedkv.model_tests.machines.pool_chains import CHAINS, Chain
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.types import BlockId, PoolConfig

T = TypeVar("T")


class PoolMisuse(PoolMachineBase):
    """The calls and configurations both pools must refuse alike."""

    @precondition(lambda self: self.mode != "safety" and self.contract != "scheduler")
    @rule(
        chain=CHAINS,
        data=st.data(),
        kind=st.sampled_from(["unheld block", "too many tokens", "bad argument"]),
    )
    def misuse(self, chain: Chain, data: st.DataObject, kind: str) -> None:
        """A call that must fail, and leave both pools exactly as they were."""
        if kind == "unheld block":
            call = self._unheld_block_call(data)
        elif kind == "too many tokens" and chain.blocks:
            room = chain.open_room(self.block_size)
            extra = data.draw(st.integers(1, 3), label="extra")
            call = calls.append_tokens(
                chain.blocks[-1], chain.prefix_of_last(), [0] * (room + extra)
            )
        else:
            call = self._bad_argument_call(chain, data)
        if call is None:
            return
        result = self.both(call)
        assert isinstance(result, PagedKVError), f"{call} succeeded"

    def _unheld_block_call(self, data: st.DataObject) -> PoolCall[object] | None:
        """Blocks no chain holds have count 0 (double free, unallocated) or are foreign."""
        block = self.config.first_id + data.draw(st.integers(-2, 10), label="offset")
        if block in self._held():
            return None
        unheld: list[PoolCall[object]] = [
            calls.free(block),
            calls.append_tokens(block, Prefix(), [0]),
            calls.fork([block]),
            calls.cow_if_not_appendable(block),
        ]
        view = self._model_view()
        if view is not None and block not in view.evictable:  # a cached block may be marked
            unheld.append(calls.mark_computed([block]))
        return data.draw(st.sampled_from(unheld), label="call")

    def _bad_argument_call(self, chain: Chain, data: st.DataObject) -> PoolCall[object]:
        size = self.block_size
        block = chain.blocks[-1] if chain.blocks else self.config.first_id
        not_chains = cast(list[list[BlockId]], "not chains")  # not a list of chains, on purpose
        bad: list[PoolCall[object]] = [
            calls.allocate_immutable(Prefix(), [-1] * size),
            calls.allocate_immutable(Prefix(), [True] * size),
            calls.allocate_immutable(Prefix(), [0] * (size + 1)),
            calls.allocate_immutable(Prefix(hash=b"short"), [0] * size),
            calls.allocate_immutable(Prefix(num_tokens=-size), [0] * size),
            calls.append_tokens(block, Prefix(), []),
            calls.mark_accessed(list(chain.blocks), math.nan),
            calls.mark_accessed(list(chain.blocks), -1.0),
            calls.common_computed_prefix(not_chains),
        ]
        return data.draw(st.sampled_from(bad), label="call")

    @precondition(lambda self: self.mode != "safety")
    @rule(
        num_blocks=st.integers(-1, 2),
        block_size=st.integers(-1, 2),
        caching=st.sampled_from([True, 1]),
    )
    def bad_configuration(self, num_blocks: int, block_size: int, caching: Any) -> None:
        """(Not under the safety tier: which configurations to refuse is the spec's.)"""
        config = PoolConfig(num_blocks, block_size, caching)
        self.checking_config = config
        outcomes = [
            construction_outcome(factory, config)
            for factory in (partial(ReferenceBlockPool, policy=self.policy), type(self).make_target)
        ]
        if outcomes[1] != "UnsupportedError":  # one the target declines is not compared
            assert outcomes[0] == outcomes[1], (
                f"{config}: model {outcomes[0]}, target {outcomes[1]}"
            )
        self.checking_config = None
        event(f"rule: configuration {outcomes[0]}")
