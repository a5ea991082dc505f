"""The pool level's KV events (``specs/block_pool.md`` §9): what the reference and the optimized
pool publish, vLLM v1's own events beside the reference's, and the oracle's checks failing on
planted bugs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pagedkv.model_tests.corpus import pools as wrong
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.pool_event_ledger import SameEvents, events_hook
from pagedkv.model_tests.lockstep.pool_safety_session import PoolSafetySession
from pagedkv.model_tests.lockstep.pool_session import IsomorphicPoolSession
from pagedkv.model_tests.peers.vllm_v1_pool import VllmV1Pool
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError
from pagedkv.specs.policy import profile
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import BlockId, ExtraKey, PoolConfig

CONFIG = PoolConfig(num_blocks=3, block_size=2)
ROOT = Prefix(extra_key=ExtraKey(lora_id=7))
SECOND = ROOT.extend([1, 2])


def _block(answer: object) -> BlockId:
    assert isinstance(answer, int)
    return answer


@pytest.mark.parametrize("make", [ReferenceBlockPool, OptimizedBlockPool])
def test_a_pool_publishes_what_its_index_gains_and_loses(make: Callable[[PoolConfig], Any]) -> None:
    pool = make(CONFIG)
    first = pool.allocate_immutable(ROOT, [1, 2])
    second = pool.append_tokens(pool.allocate_mutable(), SECOND, [3])
    assert pool.take_events() == [
        BlockStored((ROOT.child_hash([1, 2]),), None, (1, 2), 2, 7, 0)
    ]  # a partial block is not stored
    pool.append_tokens(second, SECOND, [4])
    assert pool.take_events() == [
        BlockStored((SECOND.child_hash([3, 4]),), ROOT.child_hash([1, 2]), (3, 4), 2, 7, 0)
    ]
    assert pool.allocate_immutable(ROOT, [1, 2]) == first  # a hit publishes nothing
    for block in (first, first, second):
        pool.free(block)
    assert pool.take_events() == []
    held = [pool.allocate_mutable() for _ in range(3)]  # evicts the tail, then the head
    assert pool.take_events() == [
        BlockRemoved((SECOND.child_hash([3, 4]),), 0),
        BlockRemoved((ROOT.child_hash([1, 2]),), 0),
    ]
    with pytest.raises(OutOfBlocksError):
        pool.allocate_mutable()  # out of blocks: publishes nothing
    assert pool.take_events() == []
    assert pool.reset_prefix_cache() is False
    for block in held:
        pool.free(block)
    assert pool.reset_prefix_cache() is True
    assert pool.take_events() == [AllBlocksCleared()]


def test_the_managers_pools_publish_nothing() -> None:
    pool = OptimizedBlockPool(CONFIG, publish_events=False)
    pool.allocate_immutable(ROOT, [1, 2])
    assert pool.take_events() == []


def test_vllm_v1s_own_events_are_the_references_under_its_profile() -> None:
    """Duplicates included: v1 keeps a second block under a cached hash, and stores and
    removes each on its own."""
    policy = profile("vllm-v1").policy
    config = PoolConfig(num_blocks=4, block_size=2)
    model, v1 = ReferenceBlockPool(config, policy), VllmV1Pool(config)
    session = IsomorphicPoolSession(model, v1)
    first = _block(session.call(calls.allocate_immutable(ROOT, [1, 2])))
    twin = _block(session.call(calls.allocate_mutable()))
    session.call(calls.append_tokens(twin, ROOT, [1, 2]))  # a second holder of the hash
    for block in (first, twin):
        session.call(calls.free(block))
    for _ in range(3):
        session.call(calls.allocate_mutable())  # evicts both holders
    assert model.take_events() == []  # the session drained and compared every call


def test_a_target_without_the_hook_is_checked_as_before() -> None:
    assert events_hook(wrong.MirroredPool(CONFIG)) is None
    session = IsomorphicPoolSession(ReferenceBlockPool(CONFIG), wrong.MirroredPool(CONFIG))
    session.call(calls.allocate_immutable(ROOT, [1, 2]))


def test_the_reference_comparison_fails_on_a_dropped_removal() -> None:
    model, target = ReferenceBlockPool(CONFIG), wrong.PoolEvictionSilent(CONFIG)
    session = IsomorphicPoolSession(model, target)
    session.call(calls.free(_block(session.call(calls.allocate_immutable(ROOT, [1, 2])))))
    session.call(calls.allocate_mutable())
    session.call(calls.allocate_mutable())
    with pytest.raises(Divergence) as caught:
        session.call(calls.allocate_mutable())
    assert caught.value.kind == "events"
    assert "BlockRemoved" in str(caught.value)


def _safety(target: Any, *script: Any) -> None:
    session = PoolSafetySession(target, target.config)
    blocks: list[Any] = []
    for step in script:
        call = step(blocks) if callable(step) else step
        blocks.append(session.call(call))


def _evicting_script() -> list[Any]:
    return [
        calls.allocate_immutable(ROOT, [1, 2]),
        lambda b: calls.free(b[0]),
        calls.allocate_mutable(),
        calls.allocate_mutable(),
        calls.allocate_mutable(),
    ]


def _partial_script() -> list[Any]:
    return [calls.allocate_mutable(), lambda b: calls.append_tokens(b[0], ROOT, [1])]


def _uncached_script() -> list[Any]:
    return [calls.allocate_immutable(ROOT, [1, 2])]


def _second_block_script() -> list[Any]:
    return [calls.allocate_immutable(ROOT, [1, 2]), calls.allocate_immutable(SECOND, [3, 4])]


@pytest.mark.parametrize(
    ("variant", "script", "config", "said"),
    [
        (wrong.PoolEvictionSilent, _evicting_script, CONFIG, "missing BlockRemoved"),
        (wrong.PoolStoresBeforeFull, _partial_script, CONFIG, "before the block was full"),
        (
            wrong.PoolStoresWithoutCaching,
            _uncached_script,
            PoolConfig(3, 2, enable_caching=False),
            "no longer caches it",
        ),
        (wrong.PoolStoredWithoutParent, _second_block_script, CONFIG, "the parent none"),
    ],
)
def test_the_safety_tier_folds_the_events_and_fails_on_a_planted_bug(
    variant: type[ReferenceBlockPool],
    script: Callable[[], list[Any]],
    config: PoolConfig,
    said: str,
) -> None:
    _safety(ReferenceBlockPool(config), *script())  # the correct pool passes the same calls
    with pytest.raises(Divergence) as caught:
        _safety(variant(config), *script())
    assert caught.value.kind == "events"
    assert said in str(caught.value)


def test_the_safety_tier_wants_a_clear_on_reset() -> None:
    class ResetSilent(ReferenceBlockPool):
        def take_events(self) -> list[KVEvent]:
            return [e for e in super().take_events() if not isinstance(e, AllBlocksCleared)]

    script = [
        calls.allocate_immutable(ROOT, [1, 2]),
        lambda b: calls.free(b[0]),
        calls.reset_prefix_cache(),
    ]
    _safety(ReferenceBlockPool(CONFIG), *script)
    with pytest.raises(Divergence, match="missing AllBlocksCleared"):
        _safety(ResetSilent(CONFIG), *script)


def test_same_events_names_both_streams() -> None:
    stored: list[KVEvent] = [BlockStored((b"\x01" * 32,), None, (1, 2), 2, None, 0)]
    with pytest.raises(Divergence, match=r"the model published .* the target \[\] \(none\)"):
        SameEvents(lambda: stored, lambda: []).check("allocate_mutable()")
