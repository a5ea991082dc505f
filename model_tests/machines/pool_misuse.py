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
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.pool_base import PoolMachineBase
from pagedkv.model_tests.machines.pool_chains import CHAINS, Chain
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import PoolBatchFree, PoolChainAllocation
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.types import BlockId, PoolConfig

T = TypeVar("T")


class PoolMisuse(PoolMachineBase):
    """The calls and configurations both pools must refuse alike."""

    @precondition(lambda self: self.mode != "safety" and self.contract != "scheduler")
    @rule(
        chain=CHAINS,
        data=DATA,
        kind=st.sampled_from(["unheld block", "too many tokens", "bad argument", "bad batch"]),
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
        elif kind == "bad batch":
            call = self._bad_batch_call(chain, data)
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

    def _bad_batch_call(self, chain: Chain, data: st.DataObject) -> PoolCall[object] | None:
        """A batch whose bad item comes after good ones: the good ones must not stay done
        (``block_pool.md`` §5, batches: all or nothing)."""
        size = self.block_size
        bad: list[PoolCall[object]] = []
        if self.batches(PoolChainAllocation):
            good = [[(start + i) % 7 for i in range(size)] for start in range(2)]
            wrong = data.draw(
                st.sampled_from([[-1] * size, [0] * (size + 1), [0] * max(1, size - 1)]),
                label="bad block",
            )
            if len(wrong) != size or wrong[0] < 0:
                bad.append(calls.allocate_immutable_chain(Prefix(), [*good, wrong, *good]))
        if self.batches(PoolBatchFree) and chain.blocks:
            unheld = [b for b in self.config.block_ids if b not in self._held()]
            twice = [chain.blocks[-1]] * (self._held()[chain.blocks[-1]] + 1)
            bad.append(calls.free_blocks([*chain.blocks[:-1], *twice]))
            if unheld:
                bad.append(calls.free_blocks([*chain.blocks, unheld[0]]))
            bad.append(calls.free_blocks([*chain.blocks, self.config.first_id - 1]))
        if not bad:
            return None
        event("outcome: a bad batch refused")
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
