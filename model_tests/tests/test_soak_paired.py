"""Two optimized managers whose code is all pagedkv's (a subclass without code of its own
soaked against the optimized stand-in) are compared part by part after each call, a pool by its
fingerprint, its columns built only where two fingerprints differ and at each checkpoint
(``IncrementalCompact.pair``, ``soak.Lockstep.same_pair``, ``OptimizedBlockPool.compact_of``);
the checkpoint renders the views from the compact states it just built fresh
(``soak.Lockstep.same_views``). Each shortcut is shown unable to hide a difference."""

from __future__ import annotations

import random
from typing import TypeVar, cast

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence, run_call
from pagedkv.model_tests.oracle import soak, stand_in_guard
from pagedkv.model_tests.oracle.incremental_compact import Looked
from pagedkv.model_tests.oracle.soak import Lockstep, StaleCache, Walk, random_config
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED
from pagedkv.model_tests.tests.test_fast_soak import Twin
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.types import Device, ManagerConfig

T = TypeVar("T")

CONFIG = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4, enable_caching=True)


def one_more_hit(config: ManagerConfig) -> Twin:
    """A target built with a GPU hit count one too high: code all pagedkv's, state not the
    model's."""
    manager = Twin(config)
    manager._gpu._hits += 1
    return manager


FINGERPRINT = OptimizedBlockPool.fingerprint


def blind_to_hits(self: OptimizedBlockPool) -> tuple[object, ...]:
    """A planted staleness: the fingerprint with no hit count (0 in its place)."""
    found = FINGERPRINT(self)
    return (*found[:-2], 0, found[-1])


@pytest.fixture
def stale_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OptimizedBlockPool, "fingerprint", blind_to_hits)
    monkeypatch.setattr(stand_in_guard, "LOADED", stand_in_guard.take_down())  # pagedkv's code


def test_the_readers_are_paired_and_build_no_columns_after_a_call() -> None:
    side = Lockstep(Twin, CONFIG, True, OPTIMIZED, every_call=True)
    assert side.pair is not None
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    for reader in side.pair:
        assert all(looked is not None and looked.part is None for looked in reader.pools)
    assert side.agreed_parts is not None


def test_a_pool_that_is_not_the_models_is_seen_at_the_call() -> None:
    """The hit count is in the fingerprint: the first call's comparison sees the difference."""
    side = Lockstep(one_more_hit, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    with pytest.raises(Divergence, match="hits"):
        side.call(calls.allocate(1, [1], [1, 2, 3]))


def heap_in_another_order(config: ManagerConfig) -> Twin:
    """The same free blocks as the model's, in another valid heap order: another fingerprint,
    the same columns."""
    manager = Twin(config)
    heap = manager._gpu._free.heap
    heap[1], heap[2] = heap[2], heap[1]
    return manager


def test_pools_whose_fingerprints_differ_are_compared_by_their_columns() -> None:
    side = Lockstep(heap_in_another_order, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.get_num_free_gpu_blocks())
    assert side.agreed_parts is None and side.agreed is not None  # the compact states agreed
    assert soak.soak(heap_in_another_order, 2000, 1, exact=True, model=OPTIMIZED).passed


class BothRun(Lockstep):
    """Each call made on both sides, nothing compared: the readers alone are looked at."""

    def call(self, call: ManagerCall[T]) -> T | PagedKVError:
        self.calls.append((call.name, call.args))
        result, error = run_call(self.model, call, detach=False)
        run_call(self.target, call)
        return cast(T, result) if error is None else cast(PagedKVError, error)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_kept_state_is_the_fresh_one_at_every_call(seed: int) -> None:
    """Each paired reader's kept state, its pools' columns built from their fingerprints,
    equals its manager's built fresh after every call of random walks (the target's GPU pool
    not the model's, by a hit count)."""
    rng = random.Random(seed)
    for _ in range(4):
        side = BothRun(Twin, random_config(rng), True, OPTIMIZED, every_call=True)
        side.target._gpu._hits += 1  # before any read: a pool never the model's
        walk = Walk(rng, side)
        side.begin()
        assert side.pair is not None
        mine, theirs = side.pair
        while len(side.calls) < 400:
            walk.step()
            assert theirs() == side.target.compact()
            assert mine() == side.model.compact()
            for pool in side.target.pools():
                assert pool.compact_of(pool.fingerprint()) == pool.compact()


def test_a_difference_a_fingerprint_misses_is_found_at_the_checkpoint(
    stale_fingerprint: None,
) -> None:
    """A fingerprint blind to the hit count: the comparison after each call misses the
    target's extra hit. The checkpoint's fresh look does not: the target's kept state (its
    columns built from that fingerprint) is stale."""
    side = Lockstep(one_more_hit, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))  # no Divergence
    with pytest.raises(StaleCache, match="the target's kept compact state is stale"):
        side.check_state("at the checkpoint")


def test_the_soak_replays_it_fresh_and_reports_the_divergence(stale_fingerprint: None) -> None:
    result = soak.soak(one_more_hit, 3000, 1, exact=True, model=OPTIMIZED)
    assert result.stale and "kept compact state is stale" in result.stale[0], result.stale
    assert not result.passed and result.confirmed and "hits" in (result.failure or "")


def test_the_checkpoint_compares_the_fresh_states_before_it_renders_one_view() -> None:
    """Fresh states that differ with neither kept state stale (the target built unlike the
    model, and no call yet): the views of both are compared, and differ."""
    side = Lockstep(one_more_hit, CONFIG, True, OPTIMIZED, every_call=True)
    with pytest.raises(Divergence, match="hits"):
        side.check_state("before any call")


def test_a_view_set_on_the_instance_is_the_targets_view() -> None:
    """Its class's ``view`` renders the compact state, but not the one set on the instance:
    the checkpoint calls the target's own."""

    def claims_no_state(config: ManagerConfig) -> Twin:
        manager = Twin(config)
        manager.view = lambda: 42  # type: ignore[method-assign, assignment, return-value]
        return manager

    side = Lockstep(claims_no_state, CONFIG, True, OPTIMIZED, every_call=True)
    assert side.target_fresh is not None and not side.target_renders
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    with pytest.raises(Divergence, match="view\\(\\) returned 42, not a ManagerView"):
        side.check_state("at the checkpoint")


def test_a_change_on_one_side_only_is_seen_at_the_next_call() -> None:
    """The target frees a sequence behind the lockstep's back (its record has it): the next
    call, a query whose answer does not show it, finds the states apart."""
    side = Lockstep(Twin, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.allocate(2, [2], [1, 2]))
    side.target.free(2)
    with pytest.raises(Divergence, match=r"after get_num_free_cpu_blocks\(\): gpu block"):
        side.call(calls.get_num_free_cpu_blocks())


def test_two_pools_are_the_same_only_with_everything_compact_of_reads() -> None:
    pool = OptimizedBlockPool(CONFIG.pool_config(Device.GPU), publish_events=False)
    other = OptimizedBlockPool(
        ManagerConfig(block_size=3, num_gpu_blocks=8, num_cpu_blocks=4).pool_config(Device.GPU),
        publish_events=False,
    )
    fingerprint = pool.fingerprint()
    assert other.fingerprint() == fingerprint  # nothing held: the configurations differ only
    assert soak._same_pool(Looked(pool, fingerprint, {}, None), Looked(pool, fingerprint, {}, None))
    held = {1: (1, 2.0)}
    assert not soak._same_pool(
        Looked(pool, fingerprint, {}, None), Looked(pool, fingerprint, held, None)
    )
    assert not soak._same_pool(
        Looked(pool, fingerprint, {}, None), Looked(other, fingerprint, {}, None)
    )
    assert not soak._same_pool(
        Looked(pool, fingerprint, {}, None), Looked(pool, other.fingerprint()[1:], {}, None)
    )


def test_a_row_changed_on_one_side_only_is_seen_at_the_next_call() -> None:
    """A token of the target's table changed (and recorded), its pool left as it was: only the
    sequences' rows differ."""
    side = Lockstep(Twin, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.get_num_free_cpu_blocks())
    table = side.target._tables[1]
    table.tokens[-1] ^= 1
    assert side.target._changes is not None
    side.target._changes.seqs.add(1)
    with pytest.raises(Divergence, match=r"after get_num_free_cpu_blocks\(\): seqs"):
        side.call(calls.get_num_free_cpu_blocks())


def test_a_row_only_the_target_read_again_is_compared() -> None:
    """Both sides read sequence 1 again after an append; the target also reads sequence 2,
    whose tokens were changed behind the lockstep (and recorded): that row is compared too."""
    side = Lockstep(Twin, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.allocate(2, [2], [1, 2]))
    side.target._tables[2].tokens[-1] ^= 1
    assert side.target._changes is not None
    side.target._changes.seqs.add(2)
    with pytest.raises(Divergence, match=r"after append_slots\(1, \[4\], 0\): seqs"):
        side.call(calls.append_slots(1, [4]))


def test_rows_are_compared_by_the_ids_read_only_from_the_rows_found_equal() -> None:
    """``_same_rows``: only where each side's last update started from the rows last found
    equal are the ids read again all that is compared; else the whole rows."""
    agreed_mine, agreed_theirs = {1: "a", 2: "b"}, {1: "a", 2: "b"}
    mine, theirs = {1: "a", 2: "b", 3: "c"}, {1: "a", 2: "x", 3: "c"}
    read = {3}
    same_rows = soak._same_rows
    assert same_rows(
        mine, theirs, agreed_mine, agreed_theirs, (agreed_mine, read), (agreed_theirs, read)
    )
    assert not same_rows(
        mine, theirs, agreed_mine, agreed_theirs, (agreed_mine, read), (agreed_theirs, {2, 3})
    )
    assert not same_rows(mine, theirs, agreed_mine, agreed_theirs, (agreed_mine, read), ({}, read))
    assert not same_rows(
        mine, theirs, agreed_mine, agreed_theirs, ({}, read), (agreed_theirs, read)
    )
    assert same_rows(
        agreed_mine, agreed_theirs, agreed_mine, agreed_theirs, ({}, set()), ({}, set())
    )


def test_only_paired_readers_space_their_checkpoints_out() -> None:
    """Paired: at calls 64, 192, 448, 960, 1472 and 1984 of a 2,000-call episode, and at its
    end; else every 64 calls and at the end."""
    paired = soak.soak(Twin, 2000, 1, exact=True, model=OPTIMIZED)
    assert paired.passed and paired.paired and paired.checkpoints == 7, paired.checkpoints
    alone = soak.soak(OptimizedBlockSpaceManager, 2000, 1, exact=True)
    assert alone.passed and not alone.paired and alone.checkpoints == 32, alone.checkpoints


def test_a_view_changed_on_the_class_is_not_rendered_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkpoint renders a side's view itself only while the optimized manager's ``view``
    and ``compact`` are the ones pagedkv loaded, code and all."""
    manager = Twin(CONFIG)
    assert soak.renders_its_compact(manager)
    with monkeypatch.context() as patch:
        patch.setattr(OptimizedBlockSpaceManager, "view", lambda self: 42)
        assert not soak.renders_its_compact(manager)
    with monkeypatch.context() as patch:
        patch.setattr(soak.LOADED_VIEW, "__code__", (lambda self: 42).__code__)
        assert not soak.renders_its_compact(manager)
    with monkeypatch.context() as patch:
        patch.setattr(Twin, "compact", lambda self: None, raising=False)
        assert not soak.renders_its_compact(manager)
    assert soak.renders_its_compact(manager)
