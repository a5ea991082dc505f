"""What both lockstep machines (the manager's and the pool's) share: the hooks through which a run
leaves its record (``lockstep/capture.py``), the features a run leaves out (``off``, swarm
testing, drawn with its configuration) and the highest of each steering score
(``hypothesis.target`` takes one per label per run: they are handed over at teardown)."""

from __future__ import annotations

from typing import ClassVar

from hypothesis import event, target
from hypothesis.stateful import RuleBasedStateMachine

from pagedkv.model_tests.lockstep import capture
from pagedkv.specs.errors import PagedKVError, UnsupportedError
from pagedkv.specs.policy import PAGEDKV, Policy


class LockstepMachine(RuleBasedStateMachine):
    policy: ClassVar[Policy] = PAGEDKV
    last_run: ClassVar[capture.RunRecord | None] = None
    on_run_end: ClassVar[capture.RunHook | None] = None
    on_declined: ClassVar[capture.DeclineHook | None] = None
    on_unchecked: ClassVar[capture.UncheckedHook | None] = None
    release_target: ClassVar[capture.ReleaseHook | None] = None
    rule_events: ClassVar[bool] = True
    """Whether every call is noted as a Hypothesis event (``rule: NAME``) for the statistics
    pytest shows (``--hypothesis-show-statistics``); a check, which shows none, leaves them out
    (an event a call was 0.4 % of a check's instructions). Events draw nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.off: frozenset[str] = frozenset()
        self.scores: dict[str, float] = {}
        self.ending_error: PagedKVError | None = None
        """The error of the call that ended the run, once one has (``ended``)."""

    @property
    def ended(self) -> bool:
        """A failed call left the target in a state nothing defines (a policy that lets a call
        fail midway): the run makes no more calls."""
        return False

    def not_made(self, name: str) -> PagedKVError | None:
        """The outcome of a call to ``name`` the machine does not make, or None to make it. Once
        the run has ended, the error that ended it stands for every later call, and the rules go
        by without calls; an operation the policy's engine lacks is made by nobody."""
        if self.ended:
            assert self.ending_error is not None  # set by the call that ended the run
            return self.ending_error
        if name in self.policy.unsupported:
            return UnsupportedError(f"{name} is not offered under this policy")
        if self.rule_events:
            event(f"rule: {name}")
        return None

    def on(self, name: str) -> bool:
        """Whether this run keeps the feature ``name`` (swarm testing)."""
        return name not in self.off

    def _score(self, value: float, label: str) -> None:
        self.scores[label] = max(value, self.scores.get(label, value))

    def hand_over_scores(self) -> None:
        for label, value in sorted(self.scores.items()):
            target(value, label=label)
