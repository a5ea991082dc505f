"""The block space manager lockstep machine: the reference and an implementation, step by step.

Groups live in a bundle; a step picks the sequences it acts on among a group's live members.
The configuration (block size, pool sizes, watermark, sliding window, caching) is drawn per run,
and, in ``DefragmentingManagerLockstep``, whether a defragmenter sits under the GPU ids (and its
threshold, cap and reserved ids). After every step both managers must look the same (exact
mode), and invariants I1-I4 of ``specs/invariants.md`` must hold on both devices, I5
(KV data) on the model and on a target that has tensors; every ``can_*`` answer is held to its
promise (I7), and a step that raises must leave both unchanged (I6). The two defragmenters (the
pure one under the model's KV, the optimized one under the target's tensors) run in lockstep: the
same pairs, the same state, I4 after every step and I8 after every ``defragment()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis.stateful import invariant

from pagedkv.model_tests.machines.kv_harness import KVSide
from pagedkv.model_tests.machines.manager_base import Contract, Mode
from pagedkv.model_tests.machines.manager_invariants import (
    Invariants,
    held_references,
    mapping_problems,
    pair_problems,
)
from pagedkv.model_tests.machines.manager_misuse import Misuse
from pagedkv.model_tests.machines.manager_scheduler import SchedulerIteration
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.types import DefragConfig, ManagerConfig

__all__ = [
    "Contract",
    "DefragmentingManagerLockstep",
    "ManagerLockstep",
    "Mode",
    "held_references",
    "manager_lockstep_case",
    "mapping_problems",
    "pair_problems",
]


class ManagerLockstep(SchedulerIteration, Misuse, Invariants):
    """Subclass and set ``make_target`` to check another manager: against the reference under
    ``policy`` (exact or isomorphic mode), or alone against the safety tier.

    One concern a file: ``manager_base.py`` (state, the call on both sides, admission),
    ``manager_rules.py`` (the protocol's rules), ``manager_scheduler.py`` (whole iterations),
    ``manager_steering.py`` (scores and edges), ``manager_defrag.py`` (the defragmenters),
    ``manager_misuse.py`` (calls that must fail), ``manager_invariants.py`` (what must hold).
    Hypothesis collects the rules of every base class."""

    @invariant()
    def after_every_step(self) -> None:
        """What must hold after every step, as one invariant: Hypothesis's own work around each
        (a timer, the verbosity, a label) cost as much as four checks whose state had not
        changed, and most steps change none. In the order Hypothesis ran them as four (by
        name)."""
        self.defragmenters_agree()
        self.invariants_hold()
        self.kv_data_intact()
        self.same_state()


class DefragmentingManagerLockstep(ManagerLockstep):
    """The machine where a run may draw a defragmenter under the GPU ids of each side's KV."""

    defragmenting = True


def manager_lockstep_case(
    factory: Any,
    *,
    mode: Mode = "exact",
    policy: Policy = PAGEDKV,
    target_kv: Callable[[ManagerConfig, DefragConfig | None], KVSide] | None = None,
    defragmenter: bool = False,
    contract: Contract = "any",
) -> type[ManagerLockstep]:
    """A machine class checking ``factory``'s managers: against the reference under ``policy``
    in exact mode (same ids and state) or isomorphic mode (ids through a bijection, the protocol
    only), or against the safety tier alone (``mode="safety"``); with ``target_kv``, the target's
    KV data is checked too; with ``defragmenter``, a run may put a defragmenter under each side's
    GPU ids."""
    return type(
        f"ManagerLockstep_{getattr(factory, '__name__', 'target')}",
        (DefragmentingManagerLockstep if defragmenter else ManagerLockstep,),
        {
            "make_target": staticmethod(factory),
            "mode": mode,
            "policy": policy,
            "contract": contract,
            "target_kv": None if target_kv is None else staticmethod(target_kv),
        },
    )
