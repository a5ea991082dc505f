"""The request-level machine: the optimized manager in lockstep with the reference (exact mode)
for full attention, sliding window and hybrid groups; the reference alone against the
invariants; and planted wrong managers that the machine must catch."""

from __future__ import annotations

from pagedkv.model_tests.machines.request_machine import request_lockstep_case
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager

TestExactFull = request_lockstep_case(
    RequestManager, group_kind="full", model=ReferenceRequestKVManager
).TestCase
TestExactWindow = request_lockstep_case(
    RequestManager, group_kind="window", model=ReferenceRequestKVManager
).TestCase
TestExactHybrid = request_lockstep_case(
    RequestManager, group_kind="hybrid", model=ReferenceRequestKVManager
).TestCase
TestReferenceAloneHybrid = request_lockstep_case(
    ReferenceRequestKVManager, group_kind="hybrid", mode="alone"
).TestCase
