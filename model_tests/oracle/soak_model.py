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
from pagedkv.specs.compact_state import CompactManager, compact_manager
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
    """A kind of model: how to build one, how to read its live state, and its whole state,
    compact (``specs/compact_state.py``)."""

    name: str
    build: Callable[[ManagerConfig], Any]
    state: Callable[[Any], WalkState]
    compact: Callable[[Any], CompactManager]


def _reference_state(model: ReferenceBlockSpaceManager) -> WalkState:
    return model.state


def _optimized_state(model: OptimizedBlockSpaceManager) -> WalkState:
    return model.live()


def _reference_compact(model: ReferenceBlockSpaceManager) -> CompactManager:
    return compact_manager(model.view())


REFERENCE = Model("reference", ReferenceBlockSpaceManager, _reference_state, _reference_compact)
OPTIMIZED = Model(
    "optimized",
    OptimizedBlockSpaceManager,
    _optimized_state,
    OptimizedBlockSpaceManager.compact,
)


def compact_reader(target: Any) -> Callable[[], CompactManager]:
    """How to read a target's whole state, compact: its own ``compact`` where that is the
    optimized manager's, over the optimized manager's ``view`` (which renders it, so the two
    cannot disagree); for any other target ``compact_manager`` of its ``view``, which loses
    nothing of it. ``target`` may be guarded (``guard.py``): its class is looked at through
    the guard, its methods are called through it."""
    found = type(unguarded(target))
    if (
        issubclass(found, OptimizedBlockSpaceManager)
        and found.compact is OptimizedBlockSpaceManager.compact
        and found.view is OptimizedBlockSpaceManager.view
    ):
        compact: Callable[[], CompactManager] = target.compact
        return compact
    view = target.view
    return lambda: compact_manager(view())


def choose(sample: object) -> Model:
    """The model for an exact-mode soak of ``sample`` (a target built once to look at): the
    optimized stand-in, unless the target is the optimized manager itself, which the stand-in
    would only compare with itself (seen through the oracle's guard, ``guard.unguarded``)."""
    found = unguarded(sample)
    return REFERENCE if type(found) is OptimizedBlockSpaceManager else OPTIMIZED
