"""``pagedkv soak``: a plain seeded random walk over the manager's operations, the reference and a
target in lockstep, far faster than the Hypothesis machine and meant to run for millions of
steps.

A step is one call, made on both sides. The walk draws from ``random.Random(seed)``: a new small
configuration every ``EPISODE`` steps (so windows, caching and tiny pools all come up), then calls
shaped like a scheduler's (admit after asking, decode, fork, free, swap after asking, marks,
queries) with a few calls that must fail.

What is compared. Every step: the result, or the error type, and every promise (a ``can_*`` that
said yes is followed by its action, which must succeed; a NEVER must be NEVER on an empty
manager too). In exact mode at the manager level, also the whole state after every call, failed
ones included (I6), as compact states (``specs/compact_state.py``; the views only where those
differ), or, for two optimized managers running pagedkv's code alone, part by part from their
records (``Lockstep.same_pair``). Every ``CHECKPOINT`` steps and at the end of each episode: the
kept compact states held to fresh ones, the views themselves (rendered from those fresh
compact states where a side's ``view`` is the optimized manager's), and invariants I1-I4 on the
model's. In isomorphic mode the calls go through the oracle's
isomorphic session, which compares block tables, mappings and free counts at every step.
A divergence becomes a trace of the episode's calls, shrunk by deleting calls while the replay
still diverges (comparing the whole state after every call), and written out for
``pagedkv replay``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import (
    Divergence,
    TargetStopped,
    run_call,
    shared_error,
)
from pagedkv.model_tests.lockstep.capture import RecordedCall
from pagedkv.model_tests.lockstep.manager_session import IsomorphicManagerSession, same_rate
from pagedkv.model_tests.lockstep.show import show_call, show_value
from pagedkv.model_tests.machines.manager_machine import held_references, mapping_problems
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.exec_target import close_target
from pagedkv.model_tests.oracle.guard import GuardedFactory, as_its_call, unguarded
from pagedkv.model_tests.oracle.incremental_compact import IncrementalCompact, Looked, own_code_only
from pagedkv.model_tests.oracle.plain_state import ForeignValue, check_exact, same_plain
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.model_tests.oracle.request_soak import (
    RequestLockstep,
    RequestWalk,
    random_request_config,
)
from pagedkv.model_tests.oracle.soak_model import (
    REFERENCE,
    Model,
    Reader,
    WalkState,
    compact_reader,
)
from pagedkv.model_tests.oracle.stand_in_guard import patched
from pagedkv.model_tests.oracle.watchdog import watched
from pagedkv.optimized import block_manager
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import invariants
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.compact_state import CompactManager
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.named_calls import call_named
from pagedkv.specs.types import AllocStatus, Device, ExtraKey, ManagerConfig, Token
from pagedkv.specs.wire import exact_reader

T = TypeVar("T")

EPISODE = 2000
HIT_RATE = "get_prefix_cache_hit_rate"
"""Compared within ``manager_session.RATE_TOLERANCE``, as under ``check``."""
CHECKPOINT = 64
LONGEST_CHECKPOINT = 512
"""Between two paired readers (``Lockstep.same_pair``: two optimized managers that run
pagedkv's code alone) the period doubles from ``CHECKPOINT`` after each checkpoint, up to this,
within an episode: their comparison after each call rests on the record and the fingerprint,
each held equal to a fresh compact state after every call of random walks by the tests
(``test_soak_record.py``, ``test_soak_paired.py``), so the checkpoint there is the backstop of
a property already held; every episode still ends with one."""
TEMPLATE: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))

Factory = Callable[[Any], Any]


@dataclass
class SoakResult:
    steps: int = 0
    episodes: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    checkpoints: int = 0
    states_compared: int = 0
    """Whole states compared after a call (exact mode at the manager level: after every one)."""
    failure: str | None = None
    config: Any = None
    """The failing episode's configuration (a ``ManagerConfig``, or at the request level a
    ``RequestConfig``)."""
    calls: list[RecordedCall] = field(default_factory=list)
    """The failing episode's calls, shrunk (the failing one last)."""
    unshrunk: int = 0
    trace: trace.Trace | None = None
    """The shrunk calls with the reference's outcome of each."""
    trace_path: Path | None = None
    replays: bool | None = None
    """Whether ``pagedkv replay`` of the written trace reproduces the divergence."""
    hung: bool = False
    """The failure is a call the target did not answer in time: it was not called again."""
    model: str = "reference"
    """The model the walk ran with (``soak_model.py``)."""
    own_bug: str | None = None
    """The optimized model disagrees with the reference on the failing episode's calls: a bug of
    pagedkv's, not the target's (``failure`` then says what the stand-in saw). ``calls`` and
    ``trace`` are that disagreement, shrunk; ``pagedkv replay --target optimized`` shows it."""
    paired: bool = False
    """Some episode compared two paired readers (``Lockstep.same_pair``), whose checkpoints come
    further apart as the episode goes (``LONGEST_CHECKPOINT``)."""
    confirmed: bool = False
    """A stand-in model's divergence was put to the reference, which confirmed it."""
    stale: list[str] = field(default_factory=list)
    """Checkpoints where a compact state kept between calls was stale (``StaleCache``): each
    ended its episode, whose calls were replayed comparing fresh states after every call. A
    divergence there is the target's (``failure``); none at all makes the staleness a bug of
    pagedkv's (``own_bug``), never a PASS: the comparisons after each call missed a change."""
    stand_in_changed: list[str] = field(default_factory=list)
    """What of pagedkv's optimized code the target changed while the stand-in was the model (the
    reference was the model from then on)."""

    @property
    def passed(self) -> bool:
        return self.failure is None and self.own_bug is None


# --- the two sides ------------------------------------------------------------------------------


def built_by_pagedkv(factory: Factory) -> bool:
    """Whether the target is a manager pagedkv builds itself (``--target optimized`` or
    ``reference``): no code of a user's runs in it, and every value in its state is made by
    pagedkv's code from the walk's plain arguments. (A target that patches pagedkv's classes is
    another matter: the stand-in guard's, ``stand_in_guard.py``.)"""
    found = factory.factory if isinstance(factory, GuardedFactory) else factory
    return found is OptimizedBlockSpaceManager or found is ReferenceBlockSpaceManager


class Lockstep:
    """One episode: the model (the reference, or its stand-in: ``soak_model.py``) and the target,
    a call at a time."""

    def __init__(
        self,
        factory: Factory,
        config: ManagerConfig,
        exact: bool,
        model: Model = REFERENCE,
        every_call: bool = False,
        keep_target_parts: bool = True,
    ) -> None:
        self.model = model.build(config)
        self.read_state = model.state
        self.read_compact = model.read(self.model)
        self.fresh_compact = model.fresh
        self.target = factory(config)
        self.plain_values = not built_by_pagedkv(factory)
        """Whether the target's values are read as Python's own before they are compared
        (``same_compact``): for any target but the managers pagedkv builds itself."""
        self.exact = exact
        self.target_compact: Reader | None = None
        """Exact mode with ``every_call``: the whole states are compared (compact) after every
        call, not only at ``check_state``."""
        self.target_fresh: Reader | None = None
        """The target's compact state built with nothing kept, where ``target_compact`` keeps
        parts between calls."""
        self.pair: tuple[IncrementalCompact, IncrementalCompact] | None = None
        """The model's reader and the target's, paired (``IncrementalCompact.pair``): the
        states compared part by part after each call (``same_pair``)."""
        self.agreed_parts: tuple[object, ...] | None = None
        """The parts of the two states last found equal by ``same_pair``."""
        if exact and every_call:
            self.target_compact, self.target_fresh, kept = compact_reader(
                self.target, keep=keep_target_parts
            )
            mine = self.read_compact
            if isinstance(mine, IncrementalCompact) and kept is not None and kept.pair(mine):
                self.pair = (mine, kept)
        self.model_renders = self.fresh_compact is LOADED_COMPACT and renders_its_compact(
            self.model
        )
        self.target_renders = self.target_fresh is not None and renders_its_compact(self.target)
        """Whether a side's ``view`` is ``view_of_compact`` of the fresh compact state the
        checkpoint builds (``same_views``, which looks again)."""
        self.agreed: tuple[CompactManager, CompactManager] | None = None
        """The last two compact states found equal (``same_parts``)."""
        self.compared = 0
        self.answers = Answers(self.target, "manager")
        """The target's answers as values, a list held to what it said one call later (a list
        reused for the next answer is a divergence, as under ``check``: ``specs/oracle.md`` §1)."""
        self.session: IsomorphicManagerSession | None = None
        self.calls: list[RecordedCall] = []
        self.exact_results: dict[str, Callable[[object], Any]] = {}
        """Each operation's ``wire.exact_reader`` of the model's results, looked up once."""

    def state(self) -> WalkState:
        """The model's live groups and sequences, which the walk draws from."""
        return self.read_state(self.model)

    def begin(self) -> None:
        """The isomorphic session, which reads the new target's tables and free counts at once:
        a divergence already (a free count that is not an ``int``)."""
        if not self.exact:
            self.session = IsomorphicManagerSession(self.model, self.target)

    def call(self, call: ManagerCall[T]) -> T | PagedKVError:
        """The model's outcome (result or error); a Divergence if the target's differs."""
        method, args = call.name, call.args
        self.calls.append((method, args))
        if self.session is not None:
            return self.session.call(call)
        result, error = run_call(self.model, call, detach=False)  # the model keeps no argument
        answer, their_error = run_call(self.target, call)
        shown = partial(show_call, method, args)  # written out only for a message
        if error is not None or their_error is not None:
            shared = shared_error(shown(), (result, error), (answer, their_error))
            self.answers.take(call, shown, None, raised=True)  # the answer before, read again
            if self.target_compact is not None:  # a failed call must have changed nothing
                self.same_state(call)
            return shared
        # its value at the call; a list is read again one call later (``answers.py``)
        theirs = self.answers.take(call, shown, answer, raised=False)
        read = self.exact_results.get(method)
        if read is None:
            read = self.exact_results[method] = exact_reader("manager", method)
        mine = read(result)
        if mine != theirs and not (method == HIT_RATE and same_rate(mine, theirs)):
            raise Divergence(
                f"{show_call(method, args)}: the reference returned {show_value(result)},"
                f" the target {show_value(theirs)}"
            )
        if self.target_compact is not None:
            self.same_state(call)
        return cast(T, result)

    def same_state(self, call: ManagerCall[Any]) -> None:
        """The whole states after ``call``, compact (``specs/compact_state.py``): equal exactly
        when the views are. Only when they differ are the views built, to say where."""
        assert self.target_compact is not None
        self.compared += 1
        if self.pair is not None and self.same_pair(call):
            return
        mine = self.read_compact()
        when = f"after {show_call(call.name, call.args)}"
        try:
            theirs = self.target_compact()
        except Exception as error:
            raise _unreadable(when, error) from None
        if self.same_compact(when, mine, theirs, self.agreed):
            self.agreed = (mine, theirs)
        else:  # the views say where; where they do not, a kept state may be stale (checkpoints)
            self.agreed = None
            self.same_views(when)

    def same_compact(
        self,
        when: str,
        mine: CompactManager,
        theirs: CompactManager,
        agreed: tuple[CompactManager, CompactManager] | None,
    ) -> bool:
        """``mine == theirs``, a part found equal in ``agreed`` taken as it was: for a target of
        a user's with the target's values read as Python's own (``plain_state.same_plain``),
        since by ``==`` a value of the target's may answer for itself; for a manager pagedkv
        builds itself, by ``==`` (``same_parts``)."""
        if not self.plain_values:
            return same_parts(mine, theirs, agreed)
        try:
            return same_plain(mine, theirs, agreed)
        except ForeignValue as error:
            raise Divergence(f"{when}: the target's state holds {error}") from None

    def same_pair(self, call: ManagerCall[Any]) -> bool:
        """``same_state`` of two paired readers (``IncrementalCompact.pair``), part by part
        from what each record says changed: the sequences' rows, the groups', each pool by its
        fingerprint with its pending accesses, configuration and first id (equal exactly when
        the columns ``compact`` would build are: ``OptimizedBlockPool.compact_of``), the
        configuration and the null block. A part that is on both sides the object it was when
        last found equal is equal without a look. True: the two states are equal; False: they
        may not be (two pools whose fingerprints differ, say, a heap in another order, or a
        record no longer read), and ``same_state`` compares the compact states themselves."""
        assert self.pair is not None
        mine, theirs = self.pair
        if mine.changes is None or mine.changes.detached:
            return False
        if theirs.changes is None or theirs.changes.detached:
            return False
        changed = mine.update()
        if not theirs.quiet():  # the target's reader runs as one of its calls (its timeout)
            try:
                as_its_call(self.target, "compact", theirs.update)
            except Exception as error:
                raise _unreadable(f"after {show_call(call.name, call.args)}", error) from None
            changed = True
        agreed = self.agreed_parts
        if not changed and agreed is not None:
            return True
        gpu, their_gpu = mine.pools[0], theirs.pools[0]
        cpu, their_cpu = mine.pools[1], theirs.pools[1]
        assert gpu is not None and their_gpu is not None
        assert cpu is not None and their_cpu is not None
        parts = (mine.seqs, theirs.seqs, mine.groups, theirs.groups, gpu, their_gpu, cpu, their_cpu)
        if agreed is None:
            agreed = (None,) * len(parts)
        same = (
            _same_rows(parts[0], parts[1], agreed[0], agreed[1], mine.since[:2], theirs.since[:2])
            and _same_rows(
                parts[2], parts[3], agreed[2], agreed[3], mine.since[2:], theirs.since[2:]
            )
            and ((gpu is agreed[4] and their_gpu is agreed[5]) or _same_pool(gpu, their_gpu))
            and ((cpu is agreed[6] and their_cpu is agreed[7]) or _same_pool(cpu, their_cpu))
            and mine.manager.config == theirs.manager.config
            and mine.manager.get_null_block() == theirs.manager.get_null_block()
        )
        self.agreed_parts = parts if same else None
        return same

    def same_views(
        self, when: str, fresh: tuple[CompactManager, CompactManager] | None = None
    ) -> ManagerView:
        """The model's view, once the target's has been found equal to it (exact mode).
        ``fresh``: both sides' compact states just built fresh (``fresh_check``), of which a
        side whose ``view`` is rendered from its ``compact`` (``renders_its_compact``) has its
        view rendered here, without building its compact state again; if both do and the two
        compact states are equal, the target's view is the model's (the same function of an
        equal value) and is not rendered twice."""
        mine = theirs_fresh = None
        if fresh is not None:
            if self.model_renders and renders_its_compact(self.model):
                mine = fresh[0]
            if self.target_renders and renders_its_compact(self.target):
                theirs_fresh = fresh[1]
        view: ManagerView = self.model.view() if mine is None else rendered(mine)
        if self.exact:
            if (
                mine is not None
                and theirs_fresh is not None
                and self.same_compact(when, mine, theirs_fresh, None)
            ):
                return view
            try:
                theirs = self.target.view() if theirs_fresh is None else rendered(theirs_fresh)
            except Exception as error:
                raise _unreadable(when, error) from None
            if not isinstance(theirs, ManagerView):
                raise Divergence(
                    f"{when}: the target's view() returned {show_value(theirs)}, not a ManagerView"
                )
            compared = theirs.comparable()
            try:  # Python's own values only, else == may answer for itself
                check_exact(compared)
            except ForeignValue as error:
                raise Divergence(f"{when}: the target's state holds {error}") from None
            if view.comparable() != compared:
                raise Divergence(f"{when}: {difference(view, theirs)}")
        return view

    def check_state(self, when: str) -> None:
        """The whole state (exact mode) and invariants I1-I4 of the model's. Where the compact
        states compared after every call keep parts between calls, each is first held equal to
        one built fresh: else ``StaleCache``."""
        view = self.same_views(when, self.fresh_check(when))
        problems = state_problems(view)
        if problems:
            raise Divergence(f"{when}: invariants: " + "; ".join(problems))

    def fresh_check(self, when: str) -> tuple[CompactManager, CompactManager] | None:
        """Each side's kept compact state equals the one built fresh, with nothing kept: the
        comparisons after every call since the last checkpoint saw the whole state. The two
        fresh states, where both sides keep parts (else None)."""
        if self.target_compact is None:
            return None
        stale = []
        fresh = self.fresh_compact
        mine = theirs = None
        if fresh is not None:
            mine = fresh(self.model)
            if self.read_compact() != mine:
                stale.append("the model's")
        try:
            if self.target_fresh is not None:
                theirs = self.target_fresh()
                if self.target_compact() != theirs:
                    stale.append("the target's")
        except Exception as error:
            raise _unreadable(when, error) from None
        if stale:
            message = f"{when}: {' and '.join(stale)} kept compact state is stale"
            raise StaleCache(message, model=stale[0] == "the model's")
        return None if mine is None or theirs is None else (mine, theirs)


_ABSENT = object()


def _same_rows(
    mine: Mapping[int, object],
    theirs: Mapping[int, object],
    agreed_mine: object,
    agreed_theirs: object,
    my_update: tuple[Mapping[int, object], AbstractSet[int]],
    their_update: tuple[Mapping[int, object], AbstractSet[int]],
) -> bool:
    """``mine == theirs`` for two paired readers' rows (sequences', or groups'), the pair last
    found equal being ``agreed_mine`` and ``agreed_theirs``. Where each side's last update
    started from its agreed rows (``IncrementalCompact.since``), only the ids either update
    read again can differ: every other row is on each side the very row that was found equal
    then, so those alone are compared; else the whole rows are."""
    if mine is agreed_mine and theirs is agreed_theirs:
        return True
    (my_start, my_read), (their_start, their_read) = my_update, their_update
    if my_start is not agreed_mine or their_start is not agreed_theirs:
        return mine == theirs
    return all(mine.get(key, _ABSENT) == theirs.get(key, _ABSENT) for key in my_read | their_read)


def _same_pool(mine: Looked, theirs: Looked) -> bool:
    """Two optimized pools as paired readers last looked at them: the same fingerprint, pending
    accesses, configuration and first id (``OptimizedBlockPool.compact_of`` reads nothing
    else, so their columns are the same)."""
    return (
        mine.fingerprint == theirs.fingerprint
        and (mine.held is theirs.held or mine.held == theirs.held)
        and mine.pool._first_id == theirs.pool._first_id
        and mine.pool._config == theirs.pool._config
    )


LOADED_VIEW, LOADED_COMPACT = OptimizedBlockSpaceManager.view, OptimizedBlockSpaceManager.compact
LOADED_CODES = (LOADED_VIEW.__code__, LOADED_COMPACT.__code__)
"""The optimized manager's ``view`` and ``compact`` as pagedkv loaded them (before any target)."""


def renders_its_compact(manager: Any) -> bool:
    """Whether ``manager.view()`` is ``view_of_compact(manager.compact())`` with both methods
    the optimized manager's as loaded (``LOADED_VIEW``, their code too), none set on the
    instance, ``compact`` as loaded. ``manager`` may be guarded."""
    found = unguarded(manager)
    kind = type(found)
    return (
        kind.view is LOADED_VIEW
        and kind.compact is LOADED_COMPACT
        and LOADED_VIEW.__code__ is LOADED_CODES[0]
        and LOADED_COMPACT.__code__ is LOADED_CODES[1]
        and isinstance(found, OptimizedBlockSpaceManager)
        and not {"compact", "view"} & getattr(found, "__dict__", {}).keys()
    )


def rendered(compact: CompactManager) -> ManagerView:
    """The view the optimized manager's ``view`` renders from ``compact``: through the very
    function it calls (looked up where it looks it up)."""
    render: Callable[[CompactManager], ManagerView] = vars(block_manager)["view_of_compact"]
    return render(compact)


def _unreadable(when: str, error: Exception) -> Divergence:
    """The target's own ``view`` or ``compact`` failed while its state was read: the target's
    failure (exact mode needs them), not pagedkv's."""
    return Divergence(
        f"{when}: reading the target's whole state (its view(), or compact()) raised"
        f" {type(error).__name__}: {error}"
    )


class StandInChanged(Exception):
    """pagedkv's optimized code is no longer what was loaded (``stand_in_guard``), while the
    optimized manager stands in for the reference: it runs the target's change too."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


def _check_stand_in(model: Model) -> None:
    """At each checkpoint: a target may patch pagedkv's code at any call, not only at import."""
    if model is not REFERENCE:
        changed = patched()
        if changed:
            raise StandInChanged(changed)


class StaleCache(Exception):
    """A compact state kept between calls differs from the one built fresh: the comparisons
    after every call may have missed a change, so the episode is replayed comparing fresh
    states after every call (``soak``). ``model``: the model's kept state was stale (else
    only the target's)."""

    def __init__(self, message: str, *, model: bool) -> None:
        super().__init__(message)
        self.model = model


def same_parts(
    mine: CompactManager,
    theirs: CompactManager,
    agreed: tuple[CompactManager, CompactManager] | None,
) -> bool:
    """``mine == theirs``, where a part (a pool, the sequences) that is on each side the very
    object it was in the last pair found equal, ``agreed``, is equal without a look: a compact
    state's parts are never changed once returned, so that part is as it was then."""
    if agreed is None:
        return mine == theirs
    was_mine, was_theirs = agreed
    if mine is was_mine and theirs is was_theirs:  # a call that changed neither side
        return True
    return (
        ((mine.gpu is was_mine.gpu and theirs.gpu is was_theirs.gpu) or mine.gpu == theirs.gpu)
        and ((mine.cpu is was_mine.cpu and theirs.cpu is was_theirs.cpu) or mine.cpu == theirs.cpu)
        and (
            (mine.seqs is was_mine.seqs and theirs.seqs is was_theirs.seqs)
            or mine.seqs == theirs.seqs
        )
        and (
            (mine.groups is was_mine.groups and theirs.groups is was_theirs.groups)
            or mine.groups == theirs.groups
        )
        and (mine.config is theirs.config or mine.config == theirs.config)
        and mine.null_block == theirs.null_block
    )


def difference(mine: ManagerView, theirs: ManagerView) -> str:
    """The first part of the two states that differs, said plainly."""
    for device in (Device.GPU, Device.CPU):
        ours, their = mine.pool(device), theirs.pool(device)
        for block, view in ours.blocks.items():
            if their.blocks.get(block) != view:
                return (
                    f"{device.value} block {block}: the reference has {view},"
                    f" the target {their.blocks.get(block)}"
                )
        for part in ("free", "evictable", "cached", "pending_cows", "hits", "queries"):
            if getattr(ours, part) != getattr(their, part):
                return (
                    f"{device.value} pool {part}: the reference has {getattr(ours, part)!r},"
                    f" the target {getattr(their, part)!r}"
                )
    for part in ("seqs", "groups", "null_block"):
        if dict_or_value(getattr(mine, part)) != dict_or_value(getattr(theirs, part)):
            return (
                f"{part}: the reference has {getattr(mine, part)!r},"
                f" the target {getattr(theirs, part)!r}"
            )
    return "the target's state differs from the reference's"


def dict_or_value(value: Any) -> Any:
    return dict(value) if hasattr(value, "items") else value


def state_problems(view: ManagerView) -> list[str]:
    problems = mapping_problems(view)
    for device in (Device.GPU, Device.CPU):
        pool = view.pool(device)
        problems += invariants.ref_counts(pool, held_references(view, device))
        problems += invariants.pool_invariants(pool)
    return problems


# --- the walk -----------------------------------------------------------------------------------


def random_config(rng: random.Random) -> ManagerConfig:
    return ManagerConfig(
        block_size=rng.choice([1, 2, 2, 3, 4]),
        num_gpu_blocks=rng.randint(2, 12),
        num_cpu_blocks=rng.randint(1, 8),
        watermark=rng.choice([0.0, 0.0, 0.1, 0.3]),
        sliding_window=rng.choice([None, None, 1, 2, 3, 5]),
        enable_caching=rng.random() < 0.5,
    )


QUERIES: tuple[Callable[[list[int], int, int, Device], ManagerCall[Any]], ...] = (
    lambda members, group_id, seq_id, device: calls.get_common_computed_block_ids(members),
    lambda members, group_id, seq_id, device: calls.get_num_cached_tokens(seq_id),
    lambda members, group_id, seq_id, device: calls.get_block_table(seq_id),
    lambda members, group_id, seq_id, device: calls.get_cross_block_table(group_id),
    lambda members, group_id, seq_id, device: calls.get_num_free_gpu_blocks(),
    lambda members, group_id, seq_id, device: calls.get_num_free_cpu_blocks(),
    lambda members, group_id, seq_id, device: calls.get_prefix_cache_hit_rate(device),
)
"""The queries ``Walk.ask`` draws from (a group's members, its id, a sequence of it, a device),
each built only once drawn: a call is a frozen dataclass, and building all seven to make one
cost about 3 us an ask. The draws are those of the list of seven built before (the same walk
for a seed)."""


class Walk:
    """Draws the next calls from the reference's state (its tables and groups)."""

    def __init__(self, rng: random.Random, side: Lockstep) -> None:
        self.rng = rng
        self.side = side
        self.next_id = 0
        self.clock = 0.0

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def tokens(self, start: int, count: int) -> list[Token]:
        """Mostly along a shared template (prefixes repeat: hits, dedup), else small tokens."""
        if self.rng.random() < 0.75:
            return [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(count)]
        return [int(self.rng.random() * 4) for _ in range(count)]

    def step(self) -> None:
        """One or a few calls (an action follows the question that promised it). Decoding picks
        a group on the GPU, as a scheduler does; everything else any group."""
        rng = self.rng
        state = self.side.state()
        draw = rng.random()
        groups = state.groups
        if draw < 0.10 or not groups:
            self.allocate()
            return
        if draw < 0.45:
            running = [g for g, found in groups.items() if found.device is Device.GPU]
            if running:
                self.append(running[int(rng.random() * len(running))])
                return
        ids = list(groups)
        group_id = ids[int(rng.random() * len(ids))]
        group = groups[group_id]
        seq_id = group.seq_ids[int(rng.random() * len(group.seq_ids))]
        call = self.side.call
        if draw < 0.50:
            call(calls.fork(seq_id, self.fresh_id()))
        elif draw < 0.56:
            call(calls.free(seq_id))
        elif draw < 0.62:
            self.swap(group_id, group.device)
        elif draw < 0.72:
            self.clock += float(int(rng.random() * 3))
            call(calls.access_all_blocks_in_seq(seq_id, self.clock))
        elif draw < 0.80:
            call(calls.mark_blocks_as_computed(group_id))
        elif draw < 0.95:
            self.ask(group_id, list(group.seq_ids), seq_id)
        elif draw < 0.97:
            call(calls.reset_prefix_cache(rng.choice([None, Device.GPU, Device.CPU])))
        else:
            self.misuse(seq_id)

    def allocate(self) -> None:
        config = self.side.model.config
        length = self.rng.randint(1, 3 * config.block_size + 1)
        prompt = self.tokens(0, length)
        lookahead = self.rng.randint(0, 2)
        encoder = None
        if not config.enable_caching and config.sliding_window is None and self.rng.random() < 0.3:
            encoder = self.tokens(5, self.rng.randint(1, 2 * config.block_size))
        status = self.side.call(calls.can_allocate(prompt, lookahead, encoder))
        if status is AllocStatus.NEVER:
            fresh = ReferenceBlockSpaceManager(config)
            if fresh.can_allocate(prompt, lookahead, encoder) is not AllocStatus.NEVER:
                raise Divergence("can_allocate said NEVER, but an empty manager has room")
        if status is not AllocStatus.OK and self.rng.random() < 0.8:
            return  # a scheduler waits; sometimes it tries anyway (and must be refused cleanly)
        ids = [self.fresh_id() for _ in range(self.rng.randint(1, 3))]
        key = self.rng.choice(EXTRA_KEYS)
        result = self.side.call(calls.allocate(self.fresh_id(), ids, prompt, key, encoder))
        if status is AllocStatus.OK and isinstance(result, PagedKVError):
            raise Divergence(f"can_allocate said OK, then allocate raised {result!r}")

    def append(self, group_id: int) -> None:
        num_new = self.rng.choice([1, 1, 1, 0, 2, 3])
        lookahead = self.rng.choice([0, 0, 1, 2])
        allowed = self.side.call(calls.can_append_slots(group_id, num_new, lookahead))
        if allowed is False and self.rng.random() < 0.8:
            self.preempt(group_id)
            return
        for seq_id in self.side.state().groups[group_id].seq_ids:
            start = self.side.state().seqs[seq_id].num_tokens()
            result = self.side.call(
                calls.append_slots(seq_id, self.tokens(start, num_new), lookahead)
            )
            if allowed is True and isinstance(result, PagedKVError):
                raise Divergence(f"can_append_slots said yes, then append_slots raised {result!r}")

    def preempt(self, group_id: int) -> None:
        """No room to decode: swap the group out, or free one of its sequences."""
        if self.rng.random() < 0.5:
            self.swap(group_id, Device.GPU)
        else:
            self.side.call(calls.free(self.rng.choice(self.side.state().groups[group_id].seq_ids)))

    def swap(self, group_id: int, device: Device) -> None:
        out = device is Device.GPU
        lookahead = self.rng.choice([0, 0, 1, 3])
        ask = calls.can_swap_out(group_id) if out else calls.can_swap_in(group_id, lookahead)
        status = self.side.call(ask)
        if status is not AllocStatus.OK and self.rng.random() < 0.8:
            return
        result = self.side.call(calls.swap_out(group_id) if out else calls.swap_in(group_id))
        if status is AllocStatus.OK and isinstance(result, PagedKVError):
            raise Divergence(f"{ask.name} said OK, then the swap raised {result!r}")
        if status is AllocStatus.NEVER and not isinstance(result, PagedKVError) and out:
            raise Divergence("can_swap_out said NEVER, then the swap succeeded")
        if status is AllocStatus.OK and not out and lookahead:
            for seq_id in self.side.state().groups[group_id].seq_ids:
                promised = self.side.call(calls.append_slots(seq_id, [], lookahead))
                if isinstance(promised, PagedKVError):
                    raise Divergence(f"can_swap_in promised {lookahead} lookahead slots")

    def ask(self, group_id: int, members: list[int], seq_id: int) -> None:
        device = self.rng.choice([Device.GPU, Device.CPU])  # drawn first, as it always was
        self.side.call(self.rng.choice(QUERIES)(members, group_id, seq_id, device))

    def misuse(self, seq_id: int) -> None:
        wrong: list[ManagerCall[object]] = [
            calls.free(10_000),
            calls.append_slots(10_000, [1]),
            calls.allocate(self.fresh_id(), [seq_id], [1]),
            calls.fork(seq_id, seq_id),
            calls.append_slots(seq_id, [-5]),
            calls.access_all_blocks_in_seq(seq_id, float("inf")),
            calls.can_allocate([1], -1),
            calls.get_prefix_cache_hit_rate(cast(Device, "gpu")),  # not a Device, on purpose
        ]
        result = self.side.call(self.rng.choice(wrong))
        if not isinstance(result, PagedKVError):
            raise Divergence(f"a call that must fail succeeded: {self.side.calls[-1]}")


# --- running and shrinking ----------------------------------------------------------------------


Progress = Callable[[int, int | None, str], None]
"""Told the steps so far, and while shrinking the calls left and the phase's name
(``progress.Progress``)."""
Side = Lockstep | RequestLockstep


def make_side(
    level: Level,
    factory: Any,
    config: Any,
    exact: bool,
    model: Model = REFERENCE,
    every_call: bool = False,
    keep_target_parts: bool = True,
) -> Side:
    if level == "request":
        return RequestLockstep(factory, config, exact)
    return Lockstep(factory, config, exact, model, every_call, keep_target_parts)


def make_walk(level: Level, rng: random.Random, side: Side) -> Walk | RequestWalk:
    if isinstance(side, RequestLockstep):
        return RequestWalk(rng, side)
    return Walk(rng, side)


@watched
def soak(
    factory: Factory,
    steps: int,
    seed: int,
    *,
    exact: bool,
    trace_out: str | Path | None = None,
    progress: Progress | None = None,
    level: Level = "manager",
    layouts: Sequence[GroupKind] = LAYOUTS,
    model: Model = REFERENCE,
) -> SoakResult:
    """About ``steps`` calls in lockstep at ``level`` (the manager's or the request level's
    walk, over the group ``layouts``) with ``model`` (at the manager level); on the first
    divergence, the shrunk trace. A divergence found with a stand-in model is reported only once
    the reference confirms it (``confirm``)."""
    if model is not REFERENCE and (level != "manager" or not exact):
        raise ValueError("a stand-in model needs the manager level in exact mode")
    rng = random.Random(seed)
    keep_target_parts = True
    """Off once a target's kept state was stale with no divergence (``StaleCache``)."""
    result = SoakResult(model=model.name)
    start, cpu = time.perf_counter(), time.process_time()
    while result.steps < steps and result.passed:
        config = random_request_config(rng, layouts) if level == "request" else random_config(rng)
        try:
            side = make_side(level, factory, config, exact, model, True, keep_target_parts)
        except TargetStopped as stopped:  # a hang is a FAIL, as under check
            result.failure, result.hung, result.config = str(stopped), True, config
            break
        walk = make_walk(level, rng, side)
        result.episodes += 1
        period = next_check = CHECKPOINT
        grows = isinstance(side, Lockstep) and side.pair is not None
        result.paired = result.paired or grows
        episode_end = min(steps, result.steps + EPISODE)
        try:
            side.begin()
            while result.steps + len(side.calls) < episode_end:
                walk.step()
                if len(side.calls) >= next_check:
                    side.check_state(f"at step {len(side.calls)} of the episode")
                    _check_stand_in(model)
                    result.checkpoints += 1
                    if grows:
                        period = min(2 * period, LONGEST_CHECKPOINT)
                    next_check += period
            side.check_state("at the end of the episode")
            _check_stand_in(model)
            result.checkpoints += 1
        except StandInChanged as changed:
            # the target changed pagedkv's optimized code while it ran, and the stand-in ran the
            # change too: the reference is the model from now on, and this episode is replayed
            # against it (every call since the last look is in it)
            model = REFERENCE
            result.model, result.stand_in_changed = REFERENCE.name, changed.names
            found = diverges(factory, config, side.calls, exact, level)
            if found is not None:
                result.failure, result.config, result.calls = found, config, list(side.calls)
        except StaleCache as stale:
            result.stale.append(str(stale))  # the episode ends here, replayed fresh
            found = diverges(factory, config, side.calls, exact, level)
            if found is not None:
                result.failure, result.config, result.calls = found, config, list(side.calls)
            elif not stale.model and not own_code_only(unguarded(side.target)):
                # a subclass's own code changed what the kept state's fingerprint reads: its own
                # compact state, built fresh, is read after every call from now on
                keep_target_parts = False
            else:  # every state agreed: what was stale is pagedkv's own kept state
                result.config, result.calls = config, list(side.calls)
                result.own_bug = (
                    f"{stale}, and the episode's calls replayed comparing fresh states after"
                    " every call show no divergence: pagedkv's kept compact state missed a change"
                )
        except Divergence as failure:
            result.failure = str(failure)
            result.config = config
            result.calls = list(side.calls)
        except TargetStopped as stopped:
            result.failure, result.hung, result.config = str(stopped), True, config
            result.calls = list(side.calls)
        finally:
            close_target(side.target)  # an exec: program goes back (or away)
        result.steps += len(side.calls)
        if isinstance(side, Lockstep):
            result.states_compared += side.compared
        if progress is not None:
            progress(result.steps, None, "")
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    if result.hung and result.config is not None and result.calls:
        _write_hung(result, trace_out, level)
    if result.failure is not None and result.config is not None and not result.hung:
        if model is not REFERENCE:
            confirm(result, model)
        shrinking = None if progress is None else _shrinking(progress, result.steps)
        if result.own_bug is None:
            _shrink_and_write(result, factory, exact, trace_out, level, shrinking)
        else:
            _shrink_and_write(result, model.build, True, trace_out, level, shrinking)
    return result


def _shrinking(progress: Progress, steps: int) -> Callable[[int], None]:
    """What ``shrink`` tells: the calls left, shown as the shrink's progress."""

    def left(calls: int) -> None:
        progress(steps, calls, "shrinking a divergence")

    return left


def confirm(result: SoakResult, model: Model) -> None:
    """A divergence a stand-in ``model`` found, put to the reference: the failing episode's calls
    replayed with the reference as the model and the stand-in as the target, comparing results
    and whole states after every call. If they agree, the reference answers every call as the
    stand-in did, so the walk's verdict on the target is the reference's too: it stands,
    ``confirmed``. If not, the stand-in was wrong: ``own_bug`` says how, and the target is not
    blamed."""
    assert result.config is not None
    disagreement = diverges(model.build, result.config, result.calls, exact=True)
    if disagreement is None:
        result.confirmed = True
    else:
        result.own_bug = disagreement


def diverges(
    factory: Factory,
    config: Any,
    calls: list[RecordedCall],
    exact: bool,
    level: Level = "manager",
) -> str | None:
    """Why replaying ``calls`` diverges (comparing the whole state after every call), or None."""
    side = make_side(level, factory, config, exact)
    try:
        side.begin()
        for method, args in calls:
            side.call(call_named(level, method, args))
            side.check_state(f"after {method}")
    except Divergence as failure:
        return str(failure)
    except Exception as failure:  # an untyped crash of the target is a divergence too
        return f"{type(failure).__name__}: {failure}"
    finally:
        close_target(side.target)
    return None


def shrink(
    factory: Factory,
    config: Any,
    calls: list[RecordedCall],
    exact: bool,
    level: Level = "manager",
    left: Callable[[int], None] | None = None,
) -> list[RecordedCall]:
    """Delete chunks of calls (halves, then quarters, ... then single calls) while the replay
    still diverges; what is left ends at the call that diverges. ``left`` is told the calls
    left before each replay (a long episode's shrink takes minutes)."""
    current = list(calls)
    chunk = max(1, len(current) // 2)
    while chunk >= 1:
        index = 0
        removed = False
        while index < len(current):
            if left is not None:
                left(len(current))
            candidate = current[:index] + current[index + chunk :]
            if candidate and diverges(factory, config, candidate, exact, level) is not None:
                current = candidate
                removed = True
            else:
                index += chunk
        if not removed:
            chunk //= 2
    for end in range(1, len(current) + 1):  # cut what follows the first divergence
        if diverges(factory, config, current[:end], exact, level) is not None:
            return current[:end]
    return current


def _write_hung(result: SoakResult, trace_out: str | Path | None, level: Level) -> None:
    """The hung episode's calls, the last the one that hung, as a trace: not shrunk, since the
    target is not called again after a hang (it may have been left anywhere in that call)."""
    assert result.config is not None
    result.unshrunk = len(result.calls)
    found = result.trace = trace.trace_of_calls(level, result.config, result.calls)
    if trace_out is not None:
        result.trace_path = trace.write(found, trace_out)


def _shrink_and_write(
    result: SoakResult,
    factory: Factory,
    exact: bool,
    trace_out: str | Path | None,
    level: Level = "manager",
    left: Callable[[int], None] | None = None,
) -> None:
    assert result.config is not None
    result.unshrunk = len(result.calls)
    result.calls = shrink(factory, result.config, result.calls, exact, level, left)
    message = diverges(factory, result.config, result.calls, exact, level)
    if message is not None:
        result.failure = message
    found = result.trace = trace.trace_of_calls(level, result.config, result.calls)
    if trace_out is not None:
        result.trace_path = trace.write(found, trace_out)
    result.replays = not trace.replay(found, factory).ok
