"""The real peers' adapters (``model_tests/peers/``), over the engines' own files in ``.peers/``.

Skipped when a peer's files are not fetched (``make peers-fetch``; ``make setup`` fetches them),
and failed under ``CI=true``: CI must run them. ``make peers`` is the full check. Each test
pins one behaviour of the engine as the adapter shows it (``specs/peers.md``), so an adapter that
stopped being faithful, or a loader that stopped loading, fails here.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from pagedkv.model_tests.lockstep.show import show_error
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.check import run_check
from pagedkv.model_tests.oracle.known import Finding
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.nano_vllm_manager import NanoVllmManager
from pagedkv.model_tests.peers.run import PEERS, SGLANG_PROFILE, Peer, main
from pagedkv.model_tests.peers.vllm_v0_manager import Switches, VllmV0Manager
from pagedkv.model_tests.peers.vllm_v0_pool import VllmV0Pool
from pagedkv.model_tests.peers.vllm_v1_pool import VllmV1Pool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import (
    OutOfBlocksError,
    UnknownSequenceError,
    UnsupportedError,
)
from pagedkv.specs.operations import OPERATIONS
from pagedkv.specs.policy import profile
from pagedkv.specs.request_types import RequestConfig
from pagedkv.specs.types import AllocStatus, ExtraKey, ManagerConfig, PoolConfig

BAD = "not an argument"
"""An argument no operation accepts: an operation that is there refuses it, one that is not
refuses the call before it reads it."""


def require(*needed: sources.Source) -> None:
    """Skip a test whose peer files are not fetched; under ``CI=true`` fail it: CI must run
    the real peers (``make setup`` fetches them)."""
    missing = [source.name for source in needed if not source.fetched]
    if not missing:
        return
    reason = f"{', '.join(missing)} not fetched (make peers-fetch)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-peer tests, but {reason}: make setup fetches them")
    pytest.skip(reason)


Test = TypeVar("Test", bound=Callable[..., None])


def needs(source: sources.Source) -> Callable[[Test], Test]:
    def decorate(test: Test) -> Test:
        @functools.wraps(test)
        def checked(*args: Any, **kwargs: Any) -> None:
            require(source)
            test(*args, **kwargs)

        return cast(Test, checked)

    return decorate


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
def test_a_check_of_vllm_v0_under_its_profile_never_asks_what_it_lacks() -> None:
    chosen = profile("vllm-v0")
    result = run_check(VllmV0Manager, "manager", steps=300, seed=1, trace_out=None, profile=chosen)
    assert result.record is not None or result.passed
    calls = {op for op, _ in result.record.calls} if result.record is not None else set()
    assert not calls & chosen.policy.unsupported


@pytest.mark.parametrize("peer", PEERS, ids=lambda peer: peer.name)
def test_each_peers_profile_names_what_its_adapter_lacks(peer: Peer) -> None:
    """The operations the profile leaves out are exactly those the adapter refuses outright."""
    require(peer.source)
    if peer.level not in OPERATIONS:
        pytest.skip(f"the oracle has no {peer.level} level yet (specs/operations.py)")
    configs: dict[str, Any] = {
        "manager": ManagerConfig(
            block_size=2, num_gpu_blocks=4, num_cpu_blocks=2, enable_caching=True
        ),
        "pool": PoolConfig(num_blocks=4, block_size=2),
        "request": RequestConfig(num_blocks=4, block_size=2),
    }
    config = configs[peer.level]
    try:
        target = peer.factory()(config)
    except UnsupportedError:  # SGLang's token allocator: page size 1 only
        target = peer.factory()(RequestConfig(num_blocks=4, block_size=1))
    refused = set()
    for name, operation in OPERATIONS[peer.level].items():
        try:
            getattr(target, name)(*[BAD] * operation.min_args)
        except UnsupportedError:
            refused.add(name)
        except Exception:
            pass  # it looked at the (nonsense) arguments: it has the operation
    assert refused == set(profile(peer.profile).policy.unsupported) & set(OPERATIONS[peer.level])


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
    assert {peer.level for peer in PEERS} == {"manager", "pool", "request"}


def test_the_runner_refuses_a_bad_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--policy", "no_such_option=1"]) == 2
    assert "unknown policy option 'no_such_option'" in capsys.readouterr().err
    assert main(["check", "--policy", "atomic"]) == 2
    assert "--policy takes name=value" in capsys.readouterr().err
    assert [peer.profile for peer in PEERS] == [
        "vllm-v0",
        "vllm-v0",
        "vllm-v1",
        "vllm-v1",
        "nano-vllm",
        "nano-vllm-upstream",
        SGLANG_PROFILE,
        SGLANG_PROFILE,
        SGLANG_PROFILE,
    ]


def test_the_runner_refuses_a_bad_group_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--peer", "vllm-0.33.0-manager", "--groups", "full,ring"]) == 2
    assert "unknown group layout ring (known: full, window, hybrid)" in capsys.readouterr().err


@needs(sources.VLLM_V1)
def test_the_runner_checks_a_request_peer_once_per_group_layout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each layout is its own row and trace: at seed 1 the window row shows D1 (a one-token
    request whose block the window does not keep: a BlockStored of no block), which a check
    drawing the layout per run missed in 2000 calls (specs/peers.md); full attention has no D1."""
    argv = ["check", "--peer", "vllm-0.33.0-manager", "--seed", "1", "--steps", "400"]
    assert main([*argv, "--groups", "window,full", "--traces", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {tuple(line.split()[2:5]) for line in out.splitlines() if line.startswith("vllm-")}
    assert ("vllm-v1", "full", "pass") in rows
    assert ("vllm-v1", "window", "FAIL") in rows
    assert ("safety:vllm-v1", "full", "pass") in rows
    assert "names no block" in out
    assert (tmp_path / "vllm-0.33.0-manager.profile.window.jsonl").exists()
    assert not list(tmp_path.glob("*hybrid*"))


@needs(sources.NANO_VLLM)
def test_nano_vllm_steps_past_its_known_defect(tmp_path: Path) -> None:
    """With its known-differences file, nano-vllm's search counts the runs that end on D6 and
    goes on past them; every other run passes (specs/peers.md: nothing else was found)."""
    peer = next(p for p in PEERS if p.name == "nano-vllm-manager")
    result = run_check(
        peer.factory(),
        peer.level,
        steps=600,
        seed=0,
        trace_out=tmp_path / "nano.jsonl",
        profile=profile(f"safety:{peer.profile}"),
        known=load_known(peer.known_file, peer.level),
    )
    assert result.passed, result.message
    assert result.stepped is not None and set(result.stepped.runs) == {"D6"}
    assert "under different extra keys" in result.stepped.messages["D6"]
    assert result.stepped.traces["D6"].exists()


def test_the_runner_refuses_a_bad_known_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    require(*(peer.source for peer in PEERS))
    bad = tmp_path / "bad.toml"
    bad.write_text("[[difference]]\nname = 'x'\n")
    assert main(["check", "--known", str(bad)]) == 2
    assert "operation is missing" in capsys.readouterr().err


PAST = Switches(
    hash_extra_key=True, never_without_null=True, no_window_cap=True, forget_cpu_access=True
)
"""vLLM 0.6.3 with its switched defects (D1, D2, D4, D8) papered over: what lies behind them."""


@needs(sources.VLLM_V0)
def test_vllm_v0_d3_can_swap_out_ignores_lookahead_blocks() -> None:
    """D3 (vllm-project/vllm#8824): ``_can_swap`` counts full blocks only, so empty lookahead
    blocks are left out: OK, then the swap runs out of CPU blocks (a broken promise)."""
    manager = VllmV0Manager(ManagerConfig(2, 6, 3, 0.0, enable_caching=True), PAST)
    manager.allocate(1, [2, 3], [3, 1])
    manager.fork(2, 4)
    for seq_id in (2, 3, 4):
        manager.append_slots(seq_id, [], 1)
    assert manager.can_swap_out(1) is AllocStatus.OK
    with pytest.raises(OutOfBlocksError):
        manager.swap_out(1)


@needs(sources.VLLM_V0)
def test_vllm_v0_d7_can_append_slots_forgets_the_null_block() -> None:
    """D7: the first windowed append takes the null block, which ``can_append_slots`` does not
    count: yes, then the append runs out."""
    manager = VllmV0Manager(ManagerConfig(1, 2, 1, 0.0, sliding_window=1), PAST)
    manager.allocate(1, [2], [3])
    assert manager.can_append_slots(1, 1, 0) is True
    with pytest.raises(OutOfBlocksError):
        manager.append_slots(2, [1], 0)


@needs(sources.VLLM_V0)
def test_vllm_v0_d9_fork_after_a_window_release_recurses() -> None:
    """D9: released entries point at the one null block object, whose ``prev_block`` links make
    a cycle: ``fork`` walks it forever."""
    manager = VllmV0Manager(ManagerConfig(1, 8, 8, 0.0, sliding_window=1), PAST)
    manager.allocate(1, [2], [3, 1, 4, 1, 5])
    manager.append_slots(2, [9], 0)
    with pytest.raises(RecursionError):
        manager.fork(2, 3)


@needs(sources.VLLM_V0)
def test_vllm_v0_d11_swapping_out_a_table_with_the_null_block_fails() -> None:
    manager = VllmV0Manager(ManagerConfig(1, 8, 8, 0.0, sliding_window=1), PAST)
    manager.allocate(1, [2], [3, 1, 4, 1, 5])
    manager.append_slots(2, [9], 0)
    null = manager.get_null_block()
    assert null is not None and manager.get_block_table(2)[:2] == [null, null]
    with pytest.raises(ValueError, match="null block should not be modified"):
        manager.swap_out(1)


@needs(sources.VLLM_V0)
def test_vllm_v0_d12_fork_while_swapped_out_corrupts_ref_counts() -> None:
    """D12: a fork while the group is on the CPU, a swap in, and the next append asserts inside
    the ref counter (vLLM's scheduler forks running sequences only)."""
    manager = VllmV0Manager(ManagerConfig(2, 2, 1, 0.0, enable_caching=True), PAST)
    manager.allocate(1, [2], [3])
    manager.swap_out(1)
    manager.fork(2, 3)
    assert manager.swap_in(1) == [(2, 0), (2, 1)]  # one shared CPU block, two GPU blocks
    with pytest.raises(AssertionError):
        manager.append_slots(3, [1], 0)


@needs(sources.VLLM_V0)
def test_vllm_v0_d4_hands_a_request_another_tenants_kv() -> None:
    """D4 without two tables at once: a windowed sequence's released block stays cached, and a
    request under another extra key hits it; the safety tier reads its KV a step later and says
    whose it is (a known-differences class of D4 matches that sentence)."""
    config = ManagerConfig(4, 6, 1, 0.0, sliding_window=3, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2], [3], ExtraKey(lora_id=2))),
        *[("append_slots", (2, [token], 0)) for token in (1, 4, 1, 3, 1)],
        ("mark_blocks_as_computed", (1,)),
        ("allocate", (3, [4], [3, 1, 4, 1, 5], ExtraKey())),
        ("get_common_computed_block_ids", ([4],)),
    ]
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-manager")
    made = trace.trace_of_calls(
        "manager", config, calls, profile(f"safety:{peer.profile}").policy, safety=True
    )
    verdict = trace.replay(made, peer.factory())
    assert (verdict.status, verdict.step, verdict.kind) == ("divergence", 9, "kv"), (
        verdict.describe()
    )
    assert "computed under another extra key (ExtraKey(lora_id=2), here ExtraKey())" in (
        verdict.message
    )
    known = load_known(peer.known_file, peer.level)
    assert known.classify(Finding("get_common_computed_block_ids", verdict.parts, config)) == "D4"


@needs(sources.VLLM_V0)
def test_vllm_v0_d9_an_append_after_a_window_release_recurses() -> None:
    """D9's cycle of ``prev_block`` links, met by the content hash of an appended block (found
    stepping past D2 and D4); the report names the frame that recurses, not where the stack
    ran out."""
    config = ManagerConfig(1, 6, 1, 0.0, sliding_window=1, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2, 3], [3, 1, 4, 1])),
        ("append_slots", (3, [5], 0)),
    ]
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-manager")
    made = trace.trace_of_calls(
        "manager", config, calls, profile(f"safety:{peer.profile}").policy, safety=True
    )
    verdict = trace.replay(made, peer.factory())
    assert (verdict.status, verdict.step, verdict.kind) == ("divergence", 2, "untyped")
    assert "RecursionError(" in verdict.message and "in content_hash, " in verdict.message
    known = load_known(peer.known_file, peer.level)
    assert known.classify(Finding("append_slots", verdict.parts, config)) == "D9"


@needs(sources.VLLM_V0)
def test_vllm_v0_d9_a_full_block_without_a_hash_after_a_window_release() -> None:
    """D9's cycle again: the appended block reuses the released entry's object, so the
    sequence's later blocks link back to it and no block of the cycle has a hash; the next
    ``can_swap_out`` asserts on it (found stepping past D9's recursion)."""
    config = ManagerConfig(2, 6, 1, 0.0, sliding_window=1, enable_caching=True)
    manager = VllmV0Manager(config)
    manager.allocate(1, [2, 3, 4], [3, 1, 4, 1, 5, 9])
    manager.append_slots(4, [2], 0)
    with pytest.raises(AssertionError) as raised:
        manager.can_swap_out(1)
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-manager")
    known = load_known(peer.known_file, peer.level)
    message = f"can_swap_out(1): the target raised an untyped {show_error(raised.value)}"
    assert " in is_block_cached (assert block.content_hash is not None)" in message, message
    assert known.classify(Finding("can_swap_out", (("untyped", message),), config)) == "D9"


def replayed(config: Any, calls: list[tuple[str, tuple[Any, ...]]], tier: str) -> Any:
    """The verdict of vLLM 0.6.3's manager on ``calls``, under its profile or its safety tier."""
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-manager")
    chosen = profile(tier + peer.profile)
    made = trace.trace_of_calls("manager", config, calls, chosen.policy, safety=chosen.safety)
    return trace.replay(made, peer.factory())


@needs(sources.VLLM_V0)
def test_vllm_v0_takes_its_null_block_from_the_evictor_as_it_chooses() -> None:
    """The first windowed append takes the null block and then a block for the token, both
    evicted among equally old blocks: the session adopts the target's null block as a choice,
    as it adopts the blocks in tables (without that, it said the target put the wrong block)."""
    config = ManagerConfig(1, 7, 7, 0.0, sliding_window=1, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2, 3, 4], [3, 1])),
        *[
            ("allocate", (group, [group + 1], [token]))
            for group, token in ((5, 100), (7, 101), (11, 103), (13, 104))
        ],
        ("free", (12,)),
        ("free", (14,)),
        ("allocate", (25, [26], [105])),
        ("allocate", (27, [28], [106])),
        ("free", (28,)),
        ("append_slots", (2, [4], 0)),
    ]
    verdict = replayed(config, calls, "")
    assert verdict.status == "pass", verdict.describe()


@needs(sources.VLLM_V0)
def test_vllm_v0_keeps_a_frozen_computed_list_across_a_swap() -> None:
    """Policy ``computed_list_swap=kept``: vLLM's computed-blocks tracker outlives a swap, so a
    list that stopped at a gap before it still answers ``[]`` after the swap in."""
    config = ManagerConfig(4, 7, 6, 0.0, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (3, [4], [3, 1, 4, 1, 5])),
        ("get_common_computed_block_ids", ([4],)),
        ("swap_out", (3,)),
        ("swap_in", (3,)),
        ("get_common_computed_block_ids", ([4],)),
    ]
    verdict = replayed(config, calls, "")
    assert verdict.status == "pass", verdict.describe()


VLLM_V0_SHAPES: list[tuple[str, str, Any, list[tuple[str, tuple[Any, ...]]]]] = [
    (  # D13 at the manager level: a hit on a block not yet computed, then one from the evictor
        "D4-D13",
        "",
        ManagerConfig(1, 12, 6, 0.0, enable_caching=True),
        [
            ("allocate", (1, [2], [3])),
            ("append_slots", (2, [1], 0)),
            ("allocate", (3, [4], [3])),
            ("free", (2,)),
            ("allocate", (5, [6], [3, 1, 4])),
            ("get_common_computed_block_ids", ([6],)),
        ],
    ),
    (  # D1 answered by can_swap_in: NEVER judged against every GPU block
        "D1",
        "",
        ManagerConfig(4, 6, 4, 0.0, sliding_window=1),
        [
            ("allocate", (1, [2, 3], [3, 1, 4, 1, 5, 9, 2, 6])),
            ("swap_out", (1,)),
            ("can_swap_in", (1, 1)),
        ],
    ),
    (  # D7 promised by can_swap_in: the first windowed append's null block not counted
        "D7",
        "safety:",
        ManagerConfig(1, 4, 1, 0.0, sliding_window=1),
        [
            ("allocate", (1, [2], [3])),
            ("swap_out", (1,)),
            ("can_swap_in", (1, 3)),
            ("swap_in", (1,)),
            ("append_slots", (2, [], 3)),
        ],
    ),
    (  # D9: a fork after a window release meets a freed block object
        "D9",
        "safety:",
        ManagerConfig(3, 12, 4, 0.0, sliding_window=2, enable_caching=True),
        [
            ("allocate", (16, [17, 18], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3])),
            ("append_slots", (17, [5], 0)),
            ("allocate", (21, [22], [3])),
            ("free", (22,)),
            ("fork", (17, 23)),
        ],
    ),
    (  # D9 without caching: naive_block.py's fork
        "D9",
        "safety:",
        ManagerConfig(1, 8, 8, 0.0, sliding_window=1),
        [
            ("allocate", (1, [2], [3, 1, 4, 1, 5])),
            ("append_slots", (2, [9], 0)),
            ("allocate", (3, [4], [3])),
            ("free", (4,)),
            ("fork", (2, 5)),
        ],
    ),
    (  # D4 where the reference evicted the block vLLM hit: only the computed list shows it
        "D4-D13",
        "",
        ManagerConfig(1, 4, 2, 0.0, enable_caching=True),
        [
            ("allocate", (1, [2, 3, 4], [3])),
            ("free", (2,)),
            ("free", (3,)),
            ("free", (4,)),
            ("allocate", (17, [18], [3, 1, 4, 1], ExtraKey(cache_salt="s"))),
            ("get_common_computed_block_ids", ([18],)),
        ],
    ),
]


@pytest.mark.parametrize(
    ("defect", "tier", "config", "calls"), VLLM_V0_SHAPES, ids=[s[0] for s in VLLM_V0_SHAPES]
)
@needs(sources.VLLM_V0)
def test_vllm_v0_known_file_matches_each_shape(
    defect: str, tier: str, config: Any, calls: list[tuple[str, tuple[Any, ...]]]
) -> None:
    """Each shape of a defect the searches met (seeds 0-5) is a divergence of vLLM's, and its
    class in the known-differences file says which defect."""
    verdict = replayed(config, calls, tier)
    assert verdict.status == "divergence", verdict.describe()
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-manager")
    known = load_known(peer.known_file, peer.level)
    assert verdict.step is not None
    operation = calls[verdict.step - 1][0]
    assert known.classify(Finding(operation, verdict.parts, config)) == defect, verdict.message


def replay_peer(
    name: str, policy: Any, config: Any, calls: list[tuple[str, tuple[Any, ...]]]
) -> Any:
    """The verdict of peer ``name`` on ``calls`` under ``policy`` (the comparison tier)."""
    peer = next(p for p in PEERS if p.name == name)
    made = trace.trace_of_calls(peer.level, config, calls, policy)
    return trace.replay(made, peer.factory())


@needs(sources.NANO_VLLM)
def test_upstream_nano_vllm_keeps_one_free_list() -> None:
    """Upstream nano-vllm keeps a freed block's hash and takes blocks from one first-in
    first-out list, cached or not: a cached block given back before a blank one is taken first.
    Its profile says so; the fork's profile (nothing cached once freed) and release order (a
    blank block before any cached one) each fail it."""
    config = ManagerConfig(block_size=2, num_gpu_blocks=3, num_cpu_blocks=1, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2], [1, 2])),
        ("allocate", (3, [4], [5])),
        ("free", (2,)),
        ("free", (4,)),
        ("allocate", (5, [6], [7, 8])),
        ("allocate", (7, [8], [9, 9])),
        ("allocate", (9, [10], [1, 2])),
        ("get_num_cached_tokens", (10,)),
    ]
    upstream = profile("nano-vllm-upstream").policy
    verdict = replay_peer("nano-vllm-upstream-manager", upstream, config, calls)
    assert verdict.status == "pass", verdict.describe()
    again = [*calls[:1], ("free", (2,)), *calls[-2:]]  # the prompt again, once it was freed
    assert replay_peer("nano-vllm-upstream-manager", upstream, config, again).status == "pass"
    fork_profile = profile("nano-vllm").policy
    failed = replay_peer("nano-vllm-upstream-manager", fork_profile, config, again)
    assert (failed.status, failed.step) == ("divergence", 4), failed.describe()
    release_order = replace(upstream, eviction="release_order")
    failed = replay_peer("nano-vllm-upstream-manager", release_order, config, calls)
    assert (failed.status, failed.step) == ("divergence", 6), failed.describe()


@needs(sources.VLLM_V0)
def test_vllm_v0_pool_is_vllm() -> None:
    """vLLM 0.6.3's allocator: a hit on a cached first block, copy-on-write of a shared block
    before an append, and the dedup of a block an append fills (copy first, then dedup)."""
    pool = VllmV0Pool(PoolConfig(num_blocks=4, block_size=2, first_id=3))
    first = pool.allocate_immutable(Prefix(), [1, 2])
    assert pool.allocate_immutable(Prefix(), [1, 2]) == first  # a hit
    pool.free(first)
    mutable = pool.allocate_mutable()
    pool.append_tokens(mutable, Prefix(), [1])
    pool.fork([mutable])
    copied = pool.append_tokens(mutable, Prefix(), [2])  # shared: copied, then filled: dedup
    assert copied == first and pool.clear_copy_on_writes() == [(mutable, 5)]
    with pytest.raises(UnsupportedError):
        pool.reset_prefix_cache()


@needs(sources.VLLM_V0)
def test_vllm_v0_pool_copy_on_write_out_of_blocks_ends_the_run() -> None:
    """vLLM's ``cow_block_if_not_appendable`` gives back the source id before it finds no block:
    a later ``free`` of the source asserts. Under ``atomic=false`` the pool-level session ends
    the run at the failed call (before, the run went on to that ``free``)."""
    config = PoolConfig(num_blocks=1, block_size=1)
    pool = VllmV0Pool(config)
    block = pool.allocate_mutable()
    pool.fork([block])
    with pytest.raises(OutOfBlocksError):
        pool.cow_if_not_appendable(block)
    with pytest.raises(AssertionError):
        pool.free(block)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate_mutable", ()),
        ("fork", ([0],)),
        ("cow_if_not_appendable", (0,)),
        ("free", (0,)),
    ]
    verdict = replay_peer("vllm-0.6.3-pool", profile("vllm-v0").policy, config, calls)
    assert verdict.status == "pass", verdict.describe()
    atomic = replace(profile("vllm-v0").policy, atomic=True)
    failed = replay_peer("vllm-0.6.3-pool", atomic, config, calls)
    assert (failed.status, failed.step, failed.kind) == ("divergence", 4, "untyped"), (
        failed.describe()
    )


VLLM_V0_POOL_SHAPES: list[tuple[str, str, list[tuple[str, tuple[Any, ...]]]]] = [
    (  # D4 under the profile: a first block under an extra key hits another key's block
        "D4",
        "",
        [
            ("allocate_immutable", (Prefix(), [0])),
            ("allocate_immutable", (Prefix(extra_key=ExtraKey(lora_id=1)), [0])),
        ],
    ),
    (  # D4 under the safety tier: one block held under two extra keys
        "D4",
        "safety:",
        [
            ("allocate_immutable", (Prefix(), [0])),
            ("allocate_immutable", (Prefix(extra_key=ExtraKey(lora_id=1)), [0])),
        ],
    ),
    (  # D13: a computed block past one that is not, answered as the computed prefix
        "D13",
        "",
        [
            ("allocate_mutable", ()),
            ("allocate_immutable", (Prefix(), [0])),
            ("allocate_immutable", (Prefix().extend([0]), [1])),
            ("free", (2,)),
            ("allocate_immutable", (Prefix().extend([0]), [1])),
            ("allocate_immutable", (Prefix().extend([0]).extend([1]), [1])),
            ("common_computed_prefix", ([[0, 2, 3]],)),
        ],
    ),
]


@pytest.mark.parametrize(
    ("defect", "tier", "calls"), VLLM_V0_POOL_SHAPES, ids=[s[0] + s[1] for s in VLLM_V0_POOL_SHAPES]
)
@needs(sources.VLLM_V0)
def test_vllm_v0_pool_known_file_matches_each_shape(
    defect: str, tier: str, calls: list[tuple[str, tuple[Any, ...]]]
) -> None:
    config = PoolConfig(num_blocks=7, block_size=1)
    peer = next(p for p in PEERS if p.name == "vllm-0.6.3-pool")
    chosen = profile(tier + peer.profile)
    made = trace.trace_of_calls("pool", config, calls, chosen.policy, safety=chosen.safety)
    verdict = trace.replay(made, peer.factory())
    assert verdict.status == "divergence", verdict.describe()
    known = load_known(peer.known_file, peer.level)
    assert verdict.step is not None
    operation = calls[verdict.step - 1][0]
    assert known.classify(Finding(operation, verdict.parts, config)) == defect, verdict.message


@needs(sources.NANO_VLLM)
def test_upstream_nano_vllm_d6_shows_as_cached_tokens() -> None:
    """D6 where the reference evicted the very block upstream nano-vllm took as a hit under
    another extra key: the tables agree up to renaming, the cached token count differs, and the
    known-differences file classes it D6 (found at seed 0 with 2000 calls)."""
    config = ManagerConfig(block_size=4, num_gpu_blocks=10, num_cpu_blocks=1, enable_caching=True)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate", (1, [2], [3, 1, 4, 1, 5, 9])),
        ("free", (2,)),
        *[("allocate", (3 + 2 * i, [4 + 2 * i], [100 + i] * 3)) for i in range(7)],
        ("allocate", (17, [18], [3, 1, 4, 1, 5, 9, 2, 6, 5], ExtraKey(lora_id=2))),
        ("get_num_cached_tokens", (18,)),
    ]
    peer = next(p for p in PEERS if p.name == "nano-vllm-upstream-manager")
    verdict = replay_peer(peer.name, profile(peer.profile).policy, config, calls)
    assert (verdict.status, verdict.step) == ("divergence", 11), verdict.describe()
    known = load_known(peer.known_file, peer.level)
    assert known.classify(Finding("get_num_cached_tokens", verdict.parts, config)) == "D6"


def test_a_missing_peer_says_how_to_fetch_it_from_an_installed_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said only ``make peers-fetch``, which a wheel's user has no Makefile for."""
    monkeypatch.setenv("PAGEDKV_PEERS_CACHE", str(tmp_path))
    with pytest.raises(sources.PeerSourceError) as raised:
        sources.load(sources.VLLM_V1, {}, ["a.module.never.loaded"])
    assert "python -m pagedkv.model_tests.peers.run fetch" in str(raised.value)
