"""Everything pagedkv relies on in Hypothesis beyond its documented API, in one place.

``pyproject.toml`` pins ``hypothesis>=6.132,<6.171``, the minor releases this module was run
against: ``test_hypothesis_internals.py`` and ``test_profiles.py`` passed on 6.132.0, 6.150.0,
6.160.0 and 6.170.17 (and ``pagedkv check`` found ``BrokenSwapDropsPair`` on 6.132.0). Below
6.132 the pool of item 1 is not where we reach for it (6.131.0 has no ``Constants``, and the
import fails; the earlier pin, ``>=6.100``, allowed that). The test checks each item below still
exists and still does what we rely on, so that an upgrade which moves one fails there, naming
it, instead of a check that silently searches differently; moving the upper bound means running
it on the new release.

1. **The local constants pool** (``hypothesis.internal.conjecture.providers``:
   ``_get_local_constants``, ``CONSTANTS_CACHE``; ``hypothesis.internal.constants_ast.Constants``).
   Hypothesis sometimes draws a constant found in the source of any *local* module loaded in
   the process, so what a seed draws depends on what else was imported (``profiles.py``).
   Considered: no setting turns the pool off; a fixed import order before every test is not
   something a user's ``--target`` module allows.
2. **The shrink time limit** (``hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS``,
   five minutes; its source calls it monkeypatchable "for the rare users who need to"). A
   check shrinks for seconds, then deletes steps itself (``oracle/minimize.py``). Considered:
   leaving ``Phase.shrink`` out (the deleted-steps pass alone gives longer traces with
   uglier values), and cutting the search ourselves after a failure (we do, later: what it
   reports is then the shortest run seen, not a shrunk one).
3. **Leaving a search from inside a run** (an exception of our own raised at the end of a run:
   Hypothesis takes only an ``Exception``, ``SystemExit``, ``GeneratorExit`` or pytest's
   ``Failed`` for a failure, and lets any other ``BaseException`` through at once, without
   shrinking or reporting it). A check counts its budget in runs across searches of a fixed
   size, and stops a search that goes on after a failure. Considered: ``max_examples`` as the
   budget (Hypothesis shapes a search by it, so budgets would stop being nested:
   ``oracle/search.py``); there is no public way to stop a search early.

4. **The choices of the run in progress** (``hypothesis.control.current_build_context()``'s
   ``data.choices``, encoded by ``hypothesis.database.choices_to_bytes``, the example database's
   own encoding of a run). A check searches with no example database, so that its runs come
   from its seed alone: with one, Hypothesis keeps a Pareto front of the steering scores that
   draws on the search's random stream (and optimises it), so a seed would make other runs. To
   share a failure all the same (``--database``), the check takes the failing run's choices at
   its end and stores them itself (``ScopedDatabase.store_failure``). Considered: the database
   in every search (a seed's runs then differ with and without it, and a run left by item 3 is
   stored as if it had failed); the ``@reproduce_failure`` blob (printed, not handed over).
5. **Where a search reads its failures** (``ConjectureRunner.reuse_existing_test_cases`` fetches
   the test's own key first; its sub-keys, ``KEY.secondary`` and ``KEY.pareto``, after).
   ``ScopedDatabase`` learns the key from that first fetch, to store a failure (item 4) where
   the next check's replay reads. The key is Hypothesis's digest of the machine class, the same
   in every process for the same code.
6. **A rule's interactive draws** (``hypothesis.strategies._internal.core``: ``DataStrategy``,
   ``DataObject`` and its ``conjecture_data``). ``DataObject.draw`` wraps every draw in a check
   that the strategy left the global ``random`` alone (two ``random.getstate()`` copies of the
   Mersenne state and a comparison of them) and records the draw for the ``explain`` phase, which
   a check does not run; at tens of thousands of draws a check, that was a tenth of its time.
   ``DATA`` is ``st.data()`` whose ``draw`` goes to ``conjecture_data.draw`` directly: the same
   choices and the same spans (its own span has ``st.data()``'s label), so a seed makes the same
   runs. Where Hypothesis notes each draw for a report (a falsifying example replayed at
   ``Verbosity.normal`` and above), it draws as ``st.data()`` does. Considered: a ``draw``
   helper at each of the machines' hundred draws (the same, spread over every rule).

Not internals, though they look it: ``@seed`` applied to a state machine class (documented in
``hypothesis.seed``'s docstring; it sets the ``_hypothesis_internal_use_seed`` attribute that
``run_state_machine_as_test`` copies), and ``Verbosity.quiet`` (nothing printed, not even the
falsifying example). An internal that is gone fails loudly, with its name, here (an import or
an attribute error): the test finds it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from hypothesis import seed as seeded
from hypothesis import settings as Settings
from hypothesis.control import current_build_context, should_note
from hypothesis.database import ExampleDatabase, choices_to_bytes
from hypothesis.internal.conjecture import engine, providers
from hypothesis.internal.constants_ast import Constants
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from hypothesis.strategies import SearchStrategy
from hypothesis.strategies._internal.core import DataObject, DataStrategy

from pagedkv.model_tests.lockstep.capture import RunHook, RunRecord

TESTED = (6, 132), (6, 171)
"""The (major, minor) range pinned in ``pyproject.toml``: from the first, below the second."""


def empty_local_constants() -> None:
    """From now on, for the whole process, Hypothesis draws no constant from loaded modules'
    source (its own fixed constants stay)."""
    empty = Constants()
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()  # what was drawn from the old pool


@contextmanager
def shrinking_for(seconds: float) -> Iterator[None]:
    """Hypothesis stops shrinking a failure after ``seconds`` inside this block."""
    before = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = before


Drawn = TypeVar("Drawn")


class QuickDataObject(DataObject):
    """``st.data()``'s object, drawing straight from the run's choices (item 6)."""

    def __init__(self, shared: DataObject) -> None:
        super().__init__(shared.conjecture_data)
        self.shared = shared
        """The run's own ``st.data()`` object (Hypothesis's stateful runner draws one first):
        it numbers the draws a report lists."""
        self.noting = should_note()
        """Whether a report lists the draws (a falsifying example replayed, a verbose run):
        the same for the whole run, asked once per rule."""

    def draw(self, strategy: SearchStrategy[Drawn], label: Any = None) -> Drawn:
        if self.noting:  # a report lists the draws: draw as st.data() does
            return self.shared.draw(strategy, label)
        return self.conjecture_data.draw(strategy)


class _QuickDataStrategy(DataStrategy):
    """``st.data()``, drawing a ``QuickDataObject``; under ``st.data()``'s label (item 6)."""

    def do_draw(self, data: Any) -> DataObject:
        shared: DataObject = super().do_draw(data)  # type: ignore[no-untyped-call]
        return QuickDataObject(shared)

    def calc_label(self) -> int:
        return DataStrategy().label


DATA: SearchStrategy[DataObject] = _QuickDataStrategy()
"""``st.data()`` for the machines' rules: the same runs, without the per-draw check (item 6)."""


class _LeaveSearch(BaseException):
    """Leaves a search from the end of a run: no failure to Hypothesis, which lets it through."""


def leaving_when(go_on: Callable[[RunRecord], bool]) -> RunHook:
    """A machine's ``on_run_end`` hook that makes ``run_search`` end after the first run for
    which ``go_on`` says False (that run counts; no other starts)."""

    def run_ended(record: RunRecord) -> None:
        if not go_on(record):
            raise _LeaveSearch

    return run_ended


def run_search(machine: type[RuleBasedStateMachine], *, seed: int, settings: Settings) -> bool:
    """One Hypothesis search of ``machine`` from ``seed``: True if its ``leaving_when`` hook
    ended it, False if it ran to its end. A failure it ends on is raised as Hypothesis raises
    it."""
    try:
        run_state_machine_as_test(seeded(seed)(machine), settings=settings)
    except _LeaveSearch:
        return True
    return False


def run_choices() -> bytes:
    """The choices the run in progress has made, as the example database stores a run: called
    at its end (from ``teardown`` or a hook it calls), all of them."""
    return choices_to_bytes(current_build_context().data.choices)


class ScopedDatabase(ExampleDatabase):
    """One check's part of a shared example database: every key a search uses is put under
    ``scope``, so that checks of other targets, levels or profiles neither replay the failures
    stored here nor drop them (a replayed run that does not fail is deleted)."""

    def __init__(self, shared: ExampleDatabase, scope: bytes) -> None:
        super().__init__()
        self.shared, self.scope = shared, scope
        self.primary: bytes | None = None
        """The key a search reads its failures under, once one has read (item 5)."""

    def _scoped(self, key: bytes) -> bytes:
        return self.scope + b":" + key

    def fetch(self, key: bytes) -> Iterable[bytes]:
        if self.primary is None:
            self.primary = key
        return self.shared.fetch(self._scoped(key))

    def save(self, key: bytes, value: bytes) -> None:
        self.shared.save(self._scoped(key), value)

    def delete(self, key: bytes, value: bytes) -> None:
        self.shared.delete(self._scoped(key), value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.shared.move(self._scoped(src), self._scoped(dest), value)

    def store_failure(self, choices: bytes) -> bool:
        """Store a failing run's ``choices`` (``run_choices``) where a search of this machine
        replays failures first; False if no search has read here yet (its key is unknown)."""
        if self.primary is None:
            return False
        self.save(self.primary, choices)
        return True
