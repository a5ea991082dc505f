"""The soak's model at the manager level: the reference, or the optimized manager where the soak
is allowed the faster one (``specs/oracle.md`` §6, "A fast soak that stays honest").

The walk draws its next call from the model's live groups and sequences, so a model is a manager
together with a way to read those: the reference's frozen state, or the optimized manager's own
groups and tables (read only). Both show a group's device and sequence ids and a sequence's
tokens under the same names (``WalkState``).

The optimized manager is held exact to the reference under pagedkv's profile, so as a model it
answers as the reference would, several times faster. It is only a stand-in: a divergence it
finds is replayed with the reference as the model before anything is reported (``soak.py``), and
it cannot model the optimized manager itself (it would be compared with itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pagedkv.model_tests.oracle.guard import unguarded
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.types import Device, ManagerConfig, Token


class WalkGroup(Protocol):
    @property
    def device(self) -> Device: ...

    @property
    def seq_ids(self) -> tuple[int, ...]: ...


class WalkSeq(Protocol):
    @property
    def tokens(self) -> Sequence[Token]: ...


class WalkState(Protocol):
    """What the walk reads of the model before each call."""

    @property
    def groups(self) -> Mapping[int, WalkGroup]: ...

    @property
    def seqs(self) -> Mapping[int, WalkSeq]: ...


@dataclass(frozen=True)
class Model:
    """A kind of model: how to build one, and how to read its live state."""

    name: str
    build: Callable[[ManagerConfig], Any]
    state: Callable[[Any], WalkState]


def _reference_state(model: ReferenceBlockSpaceManager) -> WalkState:
    return model.state


def _optimized_state(model: OptimizedBlockSpaceManager) -> WalkState:
    return model.live()


REFERENCE = Model("reference", ReferenceBlockSpaceManager, _reference_state)
OPTIMIZED = Model("optimized", OptimizedBlockSpaceManager, _optimized_state)


def choose(sample: object) -> Model:
    """The model for an exact-mode soak of ``sample`` (a target built once to look at): the
    optimized stand-in, unless the target is the optimized manager itself, which the stand-in
    would only compare with itself (seen through the oracle's guard, ``guard.unguarded``)."""
    found = unguarded(sample)
    return REFERENCE if type(found) is OptimizedBlockSpaceManager else OPTIMIZED
