"""The compact state (``specs/compact_state.py``) is a faster route to the view comparison's
verdict, never another verdict: ``view_of_compact`` undoes ``compact_manager`` on every view
the soak's walks reach (so equal compact states mean equal views), the optimized manager's own
``compact`` is ``compact_manager`` of its view at every step, and a corruption the views show
is a compact difference too."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import soak_model
from pagedkv.model_tests.oracle.incremental_compact import IncrementalCompact
from pagedkv.model_tests.oracle.soak import Lockstep, Walk, random_config, soak
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.pool_state import to_view
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.compact_state import compact_manager, compact_pool, view_of_compact
from pagedkv.specs.pool_view import BLANK
from pagedkv.specs.types import Device, ExtraKey


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compact_loses_nothing_and_the_optimized_compact_is_its_views(seed: int) -> None:
    """... and the reference's, rebuilt from the parts that changed (``FrozenCompact``), is its
    view's at every step too (shown failing with the pools' rebuild left out), as the optimized
    manager's kept between calls (``IncrementalCompact``, from its record of changes) is its own
    fresh one (shown failing with a fork left out of the record; ``test_soak_record.py`` holds
    the fingerprint route to the same, shown failing with the ref counts left out of a pool's
    fingerprint)."""
    rng = random.Random(seed)
    for _ in range(6):
        side = Lockstep(OptimizedBlockSpaceManager, random_config(rng), True)
        walk = Walk(rng, side)
        side.begin()
        kept = IncrementalCompact(side.target)
        while len(side.calls) < 400:
            walk.step()
            assert kept() == side.target.compact()
            for manager in (side.model, side.target):
                view = manager.view()
                assert view_of_compact(compact_manager(view)).comparable() == view.comparable()
            assert side.target.compact() == compact_manager(side.target.view())
            assert compact_manager(side.model.view()) == side.target.compact()
            assert soak_model.REFERENCE.compact(side.model) == compact_manager(side.model.view())


@pytest.mark.parametrize("seed", [0, 1])
def test_the_references_pool_read_from_its_frozen_state_is_its_views(seed: int) -> None:
    """``soak_model.compact_of_state`` (the reference's pool read without its view) is
    ``compact_pool`` of the view, on both pools after every call of random walks (shown failing
    with the free and evictable ids swapped); a state whose blocks are not its configuration's
    ids is refused as ``compact_pool`` refuses it."""
    rng = random.Random(seed)
    for _ in range(4):
        side = Lockstep(OptimizedBlockSpaceManager, random_config(rng), True)
        walk = Walk(rng, side)
        side.begin()
        while len(side.calls) < 300:
            walk.step()
            for state in (side.model.state.gpu, side.model.state.cpu):
                assert soak_model.compact_of_state(state) == compact_pool(to_view(state))
    state = side.model.state.gpu
    one_short = replace(state, blocks=state.blocks.delete(state.config.block_ids[-1]))
    with pytest.raises(ValueError, match="not its configuration's ids"):
        soak_model.compact_of_state(one_short)
    renamed = replace(one_short, blocks=one_short.blocks.set(10_000, BLANK))
    with pytest.raises(ValueError, match="not its configuration's ids"):
        soak_model.compact_of_state(renamed)


def test_a_corruption_the_views_show_the_compact_states_show() -> None:
    config = random_config(random.Random(3))
    target = OptimizedBlockSpaceManager(config)
    model = OptimizedBlockSpaceManager(config)
    assert model.compact() == target.compact()
    target._gpu._last_accessed[0] = 7.0  # a planted corruption of one field of one block
    assert model.view().comparable() != target.view().comparable()
    assert model.compact() != target.compact()


def test_the_soak_compares_the_whole_state_after_every_call() -> None:
    """A corruption that lasts one call at a time is caught by the compact comparison after
    each call, and described through the views."""

    class Flickers(OptimizedBlockSpaceManager):
        """Its GPU pool's hit count is one too high right after each ``get_num_free_gpu_blocks``
        call, and right again at the next call."""

        def _restore(self) -> None:
            if getattr(self, "flicker", False):
                self._gpu._hits -= 1
                self.flicker = False

        def get_num_free_gpu_blocks(self) -> int:
            self._restore()
            self._gpu._hits += 1
            self.flicker = True
            return super().get_num_free_gpu_blocks()

    for name in ("allocate", "append_slots", "free", "fork", "can_allocate", "can_append_slots"):
        # every other call the walk makes often puts the count back first
        original = getattr(OptimizedBlockSpaceManager, name)

        def restoring(self: Flickers, *args: object, _original: object = original) -> object:
            self._restore()
            return _original(self, *args)  # type: ignore[operator]

        setattr(Flickers, name, restoring)
    result = soak(Flickers, 4000, 1, exact=True, model=soak_model.OPTIMIZED)
    assert not result.passed and result.confirmed, (result.failure, result.own_bug)
    assert "hits" in (result.failure or ""), result.failure
    assert result.states_compared > 0


def test_a_walk_that_diverges_nowhere_passes() -> None:
    result = soak(OptimizedBlockSpaceManager, 3000, 4, exact=True)
    assert result.passed and result.states_compared == result.steps, result.failure
    with pytest.raises(Divergence):
        side = Lockstep(OptimizedBlockSpaceManager, random_config(random.Random(0)), True)
        side.target._gpu._hits += 1
        side.check_state("planted")


# --- a one-field corruption of any column, caught after the very call that made it ------------


class PlantsOnAQuery(OptimizedBlockSpaceManager):
    """The optimized manager, but its next ``get_num_free_gpu_blocks`` (a query: it changes
    nothing) first applies ``plant`` to its own state."""

    plant: Callable[[OptimizedBlockSpaceManager], None] | None = None

    def get_num_free_gpu_blocks(self) -> int:
        if self.plant is not None:
            planted, self.plant = self.plant, None
            planted(self)
        return super().get_num_free_gpu_blocks()


Manager = OptimizedBlockSpaceManager
Plant = Callable[[Manager], None]


def _used(m: Manager) -> int:
    """A held GPU block with tokens (its index), or StopIteration."""
    pool = m._gpu
    return next(i for i, count in enumerate(pool._ref_counts) if count and pool._tokens[i])


def _hashed(m: Manager) -> int:
    return next(i for i, found in enumerate(m._gpu._hashes) if found is not None)


def _free(m: Manager) -> int:
    """A free GPU block that no access kept aside covers."""
    shown, pool = m.compact().gpu.last_accessed, m._gpu
    return next(
        i
        for i, count in enumerate(pool._ref_counts)
        if not count and pool._hashes[i] is None and shown[i] == pool._last_accessed[i]
    )


def _table(m: Manager) -> Any:
    return next(t for t in m._tables.values() if len(t.tokens))


def _group(m: Manager) -> Any:
    return next(iter(m._groups.values()))


def _pair(m: Manager) -> Any:
    return next(g for g in m._groups.values() if len(g.seq_ids) > 1)


def _column(name: str, at: Callable[[Manager], int], change: Callable[[Any], Any]) -> Plant:
    """Entry ``at(m)`` of the GPU pool's column ``name``, changed."""

    def plant(m: Manager) -> None:
        column, index = getattr(m._gpu, name), at(m)
        column[index] = change(column[index])

    return plant


def _prefix(change_parent: bool) -> Plant:
    """A hashed block's parent hash or extra key (``optimized/block_prefixes.py``), changed."""

    def plant(m: Manager) -> None:
        prefixes, index = m._gpu._prefixes_of, _hashed(m)
        found = prefixes.get(index)
        assert found is not None
        parent, key = found
        if change_parent:
            parent = bytes(32) if parent != bytes(32) else b"\x01" * 32
        else:
            key = ExtraKey(lora_id=99)
        prefixes.set(index, parent, key)

    return plant


def _field(of: Callable[[Manager], Any], name: str, change: Callable[[Any], Any]) -> Plant:
    def plant(m: Manager) -> None:
        found = of(m)
        setattr(found, name, change(getattr(found, name)))

    return plant


def _swap_first_two(members: tuple[int, ...]) -> tuple[int, ...]:
    first, second, *rest = members
    return (second, first, *rest)


def _other_group(m: Manager) -> None:
    table = _table(m)
    table.group = next(g for g in m._groups.values() if g is not table.group)


def _flip_first_token(m: Manager) -> None:
    _table(m).tokens[0] ^= 1


def _reverse_cached(m: Manager) -> None:
    cached = m._gpu._cached
    if len(cached) < 2:
        raise StopIteration
    cached.update(zip(list(cached), reversed(list(cached.values())), strict=True))


def _other_device(device: Device) -> Device:
    return Device.CPU if device is Device.GPU else Device.GPU


CORRUPTIONS: dict[str, Plant] = {
    "ref_counts": _column("_ref_counts", _used, lambda count: count + 1),
    "tokens": _column("_tokens", _used, lambda packed: bytes([packed[0] ^ 1]) + packed[1:]),
    "hashes": _column("_hashes", _hashed, lambda _: None),
    "parents": _prefix(change_parent=True),
    "starts": _column("_starts", _hashed, lambda start: start + 1),
    "keys": _prefix(change_parent=False),
    "computed": _column("_computed", _used, lambda computed: not computed),
    "last_accessed": _column("_last_accessed", _free, lambda time: time + 1.0),
    "free": lambda m: m._gpu._free.push(m._gpu._first_id + _used(m)),
    "evictable": lambda m: m._gpu._evictor.add(m._gpu._first_id + _used(m), 0.0, 1),
    "cached": _reverse_cached,
    "pending_cows": lambda m: m._gpu.pending_cows.update({_used(m): (0, _used(m))}),
    "hits": _field(lambda m: m._gpu, "_hits", lambda hits: hits + 1),
    "queries": _field(lambda m: m._gpu, "_queries", lambda queries: queries + 1),
    "seq group": _other_group,
    "seq tokens": _flip_first_token,
    "seq blocks": _field(_table, "blocks", lambda blocks: (*blocks, 0)),
    "group seq_ids": _field(_pair, "seq_ids", _swap_first_two),
    "group device": _field(_group, "device", _other_device),
    "group extra_key": _field(_group, "extra_key", lambda _: ExtraKey(lora_id=99)),
    "group encoder_tokens": _field(_group, "encoder_tokens", lambda tokens: (*tokens, 5)),
    "group cross_blocks": _field(_group, "cross_blocks", lambda blocks: (*blocks, 0)),
    "null_block": _field(lambda m: m, "_null_block", lambda _: 99),
}
"""A one-field corruption of each column of the compact state (``specs/compact_state.py``),
planted in the optimized manager's own structures."""


def _can_plant(plant: Plant, model: Manager) -> bool:
    """Whether ``plant`` finds what it changes in ``model``'s state (tried on a deep copy: the
    target's state equals the model's)."""
    try:
        plant(copy.deepcopy(model))
    except (StopIteration, IndexError):
        return False
    return True


@pytest.mark.parametrize("column", list(CORRUPTIONS))
def test_a_corruption_of_any_column_is_caught_after_the_call_that_made_it(column: str) -> None:
    """The soak's own per-call comparison (``Lockstep.call`` with ``every_call``), the optimized
    manager standing in as the model, a target that corrupts one field inside a query. (Shown
    failing for every column with ``every_call=False``.)"""
    plant = CORRUPTIONS[column]
    rng = random.Random(0)
    for _ in range(100):  # walk until the state has what the corruption changes
        side = Lockstep(PlantsOnAQuery, random_config(rng), True, soak_model.OPTIMIZED, True)
        walk = Walk(rng, side)
        side.begin()
        while len(side.calls) < 200 and not _can_plant(plant, side.model):
            walk.step()
        if _can_plant(plant, side.model):
            break
    else:
        pytest.fail(f"no walk reached a state where {column} can be corrupted")
    side.target.plant = plant
    made = len(side.calls) + 1
    with pytest.raises(Divergence, match=r"after get_num_free_gpu_blocks\(\)"):
        side.call(calls.get_num_free_gpu_blocks())
    assert len(side.calls) == made and side.compared >= made
