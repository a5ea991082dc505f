"""The block pool lockstep machine: the reference and an implementation, step by step.

Steps act on live chains (a sequence's blocks, as a block table would hold them). Pools are small,
tokens few and chains tend to follow one shared template, so evictions, dedup and copy-on-write
happen in most runs. After every step the two pools must look the same (exact mode,
``specs/comparison.md``) and satisfy invariants I1-I3 of ``specs/invariants.md``; a step that
raises must leave both unchanged (I6).
"""

from __future__ import annotations

from typing import Any, TypeVar

from hypothesis.stateful import invariant

from pagedkv.model_tests.lockstep.calls import assert_same_state
from pagedkv.model_tests.machines.pool_chains import Chain, Mode
from pagedkv.model_tests.machines.pool_misuse import PoolMisuse
from pagedkv.model_tests.machines.pool_rules import PoolRules
from pagedkv.specs import invariants
from pagedkv.specs.policy import PAGEDKV, Policy

T = TypeVar("T")

__all__ = ["Chain", "Mode", "PoolLockstep", "lockstep_case"]


class PoolLockstep(PoolRules, PoolMisuse):
    """Subclass and set ``make_target`` to check another pool against the reference.

    One concern a file: ``pool_chains.py`` (what is drawn and held), ``pool_base.py`` (state,
    the call on both sides), ``pool_rules.py`` (the protocol's rules), ``pool_misuse.py``
    (calls that must fail); the invariants are here. Hypothesis collects the rules of every
    base class."""

    @invariant()
    def same_state(self) -> None:
        if self.model is not None and self.mode == "exact" and not self.ended:
            assert_same_state(self.views.model(), self.views.target(), "pool state")

    @invariant()
    def invariants_hold(self) -> None:
        if self.model is None:
            return  # the safety session checks its own after every call
        if self.ended:
            return  # the calls that would give back what the machine let go are not made
        held = self._held()
        if self.policy.pool_null_block:
            held[self.model.config.first_id] += 1  # the pool's own null block
        sides: list[tuple[str, Any]] = [("model", self.model)]
        if self.mode == "exact":
            sides.append(("target", self.target))
        view = self.views.model()  # exact mode: same_state holds the target's equal to it
        # the model's state is a frozen value a change replaces: on the state and holders they
        # last passed on, the view's invariants would pass again
        if self.passed_invariants is None or (
            self.passed_invariants[0] is not self.model.state or self.passed_invariants[1] != held
        ):
            problems = invariants.ref_counts(view, held) + invariants.pool_invariants(view)
            assert not problems, "model: " + "; ".join(problems)
            self.passed_invariants = (self.model.state, held)
        for name, side in sides:
            free_count = side.num_free_blocks()
            assert free_count == len(view.free) + len(view.evictable), f"{name}: free count"


def lockstep_case(
    factory: Any, *, mode: Mode = "exact", policy: Policy = PAGEDKV, contract: str = "any"
) -> type[PoolLockstep]:
    """A machine class checking ``factory``'s pools: against the reference under ``policy`` in
    exact or isomorphic mode (ids through a bijection, the target's allowed choices adopted),
    or against the safety tier alone (``mode="safety"``); under the ``scheduler`` contract, no
    call meant to fail."""
    return type(
        f"PoolLockstep_{getattr(factory, '__name__', 'target')}",
        (PoolLockstep,),
        {
            "make_target": staticmethod(factory),
            "mode": mode,
            "policy": policy,
            "contract": contract,
        },
    )
