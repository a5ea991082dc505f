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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from immutables import Map

from pagedkv.model_tests.oracle.guard import as_its_call, unguarded
from pagedkv.model_tests.oracle.incremental_compact import IncrementalCompact
from pagedkv.model_tests.oracle.stand_in_guard import patched as patched
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_state import PoolState, is_evictable, is_free, to_view
from pagedkv.specs.compact_state import (
    CompactManager,
    CompactPool,
    GroupFields,
    SeqFields,
    compact_groups,
    compact_manager,
    compact_of_blocks,
    compact_pool,
    packed_tokens,
)
from pagedkv.specs.manager_view import GroupView, SeqView
from pagedkv.specs.types import Device, ManagerConfig


class WalkGroup(Protocol):
    @property
    def device(self) -> Device: ...

    @property
    def seq_ids(self) -> tuple[int, ...]: ...


class WalkSeq(Protocol):
    def num_tokens(self) -> int:
        """Its tokens (a live optimized table holds them packed: its ``len`` is not this)."""
        ...


class WalkState(Protocol):
    """What the walk reads of the model before each call."""

    @property
    def groups(self) -> Mapping[int, WalkGroup]: ...

    @property
    def seqs(self) -> Mapping[int, WalkSeq]: ...


@dataclass(frozen=True)
class Model:
    """A kind of model: how to build one, how to read its live state, and its whole state,
    compact (``specs/compact_state.py``): ``compact`` after every call, which may keep parts
    between calls, and ``fresh``, built anew with nothing kept, at every checkpoint (None:
    ``compact`` keeps nothing)."""

    name: str
    build: Callable[[ManagerConfig], Any]
    state: Callable[[Any], WalkState]
    compact: Callable[[Any], CompactManager]
    fresh: Callable[[Any], CompactManager] | None = None
    reader: Callable[[Any], Callable[[], CompactManager]] | None = None
    """``compact`` of one model, bound once (None: ``compact`` with the model): what the soak
    calls after every call, without looking up the model's kept parts each time."""

    def read(self, model: Any) -> Callable[[], CompactManager]:
        """The model's ``compact``, bound."""
        return partial(self.compact, model) if self.reader is None else self.reader(model)


def _reference_state(model: ReferenceBlockSpaceManager) -> WalkState:
    return model.state


def _optimized_state(model: OptimizedBlockSpaceManager) -> WalkState:
    return model.live()


class FrozenCompact:
    """``compact_manager(model.view())`` of a reference manager, rebuilt only where its frozen
    state changed: the reference replaces a pool, its sequences' map or a sequence's view when
    it changes them and keeps the same object otherwise, and a frozen object always renders the
    same, so a part whose object is the one seen last time has the compact form it had then.
    Each part is kept with the object it came from (compared with ``is``: no id is reused while
    it lives). The compact state it returns is shared between calls: read it, never change
    it."""

    def __init__(self) -> None:
        self.pools: dict[Device, tuple[PoolState, CompactPool]] = {}
        self.seqs: tuple[Map[int, SeqView], dict[int, SeqFields]] | None = None
        self.rows: dict[int, tuple[SeqView, SeqFields]] = {}
        self.groups: tuple[Map[int, GroupView], dict[int, GroupFields]] | None = None

    def __call__(self, model: ReferenceBlockSpaceManager) -> CompactManager:
        state = model.state
        return CompactManager(
            state.config,
            self.pool(Device.GPU, state.gpu),
            self.pool(Device.CPU, state.cpu),
            self.seq_rows(state.seqs),
            self.group_rows(state.groups),
            state.null_block,
        )

    def pool(self, device: Device, state: PoolState) -> CompactPool:
        known = self.pools.get(device)
        if known is None or known[0] is not state:
            known = self.pools[device] = (state, compact_of_state(state))
        return known[1]

    def seq_rows(self, seqs: Map[int, SeqView]) -> dict[int, SeqFields]:
        if self.seqs is not None and self.seqs[0] is seqs:
            return self.seqs[1]
        rows, known = {}, self.rows
        for seq_id, seq in seqs.items():
            row = known.get(seq_id)
            if row is None or row[0] is not seq:
                row = known[seq_id] = (seq, (seq.group_id, packed_tokens(seq.tokens), seq.blocks))
            rows[seq_id] = row[1]
        if len(known) > 2 * len(rows):  # forget the sequences that are gone
            self.rows = {seq_id: known[seq_id] for seq_id in rows}
        self.seqs = (seqs, rows)
        return rows

    def group_rows(self, groups: Map[int, GroupView]) -> dict[int, GroupFields]:
        if self.groups is None or self.groups[0] is not groups:
            self.groups = (groups, compact_groups(groups))
        return self.groups[1]


def compact_of_state(state: PoolState) -> CompactPool:
    """``compact_pool(to_view(state))``, read straight from the frozen state: its blocks' views
    once each, in the configuration's order, where the view would copy them into a dict and
    walk them twice more for the free and evictable ids (half the cost). A state whose blocks
    are not exactly the configuration's ids takes ``compact_pool``'s way (its ``ValueError``).
    Held to ``compact_pool`` of the reference's own view at every checkpoint, as any kept part
    (``soak.Lockstep.fresh_check``)."""
    blocks, ids = state.blocks, state.config.block_ids
    try:
        views = [blocks[block] for block in ids] if len(blocks) == len(ids) else None
    except KeyError:
        views = None
    if views is None:
        return compact_pool(to_view(state))
    return compact_of_blocks(
        state.config,
        views,
        frozenset([block for block, view in zip(ids, views, strict=True) if is_free(view)]),
        frozenset([block for block, view in zip(ids, views, strict=True) if is_evictable(view)]),
        state.cached,
        state.duplicates,
        state.pending_cows,
        state.hits,
        state.queries,
    )


def _reference_compact(model: ReferenceBlockSpaceManager) -> CompactManager:
    return _reference_reader(model)()


_FROZEN_COMPACTS: WeakKeyDictionary[ReferenceBlockSpaceManager, FrozenCompact]
_FROZEN_COMPACTS = WeakKeyDictionary()


def _reference_fresh(model: ReferenceBlockSpaceManager) -> CompactManager:
    return compact_manager(model.view())


def _optimized_compact(model: OptimizedBlockSpaceManager) -> CompactManager:
    return _optimized_reader(model)()


_INCREMENTAL_COMPACTS: WeakKeyDictionary[OptimizedBlockSpaceManager, IncrementalCompact]
_INCREMENTAL_COMPACTS = WeakKeyDictionary()


def _reference_reader(model: ReferenceBlockSpaceManager) -> Callable[[], CompactManager]:
    """The reference's compact state, from the rebuilder its manager keeps (``FrozenCompact``)."""
    rebuild = _FROZEN_COMPACTS.get(model)
    if rebuild is None:
        rebuild = _FROZEN_COMPACTS[model] = FrozenCompact()
    return partial(rebuild, model)


def _optimized_reader(model: OptimizedBlockSpaceManager) -> Callable[[], CompactManager]:
    """The optimized manager's compact state, from the reader its manager keeps
    (``IncrementalCompact``)."""
    read = _INCREMENTAL_COMPACTS.get(model)
    if read is None:
        read = _INCREMENTAL_COMPACTS[model] = IncrementalCompact(model)
    return read


REFERENCE = Model(
    "reference",
    ReferenceBlockSpaceManager,
    _reference_state,
    _reference_compact,
    _reference_fresh,
    _reference_reader,
)
OPTIMIZED = Model(
    "optimized",
    OptimizedBlockSpaceManager,
    _optimized_state,
    _optimized_compact,
    OptimizedBlockSpaceManager.compact,
    _optimized_reader,
)


Reader = Callable[[], CompactManager]


def compact_reader(
    target: Any, keep: bool = True
) -> tuple[Reader, Reader | None, IncrementalCompact | None]:
    """How to read a target's whole state, compact, after every call, and fresh at a checkpoint
    (None: the first keeps nothing between calls). Where the target's ``compact`` and ``view``
    are the optimized manager's: its compact state kept between calls (``IncrementalCompact``,
    over the manager's own structures, each read run as one of the target's calls: under its
    guard's timeout, as its own ``compact`` would be), and fresh its own ``compact``, over which
    its ``view`` is rendered (so the two cannot disagree). For any other target
    ``compact_manager`` of its ``view``, which loses nothing of it and keeps nothing.
    ``target`` may be guarded (``guard.py``): its class is looked at through the guard, its
    methods are called through it. ``keep=False``: nothing kept, the target's own ``compact``
    after every call (a subclass whose kept state went stale: ``soak``). Third, the
    ``IncrementalCompact`` that keeps the target's parts, if one does (to pair it with the
    model's: ``IncrementalCompact.pair``)."""
    found = type(unguarded(target))
    if (
        issubclass(found, OptimizedBlockSpaceManager)
        and found.compact is OptimizedBlockSpaceManager.compact
        and found.view is OptimizedBlockSpaceManager.view
    ):
        fresh: Reader = target.compact
        if not keep:
            return fresh, None, None
        kept = as_its_call(target, "compact", IncrementalCompact, unguarded(target))
        if unguarded(target) is not target:
            guarded = partial(as_its_call, target, "compact", kept)
            if kept.changes is not None:  # all pagedkv's code: a call that changed nothing
                return partial(_unless_unchanged, kept, guarded), fresh, kept  # is a glance
            return guarded, fresh, kept
        return kept, fresh, kept
    view = target.view
    return (lambda: compact_manager(view())), None, None


def _unless_unchanged(kept: IncrementalCompact, read: Reader) -> CompactManager:
    """The compact state of the call before where the record says nothing changed since (no
    code of the target's runs: its class and pools are pagedkv's own), else ``read()``."""
    unchanged = kept.unchanged()
    return read() if unchanged is None else unchanged


def choose(sample: object) -> Model:
    """The model for an exact-mode soak of ``sample`` (a target built once to look at): the
    optimized stand-in, unless the target is the optimized manager itself, which the stand-in
    would only compare with itself (seen through the oracle's guard, ``guard.unguarded``), or
    pagedkv's optimized code was changed since it was loaded (``stand_in_guard``): the stand-in
    would run the target's changes."""
    found = unguarded(sample)
    if type(found) is OptimizedBlockSpaceManager or patched():
        return REFERENCE
    return OPTIMIZED
