"""The manager machine's state and its one way to call both sides: the managers and the
session built per run, each side's KV, the engine's model step, ids and tokens, and admission
(``_admit``, which the first requests of a run and several rules share). The rules live in the
mixins beside it (``manager_machine.py`` lists them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, initialize, multiple

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.ledger import Ledger
from pagedkv.model_tests.lockstep.manager_session import (
    ExactManagerSession,
    IsomorphicManagerSession,
    ManagerSession,
)
from pagedkv.model_tests.lockstep.safety_session import SafetySession
from pagedkv.model_tests.lockstep.views import Views
from pagedkv.model_tests.machines.draws import (
    BOOLEANS,
    FOLLOW_TEMPLATE,
    integers,
    sampled,
    small_tokens,
)
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.kv_harness import (
    AbstractKV,
    CachedPrefixes,
    KVSide,
    SequenceSlots,
    Writer,
)
from pagedkv.model_tests.machines.lockstep_machine import LockstepMachine
from pagedkv.model_tests.machines.manager_draws import (
    EXTRA_KEYS,
    TEMPLATE,
    defrag_configs,
    manager_configs,
    swarms,
)
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import BlockSpaceManager, BlockSpaceManagerFactory
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import AllocStatus, DefragConfig, ExtraKey, ManagerConfig, Token

T = TypeVar("T")

Contract = Literal["any", "scheduler"]
"""Which calls the machine makes (``specs/oracle.md`` §1): ``any`` every call the protocol
allows, misuse included; ``scheduler`` only those a scheduler makes: ``allocate`` after
``can_allocate`` said OK, appends after ``can_append_slots`` said yes (else the group is
preempted: swapped out if ``can_swap_out`` says OK, else freed for recomputation), swaps after
``can_swap_*`` said OK, forks, marks and accesses of running (GPU) groups, no misuse."""

Mode = Literal["exact", "isomorphic", "safety"]

GROUPS = Bundle("groups")
"""The requests (sequence groups) a run has admitted."""


class ManagerMachineBase(LockstepMachine):
    """Subclass and set ``make_target`` to check another manager: against the reference under
    ``policy`` (exact or isomorphic mode), or alone against the safety tier."""

    make_target: ClassVar[BlockSpaceManagerFactory]
    mode: ClassVar[Mode] = "exact"
    contract: ClassVar[Contract] = "any"
    defragmenting: ClassVar[bool] = False
    """Whether a run may draw a defragmenter (``DefragmentingManagerLockstep``)."""
    target_kv: ClassVar[Callable[[ManagerConfig, DefragConfig | None], KVSide] | None] = None
    """The target's KV (its tensors, moved by its kernels), when it has one to check."""
    groups = GROUPS

    def __init__(self) -> None:
        super().__init__()
        self.model: ReferenceBlockSpaceManager | None = None
        self.target: BlockSpaceManager
        self.next_id = 0
        self.clock = 0.0
        self.pending: capture.RecordedCall | None = None
        self.checking_config: ManagerConfig | None = None
        self.window_releases = 0

    @property
    def scheduler(self) -> bool:
        return self.contract == "scheduler"

    @initialize(target=GROUPS, config=manager_configs, off=swarms, data=DATA)
    def create_managers(
        self, config: ManagerConfig, off: frozenset[str], data: st.DataObject
    ) -> Any:
        """The managers and each side's KV (in ``DefragmentingManagerLockstep``, whether a
        defragmenter sits under the GPU ids: the oracle's machine checks a target's protocol,
        which has no defragmenter), then the run's first one or two requests. Hypothesis
        switches a random share of the rules off in every run, ``allocate`` among them: without
        these first requests, half the runs had no request at all."""
        self.target = capture.build_target(self, config)
        self.config = config
        self.off = off
        for name in sorted(off):
            event(f"swarm: without {name}")
        self.session: ManagerSession
        if self.mode == "safety":
            self.session = SafetySession(self.target, config)
        else:
            self.model = ReferenceBlockSpaceManager(config, self.policy)
            if self.mode == "isomorphic":
                self.session = IsomorphicManagerSession(self.model, self.target)
            else:
                self.session = ExactManagerSession(self.model, self.target)
        self.defrag: DefragConfig | None = None
        if self.defragmenting and self.model is not None:
            self.defrag = data.draw(defrag_configs(config.num_gpu_blocks), label="defragmenter")
        self.model_kv: KVSide = AbstractKV(config, self.defrag)
        session = self.session
        shared = session.model_view if isinstance(session, IsomorphicManagerSession) else None
        self.views = Views(self.model, self.target, shared)  # the session's views of the model
        make_kv = type(self).target_kv
        self.target_side: KVSide | None = None if make_kv is None else make_kv(config, self.defrag)
        self.prefixes = CachedPrefixes()
        self.kept_slots: dict[int, SequenceSlots] = {}
        """Each live sequence's expected KV slots (``expected_kv``), while it is unchanged."""
        self.passed_checks: dict[str, tuple[object, ...]] = {}
        """Per invariant, what it last passed on (``unchanged_since_passed``)."""
        event(f"config: caching={config.enable_caching}, window={config.sliding_window}")
        event(f"config: defragmenter {'off' if self.defrag is None else 'on'}")
        first = data.draw(integers(1, 2), label="first requests")
        return multiple(*(self._admit(self._prompt(data), data) for _ in range(first)))

    @property
    def ledger(self) -> Ledger:
        return self.session.ledger

    @property
    def ended(self) -> bool:
        """A call failed under a policy that lets it fail midway: nothing defines the target's
        state now, so the run makes no more calls."""
        return hasattr(self, "session") and self.session.ended

    def both(self, call: ManagerCall[T]) -> T | PagedKVError:
        """One call on the session (unless ``not_made``)."""
        method = call.name
        skipped = self.not_made(method)
        if skipped is not None:
            return skipped
        self.pending = (method, call.args)
        self.views.changed()
        outcome = self.session.call(call)
        self.pending = None
        if self.session.ended:
            event("outcome: run ended by a call that failed midway")
            assert isinstance(outcome, PagedKVError)  # a run ends on a failed call
            self.ending_error = outcome
        return outcome

    def model_view(self) -> ManagerView | None:
        """The model's view, rendered once per state (``views.py``)."""
        return None if self.model is None else self.views.model()

    def target_view(self) -> ManagerView:
        return self.views.target()  # type: ignore[no-any-return]

    def sides(self) -> list[tuple[KVSide, ManagerView]]:
        """Each side's KV with the tables that place it (the target's, in exact mode)."""
        sides = []
        if self.model is not None:
            sides.append((self.model_kv, self.views.model()))
        if self.target_side is not None:
            sides.append((self.target_side, self.target_view()))
        return sides

    def kv_sides(self) -> list[KVSide]:
        """Each side's KV, as ``sides`` lists them (without rendering the views)."""
        found = [self.model_kv] if self.model is not None else []
        return found if self.target_side is None else [*found, self.target_side]

    def run_model(self, group_id: int, new_tokens: dict[int, range], data: st.DataObject) -> None:
        """The engine's model step: write the new tokens' KV, then (usually at once; sometimes
        a later step does it, as with chunked prefill) mark the group computed. Until then a
        scheduler's questions must not count the new blocks as computed, cache hit or not. (The
        safety session plays the model itself, through the target's tables.)"""
        for side, view in self.sides():
            for seq_id, positions in new_tokens.items():
                Writer(side).write_tokens(view, seq_id, positions)
        at_once = self.on("marks at once")  # without it, only the mark rule marks: cache hits
        if at_once and data.draw(sampled((True, True, False)), label="mark computed now"):
            self.both(calls.mark_blocks_as_computed(group_id))  # on blocks not computed yet abound

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _tokens(self, data: st.DataObject, start: int, count: int) -> list[Token]:
        if data.draw(FOLLOW_TEMPLATE, label="follow template"):
            return [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(count)]
        return data.draw(small_tokens(count, 3))

    def _prompt(self, data: st.DataObject) -> list[Token]:
        length = data.draw(integers(1, 3 * self.config.block_size + 1), label="prompt length")
        return self._tokens(data, 0, length)

    def _lookahead_on(self) -> bool:
        return self.policy.lookahead and self.on("lookahead")

    def _admit(self, prompt: list[Token], data: st.DataObject, key: ExtraKey | None = None) -> int:
        """A request with ``prompt``: asked about, allocated, its prefill run (the rest of the
        request is drawn: sequences, extra key unless given, encoder prompt, lookahead)."""
        size = self.config.block_size
        length = len(prompt)
        # sequences of a group share the prompt's partial tail, which only copy-on-write lets
        # them write
        many = self.policy.groups == "many_sequences" and self.policy.copy_on_write
        many = many and self.on("parallel sampling")
        num_seqs = data.draw(integers(1, 3 if many else 1), label="sequences")
        if key is None:
            keys = EXTRA_KEYS if self.on("extra keys") else EXTRA_KEYS[:1]
            key = data.draw(sampled(keys), label="extra key")
        encoder = None
        plain = not self.config.enable_caching and self.config.sliding_window is None
        offered = plain and self.policy.encoder and self.on("encoder")
        if offered and data.draw(BOOLEANS, label="encoder"):
            encoder = self._tokens(data, 5, data.draw(integers(1, 2 * size), label="enc"))
        most = 2 if self._lookahead_on() else 0
        lookahead = data.draw(integers(0, most), label="lookahead")
        status = self.both(calls.can_allocate(prompt, lookahead, encoder))
        group_id = self.fresh_id()
        if isinstance(status, PagedKVError):
            return group_id
        event(f"outcome: can_allocate {status.name}")
        if status is AllocStatus.NEVER:
            self._never_is_final(prompt, lookahead, encoder)
        if self.scheduler and status is not AllocStatus.OK:
            return group_id  # the request waits in the queue
        seq_ids = [self.fresh_id() for _ in range(num_seqs)]
        result = self.both(calls.allocate(group_id, seq_ids, prompt, key, encoder))
        if status is AllocStatus.OK:
            assert not isinstance(result, PagedKVError), f"can_allocate said OK, then {result!r}"
        if not isinstance(result, PagedKVError):
            if encoder is not None:
                for side, view in self.sides():
                    Writer(side).write_cross(view, group_id)
            # the scheduler asks what prefill it may skip before the model runs
            self.both(calls.get_common_computed_block_ids(seq_ids))
            self.both(calls.get_num_cached_tokens(seq_ids[0]))
            self.run_model(group_id, {s: range(length) for s in seq_ids}, data)
        return group_id

    def _never_is_final(self, prompt: list[Token], lookahead: int, encoder: Any) -> None:
        """I7: a NEVER holds in an empty manager too (the reference's, or a fresh target's under
        the safety tier)."""
        if self.mode == "safety":
            fresh = type(self).make_target(self.config)
            release = type(self).release_target
            try:
                answer = fresh.can_allocate(prompt, lookahead, encoder)
            finally:
                if release is not None:
                    release(fresh)
        else:
            answer = ReferenceBlockSpaceManager(self.config, self.policy).can_allocate(
                prompt, lookahead, encoder
            )
        assert answer is AllocStatus.NEVER, f"can_allocate said NEVER, an empty manager {answer}"

    def unchanged_since_passed(self, check: str) -> bool:
        """Whether the model's state and every KV side are as they were when ``check`` last
        passed: a check of those alone would pass again. (The reference's state is a frozen
        value a change replaces; each side's version rises with every change to its data or its
        placement.) Otherwise they are noted for the check about to run, which must pass for
        the run to go on."""
        if self.model is None:
            return False
        key = (self.model.state, *(side.version for side in self.kv_sides()))
        passed = self.passed_checks.get(check)
        if passed is not None and passed[0] is key[0] and passed[1:] == key[1:]:
            return True
        self.passed_checks[check] = key
        return False

    def teardown(self) -> None:
        try:
            self.hand_over_scores()
            capture.finish(self, "manager")
        finally:
            capture.let_go(self)
