"""The defragmenter under each side's GPU ids (``specs/defragmenter.md``): the engine tells it
which tables changed after each call that changes them, and defragments; the two
defragmenters run in lockstep, with I4 after every step and I8 after every ``defragment()``.
A run draws one only in ``DefragmentingManagerLockstep``."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pagedkv.model_tests.machines.draws import BOOLEANS, sampled_list
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.kv_harness import gpu_tables, table_changes
from pagedkv.model_tests.machines.manager_base import ManagerMachineBase
from pagedkv.specs import invariants
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.types import Device

T = TypeVar("T")

TABLE_CHANGING = frozenset({"allocate", "append_slots", "fork", "free", "swap_out", "swap_in"})
"""The manager calls after which the engine tells the defragmenter of changed tables."""


class Defragmentation(ManagerMachineBase):
    """The defragmenters, told of every call that changes the GPU tables."""

    def both(self, call: ManagerCall[T]) -> T | PagedKVError:
        """The call, then the engine's ``update_state`` if it changed the tables."""
        made = not self.ended and call.name not in self.policy.unsupported
        outcome = super().both(call)
        if made and not self.ended and self.defrag is not None and call.name in TABLE_CHANGING:
            self.tell_defragmenters()
        return outcome

    def tell_defragmenters(self) -> None:
        """The engine's ``update_state``: the GPU tables that changed, and those that are gone."""
        assert self.model is not None
        held = self.model_kv.defrag_view()
        assert held is not None
        changed, finished = table_changes(held.tables, gpu_tables(self.views.model()))
        if changed or finished:
            for side in self.kv_sides():
                side.update_tables(changed, finished)

    @precondition(lambda self: getattr(self, "defrag", None) is not None)
    @rule(data=DATA)
    def defragment(self, data: st.DataObject) -> None:
        """``defragment()`` at any point; sometimes a request on the GPU finishes first (all its
        sequences freed), which is what leaves holes below live blocks in a serving engine."""
        assert self.model is not None
        view = self.views.model()
        on_gpu = [g for g, group in sorted(view.groups.items()) if group.device is Device.GPU]
        finishes = bool(on_gpu) and data.draw(BOOLEANS, label="a request finishes")
        if finishes:
            group_id = data.draw(sampled_list(on_gpu), label="finished group")
            for seq_id in self.ledger.members(group_id):
                self.both(calls.free(seq_id))
        self.run_defragmenters()

    def run_defragmenters(self) -> None:
        """The engine's ``defragment()``: each side's defragmenter decides, remaps and exchanges
        its KV; block ids and tables stay as they are, so every block's KV must still be found
        through ``resolve`` (I5), evictable cached blocks' included."""
        event("rule: defragment")
        outcomes = []
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            before = side.defrag_view()
            pairs = side.defragment()
            after = side.defrag_view()
            assert before is not None and after is not None
            problems = invariants.defragmentation(before, after, pairs)
            assert not problems, f"{name} defragmenter: " + "; ".join(problems)
            outcomes.append((pairs, after))
        pairs, after = outcomes[0]
        for pairs_other, after_other in outcomes[1:]:
            assert pairs_other == pairs, f"target exchanged {pairs_other}, the model {pairs}"
            assert after_other == after, "the target's defragmenter differs from the model's"
        event(f"outcome: defragmented, {'some' if pairs else 'no'} exchanges")
        assert self.model is not None
        evictable = self.views.model().gpu.evictable
        if any(after.backward[used] in evictable for used, _ in pairs):
            # the logical block that sat at the free id now sits where the used one was
            event("outcome: an evictable cached block's KV exchanged away")

    def defragmenters_agree(self) -> None:
        """I4 for each side's defragmenter: inverse tables, reserved ids in place, ref counts as
        the GPU tables hold; and the target's equals the model's (exact mode)."""
        if getattr(self, "defrag", None) is None or self.model is None:
            return
        if self.unchanged_since_passed("defragmenters"):
            return
        tables = gpu_tables(self.views.model())
        views = []
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            view = side.defrag_view()
            assert view is not None
            problems = invariants.defragmenter_state(view, tables)
            assert not problems, f"{name} defragmenter: " + "; ".join(problems)
            views.append(view)
        assert all(view == views[0] for view in views), "the defragmenters differ"
