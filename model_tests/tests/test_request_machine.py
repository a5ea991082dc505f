"""The request-level machine: the optimized manager in lockstep with the reference (exact mode)
for full attention, sliding window and hybrid groups; the reference alone against the
invariants (the safety clauses of ``specs/request_level.md`` §10), for each layout under
pagedkv's choices and under vLLM's (sparse window retention, ``AllBlocksCleared`` without
caching); and planted wrong managers that the machine must catch."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.machines.hypothesis_internals import shrinking_for
from pagedkv.model_tests.machines.request_checks import stored_problems
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.machines.request_kv_model import RequestKVModel, contents
from pagedkv.model_tests.machines.request_machine import (
    RequestLockstep,
    request_lockstep_case,
    request_settings,
)
from pagedkv.model_tests.machines.request_replay import replay_calls, replay_program
from pagedkv.model_tests.oracle.known import SAFETY_ONLY
from pagedkv.model_tests.tests.request_planted import (
    PLANTED_EXACT,
    PLANTED_SAFETY,
    ReleasesInsideWindow,
    hit_without_cap,
)
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.interface import RequestKVManagerFactory
from pagedkv.specs.policy import PAGEDKV, PROFILES
from pagedkv.specs.request_types import BlockStored, RequestConfig
from pagedkv.specs.types import ExtraKey

TestExactFull = request_lockstep_case(
    RequestManager, group_kind="full", model=ReferenceRequestKVManager
).TestCase
TestExactWindow = request_lockstep_case(
    RequestManager, group_kind="window", model=ReferenceRequestKVManager
).TestCase
TestExactHybrid = request_lockstep_case(
    RequestManager, group_kind="hybrid", model=ReferenceRequestKVManager
).TestCase
TestReferenceAloneFull = request_lockstep_case(
    ReferenceRequestKVManager, group_kind="full", mode="alone"
).TestCase
TestReferenceAloneWindow = request_lockstep_case(
    ReferenceRequestKVManager, group_kind="window", mode="alone"
).TestCase
TestReferenceAloneHybrid = request_lockstep_case(
    ReferenceRequestKVManager, group_kind="hybrid", mode="alone"
).TestCase

VLLM_V1 = PROFILES["vllm-v1"]
reference_as_vllm = functools.partial(ReferenceRequestKVManager, policy=VLLM_V1)
TestReferenceAsVllmAloneWindow = request_lockstep_case(
    reference_as_vllm, group_kind="window", mode="alone", policy=VLLM_V1
).TestCase
TestReferenceAsVllmAloneHybrid = request_lockstep_case(
    reference_as_vllm, group_kind="hybrid", mode="alone", policy=VLLM_V1
).TestCase


SHRINK_SECONDS = 2.0


def found_failure(machine: type[RequestLockstep]) -> BaseException:
    """Runs ``machine`` until it fails (a fixed seed, a bounded search, a few seconds of
    shrinking); the failure."""
    budget = settings(
        request_settings(),
        max_examples=200,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
    )
    with pytest.raises(Exception) as found, shrinking_for(SHRINK_SECONDS):
        run_state_machine_as_test(machine, settings=budget)
    return found.value


@pytest.mark.parametrize("planted", PLANTED_EXACT, ids=lambda p: p.__name__)
def test_exact_mode_catches_a_planted_manager(planted: RequestKVManagerFactory) -> None:
    machine = request_lockstep_case(planted, group_kind="hybrid", model=ReferenceRequestKVManager)
    error = found_failure(machine)
    assert isinstance(error, Divergence), error
    notes = "\n".join(getattr(error, "__notes__", []))
    assert "replayable" in notes and "manager.allocate_slots(" in notes, notes


@pytest.mark.parametrize("planted", PLANTED_SAFETY, ids=lambda p: p.__name__)
def test_the_invariants_alone_catch_a_planted_manager(planted: RequestKVManagerFactory) -> None:
    kind: GroupKind = "window" if planted is ReleasesInsideWindow else "hybrid"
    machine = request_lockstep_case(planted, group_kind=kind, mode="alone")
    error = found_failure(machine)
    assert isinstance(error, Divergence), error
    assert error.kind in SAFETY_ONLY, error  # an invariant's kind, never a disagreement


def test_the_printed_program_replays_the_divergence() -> None:
    """The shrunk run's calls, replayed on the planted manager and on the reference, part
    where the machine said they do."""
    machine = request_lockstep_case(
        hit_without_cap, group_kind="hybrid", model=ReferenceRequestKVManager
    )
    found_failure(machine)
    assert machine.failing_run is not None
    config, calls = machine.failing_run
    planted = replay_calls(hit_without_cap, config, calls)
    reference = replay_calls(ReferenceRequestKVManager, config, calls)
    assert planted != reference
    outcomes = replay_calls(ReferenceRequestKVManager, config, calls)
    program = replay_program(config, calls, outcomes)
    namespace: dict[str, object] = {"make_manager": ReferenceRequestKVManager}
    exec(program, namespace)  # the printed program runs as it stands


def test_a_stored_event_must_name_exactly_what_it_stored() -> None:
    """``specs/request_level.md`` §4.7 (D1): a ``BlockStored`` names one run of consecutive
    blocks, with its parent and exactly its tokens. vLLM's whole-range form, a wrong parent, an
    empty event, another block's tokens or a broken run are each refused."""
    size = 2
    kv = RequestKVModel(size)
    found = contents([3, 1, 4, 1, 5, 9, 2], ExtraKey(), (), size)
    kv.remember(found, 3)
    h0, h1, h2 = found.hashes
    tokens = (3, 1, 4, 1, 5, 9)

    def stored(hashes: tuple[bytes, ...], parent: bytes | None, ids: tuple[int, ...]) -> list[str]:
        return stored_problems(BlockStored(hashes, parent, ids, size, None, 1), kv, size)

    assert stored((h0, h1, h2), None, tokens) == []
    assert stored((h1, h2), h0, tokens[2:]) == []
    assert stored((h2,), h1, tokens[4:]) == []
    assert stored((h2,), h0, (4, 1, 5, 9))  # vLLM's whole range: block 1 null, block 2 stored
    assert stored((), h0, (4, 1))  # vLLM's empty event: nothing stored
    assert stored((h1, h2), None, tokens[2:])  # the parent is block 0's hash
    assert stored((h2,), h0, tokens[4:])  # the parent is the hash just before, block 1's
    assert stored((h1, h2), h0, (4, 1, 5, 8))  # not the blocks' tokens
    assert stored((h1,), h0, tokens[4:])  # tokens of another block
    assert stored((h0, h2), None, (3, 1, 5, 9))  # not a run: block 1 left out
    assert stored((h0,), None, (3,))  # not whole blocks


CLEARS_ALWAYS = replace(PAGEDKV, request_clear_event="always")


def clears_always(config: RequestConfig) -> ReferenceRequestKVManager:
    """The reference sending ``AllBlocksCleared`` at every reset, caching or not (vLLM's)."""
    return ReferenceRequestKVManager(config, CLEARS_ALWAYS)


def test_a_clear_event_without_caching_is_read_as_the_policy_says() -> None:
    """``specs/request_level.md`` §9: under ``request_clear_event=always`` a manager without
    caching announces its resets; under ``with_caching`` the same event is refused."""
    honoured = request_lockstep_case(
        clears_always, group_kind="full", mode="alone", policy=CLEARS_ALWAYS
    )
    budget = settings(request_settings(), max_examples=60, derandomize=True, database=None)
    run_state_machine_as_test(honoured, settings=budget)
    refused = request_lockstep_case(clears_always, group_kind="full", mode="alone")
    error = found_failure(refused)
    assert isinstance(error, Divergence) and "caching is off" in str(error), error
