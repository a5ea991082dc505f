"""The request-level machine: a v1-style scheduler drives a ``RequestKVManager`` (vLLM v1's
``KVCacheManager`` call for call, ``specs/request_level.md``), step by step.

In exact mode the target runs beside the reference: every answer equal (types too), every error
the same class, ``view().comparable()`` equal after every call. In every mode the invariants of
``request_checks.py`` hold after every step, and the KV model reads every hit back. A failing
run prints Hypothesis's shrunk steps and, below them, its protocol calls as a program that
replays them (``request_replay.py``).

One concern a file: ``request_base.py`` (state, the session, the KV contents),
``request_scheduler.py`` (the scheduler's rules), ``request_misuse.py`` (calls that must fail),
``request_invariants.py`` (what must hold), ``request_checks.py`` (the checks, pure),
``request_kv_model.py`` (the slots), ``request_book.py`` (the scheduler's requests),
``request_draws.py`` (configurations and prompts), ``request_steering.py`` (the edges the
scheduler steers to).
"""

from __future__ import annotations

import sys
from typing import ClassVar

from hypothesis import note, settings
from hypothesis.errors import HypothesisException

from pagedkv.model_tests.machines.request_base import RequestMode
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.machines.request_misuse import MisuseRules
from pagedkv.model_tests.machines.request_replay import RecordedCall, replay_program
from pagedkv.model_tests.machines.request_scheduler import SchedulerRules
from pagedkv.specs.interface import RequestKVManagerFactory
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.request_types import RequestConfig


class RequestLockstep(SchedulerRules, MisuseRules):
    """Subclass and set ``make_target`` (and ``make_model``, ``mode``, ``group_kind``), or call
    ``request_lockstep_case``."""

    failing_run: ClassVar[tuple[RequestConfig, list[RecordedCall]] | None] = None
    """The configuration and calls of the latest failing run (the shrunk one, once Hypothesis
    is done: it runs that one last)."""

    def teardown(self) -> None:
        """After a failure, the run's calls as a program (a note: Hypothesis prints it with the
        shrunk failing example only); the run's scores to Hypothesis's target phase."""
        self.hand_over_scores()
        session = getattr(self, "session", None)
        error = sys.exc_info()[1]  # Hypothesis calls teardown in a finally
        failed = isinstance(error, Exception) and not isinstance(error, HypothesisException)
        if not failed or session is None:
            return
        calls = [(step.method, step.args) for step in session.steps]
        outcomes = [step.outcome for step in session.steps]
        if self.pending is not None:
            calls.append(self.pending)
        type(self).failing_run = (self.config, calls)
        program = replay_program(self.config, calls, outcomes)
        note(f"The run's calls ({len(calls)}), replayable:\n{program}")


SHARE_OF_PROFILE = 8
"""A request machine's test runs an eighth of the profile's examples (at least 20): one run
here makes many more calls than a manager machine's, and each test stays near half a minute
under ``dev``."""


def request_settings() -> settings:
    """The loaded profile's settings, with a share of its examples (``SHARE_OF_PROFILE``)."""
    current = settings.default
    assert current is not None  # a profile is loaded (model_tests/machines/profiles.py)
    return settings(current, max_examples=max(20, current.max_examples // SHARE_OF_PROFILE))


def request_lockstep_case(
    factory: RequestKVManagerFactory,
    *,
    group_kind: GroupKind,
    mode: RequestMode = "exact",
    model: RequestKVManagerFactory | None = None,
    policy: Policy = PAGEDKV,
) -> type[RequestLockstep]:
    """A machine class checking ``factory``'s managers for one group configuration (full
    attention, sliding window, or a hybrid of both): against ``model`` (the reference, in exact
    mode) or alone against the invariants (``mode="alone"``)."""
    machine = type(
        f"RequestLockstep_{group_kind}_{getattr(factory, '__name__', 'target')}",
        (RequestLockstep,),
        {
            "make_target": staticmethod(factory),
            "make_model": None if model is None else staticmethod(model),
            "mode": mode,
            "group_kind": group_kind,
            "policy": policy,
        },
    )
    machine.TestCase.settings = request_settings()  # type: ignore[attr-defined]
    return machine
