"""Calls that must fail: misuse the spec refuses, and configurations it rejects (checked
against the reference, so not under the safety tier)."""

from __future__ import annotations

from functools import partial
from typing import TypeVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pagedkv.model_tests.lockstep.calls import construction_outcome
from pagedkv.model_tests.machines.draws import integers, sampled
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.manager_base import GROUPS, ManagerMachineBase
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.types import Device, ExtraKey, ManagerConfig

T = TypeVar("T")


class Misuse(ManagerMachineBase):
    """The calls and configurations both sides must refuse alike."""

    @precondition(lambda self: self.mode != "safety" and not self.scheduler)
    @rule(group=GROUPS, data=DATA)
    def misuse(self, group: int, data: st.DataObject) -> None:
        """A call the spec refuses (checked against the reference; the safety tier leaves
        argument checking to the policy)."""
        members = self.ledger.members(group)
        device = self.ledger.device_of(group)
        wrong: list[ManagerCall[object]] = [
            calls.free(10_000),
            calls.append_slots(10_000, [1]),
            calls.fork(10_000, self.fresh_id()),
            calls.can_swap_out(10_000),
            calls.allocate(self.fresh_id(), [self.fresh_id()], []),
            calls.allocate(self.fresh_id(), [], [1]),
            calls.can_allocate([1], -1),
            calls.get_prefix_cache_hit_rate(cast(Device, "gpu")),  # not a Device, on purpose
        ]
        if members:
            known = members[0]
            wrong += [
                calls.allocate(self.fresh_id(), [known], [1]),
                calls.allocate(group, [self.fresh_id()], [1]),
                calls.fork(known, known),
                calls.append_slots(known, [-5]),
                calls.access_all_blocks_in_seq(known, float("inf")),
            ]
        view = self.model_view()
        if device is Device.GPU and view is not None:
            wrong += [calls.swap_in(group), calls.can_swap_in(group)]
            room = len(view.seqs[known].blocks) * self.config.block_size
            wrong.append(calls.append_slots(known, [1] * (room + 40)))
        if device is Device.CPU:
            wrong += [
                calls.swap_out(group),
                calls.append_slots(known, [1]),
                calls.can_append_slots(group),
            ]
        if self.config.enable_caching or self.config.sliding_window is not None:
            wrong.append(calls.allocate(self.fresh_id(), [self.fresh_id()], [1], ExtraKey(), [1]))
        call = data.draw(st.sampled_from(wrong), label="call")
        result = self.both(call)
        if not self.ended:
            assert isinstance(result, PagedKVError), f"{call} was accepted"

    @precondition(lambda self: self.mode != "safety")
    @rule(
        gpu=integers(0, 2),
        cpu=integers(0, 2),
        watermark=sampled((0.0, 1.0, -0.1)),
        window=sampled((None, 0, 2)),
    )
    def bad_configuration(self, gpu: int, cpu: int, watermark: float, window: int | None) -> None:
        config = ManagerConfig(2, gpu, cpu, watermark, window)
        self.checking_config = config
        outcomes = [
            construction_outcome(factory, config)
            for factory in (
                partial(ReferenceBlockSpaceManager, policy=self.policy),
                type(self).make_target,
            )
        ]
        if outcomes[1] != "UnsupportedError":  # one the target declines is not compared
            assert outcomes[0] == outcomes[1], (
                f"{config}: model {outcomes[0]}, target {outcomes[1]}"
            )
        self.checking_config = None
