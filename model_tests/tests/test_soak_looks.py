"""A subclass with code of its own soaked against the optimized stand-in: its state is read whole
after every call (``IncrementalCompact.looked``: the rows, and each pool's fingerprint), and the
model's reader, on the record route, fingerprints its pools too
(``IncrementalCompact.pair_with_looks``), so that the two states are compared with no pool's
columns built (``soak.Lockstep.same_looked``): the rows as they are, a pool of the optimized
class by its fingerprint. Each part of that comparison is shown able to see a difference at the
call, and a pool of another class is compared by the columns its own ``compact`` builds."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import soak
from pagedkv.model_tests.oracle.guard import guard
from pagedkv.model_tests.oracle.soak import Lockstep
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.compact_state import CompactPool
from pagedkv.specs.types import BlockId, ExtraKey, ManagerConfig

CONFIG = ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4, enable_caching=True)


class OwnCode(OptimizedBlockSpaceManager):
    """Code of its own that does what the optimized manager does."""

    def get_num_free_gpu_blocks(self) -> int:
        return super().get_num_free_gpu_blocks()


class OneMoreHit(OwnCode):
    """Built with a GPU hit count one too high: a pool that is not the model's."""

    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._gpu._hits += 1


class ChangesAToken(OwnCode):
    """Its query changes the last token of sequence 1 behind the record (it has none)."""

    def get_num_free_gpu_blocks(self) -> int:
        self._tables[1].tokens[-1] ^= 1
        return super().get_num_free_gpu_blocks()


class ChangesAGroup(OwnCode):
    """Its query changes group 1's extra key: only the groups' rows show it."""

    def get_num_free_gpu_blocks(self) -> int:
        self._groups[1].extra_key = ExtraKey(lora_id=9)
        return super().get_num_free_gpu_blocks()


def another_watermark(config: ManagerConfig) -> OwnCode:
    """The same pools, another configuration."""
    return OwnCode(replace(config, watermark=0.5))


class ShowsOneMoreHit(OptimizedBlockPool):
    """A pool of its own class whose columns show a hit its fingerprint does not."""

    def compact(self, untouched: Mapping[BlockId, tuple[int, float]] | None = None) -> CompactPool:
        found = super().compact(untouched)
        return found._replace(hits=found.hits + 1)


class OwnPools(OwnCode):
    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._gpu.__class__ = ShowsOneMoreHit


class TurnsItsPool(OwnCode):
    """Its pool becomes one of its own class at its query, after the soak paired its reader."""

    def get_num_free_gpu_blocks(self) -> int:
        self._gpu.__class__ = ShowsOneMoreHit
        return super().get_num_free_gpu_blocks()


def side_of(factory: Callable[[ManagerConfig], OwnCode]) -> Lockstep:
    side = Lockstep(factory, CONFIG, True, OPTIMIZED, every_call=True)
    side.begin()
    return side


def test_the_models_reader_is_paired_with_the_targets_looks_and_builds_no_columns() -> None:
    side = side_of(OwnCode)
    assert side.looks is not None and side.pair is None
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.call(calls.get_num_free_gpu_blocks())
    for reader in side.looks:
        assert all(looked is not None and looked.part is None for looked in reader.pools)
    side.check_state("at the checkpoint")  # the columns built from the fingerprints are fresh


def test_a_pool_that_is_not_the_models_is_seen_at_the_call() -> None:
    with pytest.raises(Divergence, match="hits"):
        side_of(OneMoreHit).call(calls.allocate(1, [1], [1, 2, 3]))


def test_a_row_changed_behind_the_record_is_seen_at_the_call() -> None:
    side = side_of(ChangesAToken)
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    with pytest.raises(Divergence, match=r"after get_num_free_gpu_blocks\(\): seqs"):
        side.call(calls.get_num_free_gpu_blocks())


def test_a_group_changed_behind_the_record_is_seen_at_the_call() -> None:
    side = side_of(ChangesAGroup)
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    with pytest.raises(Divergence, match=r"after get_num_free_gpu_blocks\(\): groups"):
        side.call(calls.get_num_free_gpu_blocks())


def test_another_configuration_is_seen_at_the_call() -> None:
    with pytest.raises(Divergence, match="after get_num_free_gpu_blocks"):
        side_of(another_watermark).call(calls.get_num_free_gpu_blocks())


def test_a_pool_of_another_class_is_compared_by_its_own_columns() -> None:
    """Its fingerprint is the model's pool's; its own ``compact`` is not. Built so, the target
    is not paired; made so after, its pool is not compared by fingerprint."""
    side = side_of(OwnPools)
    assert side.looks is None
    with pytest.raises(Divergence, match="hits"):
        side.call(calls.allocate(1, [1], [1, 2, 3]))
    side = side_of(TurnsItsPool)
    assert side.looks is not None
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    with pytest.raises(Divergence, match="hits"):
        side.call(calls.get_num_free_gpu_blocks())


class OwnList(list[bytes]):
    """A list with code of its own (none here): a pool holding one is not read by fingerprint."""


def a_list_of_its_own(config: ManagerConfig) -> OwnCode:
    manager = OwnCode(config)
    manager._gpu._tokens = OwnList(manager._gpu._tokens)
    return manager


def test_a_pool_holding_a_container_of_its_own_is_not_compared_by_fingerprint() -> None:
    side = side_of(a_list_of_its_own)
    assert side.looks is None and side.pair is None
    side.call(calls.allocate(1, [1], [1, 2, 3]))
    side.check_state("at the checkpoint")


class HangsWhenItsConfigIsRead(OwnCode):
    """Its configuration is its own code, which never returns once the soak has it."""

    ready = False

    @property
    def _config(self) -> ManagerConfig:
        if self.ready:
            time.sleep(30)
        config: ManagerConfig = self.__dict__["config_"]
        return config

    @_config.setter
    def _config(self, config: ManagerConfig) -> None:
        self.__dict__["config_"] = config


def hangs_when_its_config_is_read(config: ManagerConfig) -> OwnCode:
    manager = HangsWhenItsConfigIsRead(config)
    manager.ready = True
    return manager


def test_its_pools_are_looked_at_under_its_timeout() -> None:
    """Whether its pools may be read by fingerprint is asked of the target's structures (its
    configuration too), which may run its code: as one of its calls."""
    started = time.monotonic()
    result = soak.soak(
        guard(hangs_when_its_config_is_read, 0.5), 100, 1, exact=True, model=OPTIMIZED
    )
    assert not result.passed and result.hung, result.failure
    assert time.monotonic() - started < 10


def heap_in_another_order(config: ManagerConfig) -> OwnCode:
    """The same free blocks as the model's, in another valid heap order: another fingerprint,
    the same columns."""
    manager = OwnCode(config)
    heap = manager._gpu._free.heap
    heap[1], heap[2] = heap[2], heap[1]
    return manager


def test_pools_whose_fingerprints_differ_are_compared_by_their_columns() -> None:
    side = side_of(heap_in_another_order)
    side.call(calls.get_num_free_gpu_blocks())
    assert side.agreed is not None  # the compact states themselves were compared, and agreed
    assert soak.soak(heap_in_another_order, 2000, 1, exact=True, model=OPTIMIZED).passed


def test_a_soak_of_a_target_with_code_of_its_own_keeps_its_checkpoints_every_64_calls() -> None:
    result = soak.soak(OwnCode, 2000, 1, exact=True, model=OPTIMIZED)
    assert result.passed and not result.paired and result.checkpoints == 32, result.checkpoints
    assert result.states_compared == result.steps
