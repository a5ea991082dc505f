"""Optional operations over the stdio protocol (``specs/oracle.md`` §5): a program names the
ones it serves when it is created, and only those are sent; a pool's ``take_events`` is then
held to the reference's events, a request manager's ``preempt`` made for a preemption."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagedkv.model_tests.corpus.pools import MirroredPool
from pagedkv.model_tests.lockstep.pool_event_ledger import events_hook
from pagedkv.model_tests.oracle import targets
from pagedkv.model_tests.oracle.api import check
from pagedkv.model_tests.oracle.exec_target import PeerError
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import DoubleFreeError
from pagedkv.specs.interface import PoolBatchFree, PoolChainAllocation, RequestPreemption
from pagedkv.specs.request_types import RequestConfig
from pagedkv.specs.types import PoolConfig

PEER = f"{sys.executable} -m pagedkv.model_tests.oracle.example_peer"
SILENT = "pagedkv.model_tests.corpus.pools:PoolEvictionSilent"
MIRRORED = "pagedkv.model_tests.corpus.pools:MirroredPool"


def peer(impl: str) -> str:
    return f"exec:{PEER} --impl {impl}"


def test_a_pool_that_offers_its_events_has_them_over_the_wire() -> None:
    target = targets.load(peer("reference"), "pool")(PoolConfig(4, 2))
    assert events_hook(target) is not None
    assert target.take_events() == []
    target.close()


def test_a_pool_without_events_offers_none_and_is_checked_as_before() -> None:
    assert not hasattr(MirroredPool(PoolConfig(4, 2)), "take_events")
    target = targets.load(peer(MIRRORED), "pool")
    made = target(PoolConfig(4, 2))
    assert events_hook(made) is None
    made.close()
    for profile in ("pagedkv", "safety"):
        verdict = check(peer(MIRRORED), "pool", profile=profile, seed=0, steps=300)
        assert verdict.passed, verdict.message


@pytest.mark.parametrize("profile", ["pagedkv", "safety"])
def test_a_dropped_removal_over_the_wire_fails_and_the_reference_passes(profile: str) -> None:
    failed = check(peer(SILENT), "pool", profile=profile, seed=0, steps=2000)
    assert not failed.passed
    assert "BlockRemoved" in failed.message, failed.message
    passed = check(peer("reference"), "pool", profile=profile, seed=0, steps=2000)
    assert passed.passed, passed.message


def test_a_request_manager_offers_preempt_over_the_wire() -> None:
    target = targets.load(peer("reference"), "request")(RequestConfig(8, 2))
    offered = isinstance(target, RequestPreemption)
    target.close()
    assert offered


def test_an_offer_of_no_optional_operation_is_refused(tmp_path: Path) -> None:
    program = tmp_path / "peer.py"
    program.write_text(
        "import sys\nsys.stdin.readline()\n"
        'print(\'{"result": {"offers": ["free"]}}\', flush=True)\n'
    )
    factory = targets.load(f"exec:{sys.executable} {program}", "pool")
    with pytest.raises(PeerError, match="naming optional pool operations"):
        factory(PoolConfig(4, 2))


def test_a_pool_offers_its_batches_over_the_wire_and_they_fold() -> None:
    target = targets.load(peer("reference"), "pool")(PoolConfig(4, 2))
    offered = isinstance(target, PoolChainAllocation) and isinstance(target, PoolBatchFree)
    assert offered
    blocks = target.allocate_immutable_chain(Prefix(), [[1, 2], [3, 4]])
    assert blocks == [0, 1] and target.num_free_blocks() == 2
    with pytest.raises(DoubleFreeError, match=r"blocks\[2\]"):
        target.free_blocks([1, 0, 0])
    assert target.num_free_blocks() == 2  # all or nothing, over the wire too
    target.free_blocks([1, 0])
    assert target.num_free_blocks() == 4
    target.close()
