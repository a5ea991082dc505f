"""The exhaustive small-scope check (``make exhaustive`` runs it longer): every step sequence up
to depth 3 over four tiny configurations, and proof that it finds a planted bug."""

from __future__ import annotations

import pytest

from pagedkv.model_tests.machines import explorer
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.types import ManagerConfig


@pytest.mark.parametrize("config", explorer.scopes("quick"), ids=explorer.describe)
def test_every_state_to_depth_three_agrees_and_keeps_the_invariants(config: ManagerConfig) -> None:
    figures = explorer.run(config, seconds=600, max_depth=3)
    assert figures.depth == 3
    assert figures.states > 40 and figures.transitions > figures.states


class IgnoresLookahead(OptimizedBlockSpaceManager):
    """A planted bug: ``can_append_slots`` forgets the lookahead slots."""

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        return super().can_append_slots(group_id, num_new_tokens, 0)


def test_a_planted_bug_is_found_with_the_steps_that_reach_it() -> None:
    config = ManagerConfig(1, 2, 2, 0.0, None, False)
    with pytest.raises(explorer.Finding) as found:
        explorer.run(config, seconds=600, max_depth=4, make_target=IgnoresLookahead)
    assert found.value.path[-1][0] == "append"
    assert "can_append_slots" in str(found.value)


def test_renaming_merges_states_that_exact_ids_keep_apart() -> None:
    config = ManagerConfig(1, 3, 2, 0.0, None, True)
    renamed = explorer.run(config, seconds=600, max_depth=3)
    exact = explorer.run(config, seconds=600, max_depth=3, renaming=False)
    assert renamed.states < exact.states
