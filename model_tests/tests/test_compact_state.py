"""The compact state (``specs/compact_state.py``) is a faster route to the view comparison's
verdict, never another verdict: ``view_of_compact`` undoes ``compact_manager`` on every view
the soak's walks reach (so equal compact states mean equal views), the optimized manager's own
``compact`` is ``compact_manager`` of its view at every step, and a corruption the views show
is a compact difference too."""

from __future__ import annotations

import random

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle import soak_model
from pagedkv.model_tests.oracle.soak import Lockstep, Walk, random_config, soak
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.compact_state import compact_manager, view_of_compact


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compact_loses_nothing_and_the_optimized_compact_is_its_views(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(6):
        side = Lockstep(OptimizedBlockSpaceManager, random_config(rng), True)
        walk = Walk(rng, side)
        side.begin()
        while len(side.calls) < 400:
            walk.step()
            for manager in (side.model, side.target):
                view = manager.view()
                assert view_of_compact(compact_manager(view)).comparable() == view.comparable()
            assert side.target.compact() == compact_manager(side.target.view())
            assert compact_manager(side.model.view()) == side.target.compact()


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
