"""The soak's kept compact state of a manager whose code is all pagedkv's is rebuilt only where
the manager's record of its changes says (``optimized/changes.py``,
``model_tests/oracle/incremental_compact.py``). A change the record misses leaves the comparison
after each call looking at old rows; the checkpoint, which builds both states fresh and holds
the kept ones equal to them, is what catches it. A change that bypasses the record and is undone
before the checkpoint is seen by nobody, so a target with code of its own is never read through
the record (``own_code_only``)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pagedkv.model_tests.oracle import incremental_compact, soak, stand_in_guard
from pagedkv.model_tests.oracle.incremental_compact import IncrementalCompact, own_code_only
from pagedkv.model_tests.oracle.soak import Lockstep, StaleCache, Walk, random_config
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED, REFERENCE
from pagedkv.model_tests.tests.test_fast_soak import Twin
from pagedkv.model_tests.tests.test_soak_fresh_check import BumpsARefCount, OwnCode
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.types import Device, ManagerConfig

STEPS = 20_000
CONFIG = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4, enable_caching=True)
ACCESS = OptimizedBlockSpaceManager.access_all_blocks_in_seq


def unrecorded_access(self: OptimizedBlockSpaceManager, seq_id: int, now: float) -> None:
    """A planted bug of the record: the access is made, and not recorded."""
    changes, self._changes = self._changes, None
    try:
        ACCESS(self, seq_id, now)
    finally:
        self._changes = changes


@pytest.fixture
def record_misses_accesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OptimizedBlockSpaceManager, "access_all_blocks_in_seq", unrecorded_access)
    monkeypatch.setattr(stand_in_guard, "LOADED", stand_in_guard.take_down())  # pagedkv's code


def test_the_comparison_after_the_call_misses_it_and_the_checkpoint_does_not(
    record_misses_accesses: None,
) -> None:
    side = Lockstep(OptimizedBlockSpaceManager, CONFIG, True, REFERENCE, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.access_all_blocks_in_seq(1, 5.0))
    assert side.target_compact is not None
    kept, fresh = side.target_compact(), side.target.compact()
    assert kept != fresh and kept.gpu.last_accessed != fresh.gpu.last_accessed
    with pytest.raises(StaleCache, match="the target's kept compact state is stale"):
        side.check_state("at the checkpoint")


PAIRS = [(OptimizedBlockSpaceManager, REFERENCE), (Twin, OPTIMIZED)]
"""The two soaks that read a kept state through the record: the optimized manager against the
reference, and a subclass without code of its own against the optimized stand-in."""


@pytest.mark.parametrize(("target", "model"), PAIRS)
def test_a_change_the_record_missed_is_pagedkvs_bug_never_a_pass(
    record_misses_accesses: None, target: type[OptimizedBlockSpaceManager], model: object
) -> None:
    """Every state agrees (the accesses were made), but what was compared after the calls was
    not the state: an ERROR (exit 2 from the command line), not a PASS."""
    result = soak.soak(target, STEPS, 1, exact=True, model=model)  # type: ignore[arg-type]
    assert result.stale, "the planted record bug went unnoticed"
    assert result.failure is None and not result.passed
    assert result.own_bug is not None and "missed a change" in result.own_bug


def test_without_the_checkpoints_fresh_look_the_soak_would_pass(
    record_misses_accesses: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Lockstep, "fresh_check", lambda self, when: None)
    for target, model in PAIRS:
        result = soak.soak(target, STEPS, 1, exact=True, model=model)
        assert result.passed and not result.stale, (result.failure, result.own_bug)


def test_a_target_with_code_of_its_own_is_not_read_through_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``BumpsARefCount`` corrupts a ref count for one call, behind the record's back. Read as
    it is, the soak finds it at the call. Read through the record, the comparisons after the
    calls never see it: only a checkpoint that happens to fall right after the corrupting
    call does (a checkpoint one call later sees nothing), thousands of calls later."""
    found = soak.soak(BumpsARefCount, STEPS, 1, exact=True, model=OPTIMIZED)
    assert not found.passed and found.confirmed and "ref_count" in (found.failure or "")
    assert not found.stale
    monkeypatch.setattr(incremental_compact, "own_code_only", lambda manager: True)
    late = soak.soak(BumpsARefCount, STEPS, 1, exact=True, model=OPTIMIZED)
    assert late.passed or late.stale, late.failure
    assert late.steps > 10 * found.steps, (late.steps, found.steps)


class OwnPool(OptimizedBlockPool):
    pass


def test_own_code_only() -> None:
    assert own_code_only(OptimizedBlockSpaceManager(CONFIG))
    assert own_code_only(Twin(CONFIG))
    assert not own_code_only(OwnCode(CONFIG))
    assert not own_code_only(BumpsARefCount(CONFIG))
    patched = OptimizedBlockSpaceManager(CONFIG)
    patched.free = lambda seq_id: None  # type: ignore[method-assign]
    assert not own_code_only(patched)
    other_pool = OptimizedBlockSpaceManager(CONFIG)
    other_pool._cpu = OwnPool(CONFIG.pool_config(Device.CPU), publish_events=False)
    assert not own_code_only(other_pool)
    own_tables = Twin(CONFIG)  # a factory's container, whose code runs at every insertion
    own_tables._tables = OwnTables()
    assert not own_code_only(own_tables)
    own_free_list = OptimizedBlockSpaceManager(CONFIG)
    own_free_list._gpu._tokens = OwnList(own_free_list._gpu._tokens)
    assert not own_code_only(own_free_list)


class OwnTables(dict[int, Any]):
    """A dict of the tables with code of its own (the tryout's changed a token behind the record's
    back at an insertion, and undid it at the next: a PASS through the record)."""


class OwnList(list[Any]):
    pass


@pytest.mark.parametrize("seed", [0, 1])
def test_the_kept_state_is_the_fresh_one_at_every_call(seed: int) -> None:
    """Through the record, and through the fingerprints (a reader whose record a later reader
    took over goes on that way)."""
    rng = random.Random(seed)
    for _ in range(4):
        side = Lockstep(OptimizedBlockSpaceManager, random_config(rng), True)
        walk = Walk(rng, side)
        side.begin()
        detached = IncrementalCompact(side.target)
        recorded = IncrementalCompact(side.target)
        assert detached.changes is not None and detached.changes.detached
        while len(side.calls) < 400:
            walk.step()
            fresh = side.target.compact()
            assert recorded() == fresh
            assert detached() == fresh
