"""The real peers' adapters (``model_tests/peers/``), over the engines' own files in ``.peers/``.

Skipped when a peer's files are not fetched (``make peers-fetch``); ``make peers`` is the full
check. Each test pins one behaviour of the engine as the adapter shows it (``specs/peers.md``),
so an adapter that stopped being faithful, or a loader that stopped loading, fails here.
"""

from __future__ import annotations

import sys

import pytest

from model_tests.oracle.check import run_check
from model_tests.peers import lacking, sources
from model_tests.peers.nano_vllm_manager import NanoVllmManager
from model_tests.peers.run import PEERS, main
from model_tests.peers.vllm_v0_manager import Switches, VllmV0Manager
from model_tests.peers.vllm_v1_pool import VllmV1Pool
from specs.content_hash import Prefix
from specs.errors import (
    OutOfBlocksError,
    UnknownSequenceError,
    UnsupportedError,
)
from specs.types import AllocStatus, ExtraKey, ManagerConfig, PoolConfig


def needs(source: sources.Source) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not source.fetched, reason=f"{source.name} not fetched (make peers-fetch)"
    )


@needs(sources.VLLM_V0)
def test_vllm_v0_loads_privately() -> None:
    """The engine's modules and the stand-ins leave ``sys.modules`` as it was."""
    VllmV0Manager(ManagerConfig(2, 4, 2))
    assert not [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]


@needs(sources.VLLM_V0)
def test_vllm_v0_manager_is_vllm() -> None:
    config = ManagerConfig(block_size=2, num_gpu_blocks=6, num_cpu_blocks=4, sliding_window=3)
    manager = VllmV0Manager(config)
    assert manager.get_num_free_gpu_blocks() == 6  # the null block is taken lazily
    assert VllmV0Manager(config, Switches(eager_null_block=True)).get_num_free_gpu_blocks() == 5
    manager.allocate(1, [10, 11], [1, 2, 3])
    assert manager.get_block_table(10) == manager.get_block_table(11) == [0, 1]
    # the first append takes the null block (2), then copies the shared tail into 3
    assert manager.append_slots(10, [4]) == [(1, 3)]
    assert manager.get_num_free_gpu_blocks() == 2
    with pytest.raises(UnknownSequenceError):
        manager.free(99)
    with pytest.raises(UnsupportedError):
        manager.get_num_cached_tokens(10)


@needs(sources.VLLM_V0)
def test_vllm_v0_window_never_is_judged_against_all_blocks() -> None:
    """vLLM judges NEVER against every GPU block although the null block holds one (a defect)."""
    config = ManagerConfig(block_size=1, num_gpu_blocks=2, num_cpu_blocks=1, watermark=0.0)
    windowed = ManagerConfig(1, 2, 1, 0.0, sliding_window=1)
    manager = VllmV0Manager(windowed, Switches(eager_null_block=True))
    assert manager.can_allocate([3], 1) is AllocStatus.LATER  # the reference says NEVER
    assert VllmV0Manager(config).can_allocate([3], 1) is AllocStatus.OK


@needs(sources.VLLM_V0)
def test_vllm_v0_fails_midway() -> None:
    """Without its scheduler's ``can_allocate`` first, vLLM runs out halfway and keeps what it
    took; the switch refuses up front instead."""
    config = ManagerConfig(block_size=1, num_gpu_blocks=2, num_cpu_blocks=1, watermark=0.0)
    manager = VllmV0Manager(config)
    with pytest.raises(OutOfBlocksError):
        manager.allocate(1, [2], [3, 1, 4])
    assert manager.get_num_free_gpu_blocks() == 0
    careful = VllmV0Manager(config, Switches(refuse_up_front=True))
    with pytest.raises(OutOfBlocksError):
        careful.allocate(1, [2], [3, 1, 4])
    assert careful.get_num_free_gpu_blocks() == 2


@needs(sources.VLLM_V0)
def test_a_check_of_vllm_v0_finds_a_divergence_and_never_asks_what_it_lacks() -> None:
    lacks = VllmV0Manager.LACKS
    result = run_check(
        VllmV0Manager,
        "manager",
        steps=300,
        seed=1,
        trace_out=None,
        adapt_case=lambda case: lacking.without(case, lacks),
    )
    assert not result.passed
    assert result.record is not None
    assert not {op for op, _ in result.record.calls} & lacks


@needs(sources.VLLM_V1)
def test_vllm_v1_pool_is_vllm() -> None:
    pool = VllmV1Pool(PoolConfig(num_blocks=4, block_size=2, first_id=7))
    assert pool.num_free_blocks() == 3  # block 0 is v1's null block from the start
    first = pool.allocate_mutable()
    assert first == 8
    pool.append_tokens(first, Prefix(), [1, 2])
    second = pool.allocate_mutable()
    assert pool.append_tokens(second, Prefix(), [1, 2]) == second  # no dedup on promotion
    assert pool.allocate_immutable(Prefix(), [1, 2]) in (first, second)  # a hit
    with pytest.raises(UnsupportedError):
        pool.hit_rate()


@needs(sources.NANO_VLLM)
def test_nano_vllm_shares_across_extra_keys() -> None:
    """nano-vllm hashes no extra key: two tenants share a cached block (a safety defect)."""
    manager = NanoVllmManager(
        ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=1, enable_caching=True)
    )
    manager.allocate(1, [1], [5, 6, 7], ExtraKey(cache_salt="a"))
    manager.allocate(2, [2], [5, 6, 7], ExtraKey(cache_salt="b"))
    assert manager.get_block_table(1)[0] == manager.get_block_table(2)[0]
    assert manager.get_num_cached_tokens(2) == 2
    with pytest.raises(UnsupportedError):
        NanoVllmManager(ManagerConfig(2, 4, 1, sliding_window=2, enable_caching=True))


def test_the_runner_refuses_an_unknown_peer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--peer", "no-such-engine"]) == 2
    assert "unknown peer no-such-engine" in capsys.readouterr().err
    assert {peer.level for peer in PEERS} == {"manager", "pool"}


def test_without_refuses_what_is_not_an_operation() -> None:
    with pytest.raises(ValueError, match="not protocol operations"):
        lacking.without(object, {"teleport"})
