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

from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar, cast

from hypothesis import event, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.calls import assert_same_state, construction_outcome
from pagedkv.model_tests.lockstep.ledger import Ledger
from pagedkv.model_tests.lockstep.manager_session import (
    ExactManagerSession,
    IsomorphicManagerSession,
    ManagerSession,
)
from pagedkv.model_tests.lockstep.observation import Observation
from pagedkv.model_tests.lockstep.safety_session import SafetySession
from pagedkv.model_tests.lockstep.views import Views
from pagedkv.model_tests.machines.draws import (
    BOOLEANS,
    FOLLOW_TEMPLATE,
    integers,
    sampled,
    small_tokens,
)
from pagedkv.model_tests.machines.kv_harness import (
    AbstractKV,
    CachedPrefixes,
    KVSide,
    Writer,
    expected_kv,
    gpu_tables,
    kv_problems,
    table_changes,
)
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import invariants
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.accounting import blocks_for
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError, UnsupportedError
from pagedkv.specs.interface import BlockSpaceManager, BlockSpaceManagerFactory
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.types import (
    DEFRAG_PAD_SIZES,
    AllocStatus,
    BlockId,
    DefragConfig,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)

T = TypeVar("T")

TEMPLATE: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))
FILLER_TOKEN = 100
"""The first token of ``fill_pool``'s requests: no other step writes tokens this large."""

manager_configs = st.builds(
    ManagerConfig,
    block_size=sampled((1, 2, 2, 3, 4)),
    num_gpu_blocks=integers(2, 12),
    num_cpu_blocks=integers(1, 8),
    watermark=sampled((0.0, 0.1, 0.2, 0.3)),
    sliding_window=sampled((None, None, 1, 2, 3, 5)),
    enable_caching=BOOLEANS,
)

Contract = Literal["any", "scheduler"]
"""Which calls the machine makes (``specs/oracle.md`` §1): ``any`` every call the protocol
allows, misuse included; ``scheduler`` only those a scheduler makes: ``allocate`` after
``can_allocate`` said OK, appends after ``can_append_slots`` said yes (else the group is
preempted: swapped out if ``can_swap_out`` says OK, else freed for recomputation), swaps after
``can_swap_*`` said OK, forks, marks and accesses of running (GPU) groups, no misuse."""

SWARM = ("lookahead", "encoder", "parallel sampling", "extra keys", "marks at once")
"""Features a run may leave out (swarm testing, Groce et al. 2012): without some of them, others
get whole runs to build on, and rare combinations come up. The rules are swarmed by Hypothesis
itself: each run of a ``RuleBasedStateMachine`` switches a random share of its rules off
(``FeatureFlags``); leaving rules out here as well halved the runs that make two given calls,
and with them the rate at which lost swap pairs and leaked copy sources were found."""

swarms = st.one_of(st.just(frozenset[str]()), st.frozensets(st.sampled_from(SWARM)))

TABLE_CHANGING = frozenset({"allocate", "append_slots", "fork", "free", "swap_out", "swap_in"})
"""The manager calls after which the engine tells the defragmenter of changed tables."""


def defrag_configs(num_gpu_blocks: int) -> st.SearchStrategy[DefragConfig | None]:
    """No defragmenter (a quarter of runs), or one with small thresholds and caps (the pools here
    are small, so the seed's cap of 512 pairs would never bind), or the seed's buckets."""
    small = st.builds(
        DefragConfig,
        num_blocks=st.just(num_gpu_blocks),
        threshold=sampled((0, 0, 0, 1, 2)),
        pad_sizes=sampled(((1,), (1, 2), (2, 4), (1, 2, 3, 4, 5, 6))),
        reserved=sampled((frozenset({0}), frozenset({0}), frozenset(), frozenset({0, 1}))),
    )
    seeds = st.just(DefragConfig(num_gpu_blocks, 0, DEFRAG_PAD_SIZES))
    return st.one_of(st.none(), small, small, seeds)


def held_references(view: ManagerView, device: Device) -> Counter[BlockId]:
    """What block tables hold on ``device``: one per table entry, one per cross entry, and the
    null block's pin."""
    held: Counter[BlockId] = Counter()
    for seq in view.seqs.values():
        if view.groups[seq.group_id].device is device:
            held.update(b for b in seq.blocks if b != view.null_block)
    for group in view.groups.values():
        if group.cross_device is device:
            held.update(group.cross_blocks)
    if device is Device.GPU and view.null_block is not None:
        held[view.null_block] += 1
    return held


def mapping_problems(view: ManagerView) -> list[str]:
    """I4 (manager §7): tables point only at allocated blocks of their group's device (or the
    null block), each holding the table's tokens for its position; no copy is left pending."""
    problems = []
    size = view.config.block_size
    for seq_id, seq in view.seqs.items():
        group = view.groups.get(seq.group_id)
        if group is None or seq_id not in group.seq_ids:
            problems.append(f"sequence {seq_id} is not a member of group {seq.group_id}")
            continue
        pool = view.pool(group.device)
        placed = [(b, group.device) for b in seq.blocks]
        placed += [(b, group.cross_device) for b in group.cross_blocks]
        for block, device in placed:
            where = view.pool(device)
            if block == view.null_block:
                continue
            if block not in where.config.block_ids or where.blocks[block].ref_count == 0:
                problems.append(
                    f"sequence {seq_id} maps to block {block}, not an allocated"
                    f" {device.value} block"
                )
        if len(seq.blocks) * size < len(seq.tokens):
            problems.append(f"sequence {seq_id} has more tokens than slots")
            continue
        for index, block in enumerate(seq.blocks):
            held = pool.blocks.get(block)
            wanted = seq.tokens[index * size : (index + 1) * size]
            if block != view.null_block and held is not None and held.tokens != wanted:
                problems.append(
                    f"sequence {seq_id}: block {block} at position {index} holds"
                    f" {list(held.tokens)}, the table's tokens there are {list(wanted)}"
                )
    for device in (Device.GPU, Device.CPU):
        if view.pool(device).pending_cows:
            problems.append(f"copy-on-write pairs left pending on the {device.value}")
    return problems


def pair_problems(pairs: list[tuple[int, int]], what: str, *, each_block_once: bool) -> list[str]:
    """I4 for a mapping: no block receives two different sources (safety); under pagedkv's
    policy also no source or destination twice (each distinct block moves once)."""
    sources_of: dict[int, set[int]] = {}
    for source, destination in pairs:
        sources_of.setdefault(destination, set()).add(source)
    if any(len(sources) > 1 for sources in sources_of.values()):
        return [f"{what} mapping sends two sources into one block: {pairs}"]
    if each_block_once and len({s for s, _ in pairs}) != len(pairs):
        return [f"{what} mapping is not injective: {pairs}"]
    return []


Mode = Literal["exact", "isomorphic", "safety"]


class ManagerLockstep(RuleBasedStateMachine):
    """Subclass and set ``make_target`` to check another manager: against the reference under
    ``policy`` (exact or isomorphic mode), or alone against the safety tier."""

    make_target: ClassVar[BlockSpaceManagerFactory]
    mode: ClassVar[Mode] = "exact"
    policy: ClassVar[Policy] = PAGEDKV
    contract: ClassVar[Contract] = "any"
    defragmenting: ClassVar[bool] = False
    """Whether a run may draw a defragmenter (``DefragmentingManagerLockstep``)."""
    target_kv: ClassVar[Callable[[ManagerConfig, DefragConfig | None], KVSide] | None] = None
    """The target's KV (its tensors, moved by its kernels), when it has one to check."""
    last_run: ClassVar[capture.RunRecord | None] = None
    on_run_end: ClassVar[capture.RunHook | None] = None
    on_declined: ClassVar[capture.DeclineHook | None] = None
    release_target: ClassVar[capture.ReleaseHook | None] = None
    groups = Bundle("groups")

    def __init__(self) -> None:
        super().__init__()
        self.model: ReferenceBlockSpaceManager | None = None
        self.target: BlockSpaceManager
        self.next_id = 0
        self.clock = 0.0
        self.pending: capture.Call | None = None
        self.checking_config: ManagerConfig | None = None
        self.ending_error: PagedKVError | None = None
        self.off: frozenset[str] = frozenset()
        self.scores: dict[str, float] = {}
        """The highest of each steering score this run (``hypothesis.target`` takes one per
        label per run: they are handed over at teardown)."""
        """The rules and features this run leaves out (``SWARM``)."""
        self.window_releases = 0

    def on(self, name: str) -> bool:
        return name not in self.off

    def _score(self, value: float, label: str) -> None:
        self.scores[label] = max(value, self.scores.get(label, value))

    @property
    def scheduler(self) -> bool:
        return self.contract == "scheduler"

    @initialize(target=groups, config=manager_configs, off=swarms, data=st.data())
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
        self.views = Views(self.model, self.target)
        make_kv = type(self).target_kv
        self.target_side: KVSide | None = None if make_kv is None else make_kv(config, self.defrag)
        self.prefixes = CachedPrefixes()
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
        """One call on the session. Once the run has ended, the call is not made: the error
        that ended it stands for every later one, and the rules go by without calls."""
        method = call.name
        if self.ended:
            assert self.ending_error is not None  # set by the call that ended the run
            return self.ending_error
        if method in self.policy.unsupported:  # the engine has no such call: nobody makes it
            return UnsupportedError(f"{method} is not offered under this policy")
        event(f"rule: {method}")
        self.pending = (method, call.args)
        self.views.changed()
        outcome = self.session.call(call)
        self.pending = None
        if self.session.ended:
            event("outcome: run ended by a call that failed midway")
            assert isinstance(outcome, PagedKVError)  # a run ends on a failed call
            self.ending_error = outcome
        elif self.defrag is not None and method in TABLE_CHANGING:
            self.tell_defragmenters()
        return outcome

    def model_view(self) -> ManagerView | None:
        """The model's view, rendered once per state (``views.py``)."""
        return None if self.model is None else self.views.model()

    def target_view(self) -> ManagerView:
        return self.views.target()  # type: ignore[no-any-return]

    def tell_defragmenters(self) -> None:
        """The engine's ``update_state``: the GPU tables that changed, and those that are gone."""
        assert self.model is not None
        held = self.model_kv.defrag_view()
        assert held is not None
        changed, finished = table_changes(held.tables, gpu_tables(self.views.model()))
        if changed or finished:
            for side in self.kv_sides():
                side.update_tables(changed, finished)

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

    # --- steering (hypothesis.target): runs that press on the pool's edges score higher --------

    def _free_gpu(self) -> int:
        """The GPU blocks free or evictable, as the model has them or (safety) as last seen."""
        view = self.model_view()
        if view is not None:
            return len(view.gpu.free) + len(view.gpu.evictable)
        seen: Observation = getattr(self.session, "seen")  # noqa: B009 (the safety session's)
        return seen.free[Device.GPU]

    def _steer_scarcity(self, label: str) -> None:
        self._score(1.0 - self._free_gpu() / self.config.num_gpu_blocks, label=label)

    def _steer_sharing(self) -> None:
        """How many GPU blocks several live tables share (copy-on-write and dedup need them)."""
        view = self.model_view()
        if view is None:
            return
        held = held_references(view, Device.GPU)
        self._score(float(sum(1 for count in held.values() if count > 1)), label="shared blocks")

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

    # --- admission ----------------------------------------------------------------------------

    @rule(target=groups, data=st.data())
    def allocate(self, data: st.DataObject) -> int:
        return self._admit(self._prompt(data), data)

    def _prompt(self, data: st.DataObject) -> list[Token]:
        length = data.draw(integers(1, 3 * self.config.block_size + 1), label="prompt length")
        return self._tokens(data, 0, length)

    @rule(target=groups, group=groups, data=st.data())
    def next_turn(self, group: int, data: st.DataObject) -> int:
        """A conversation's next turn: the request finishes (its cached blocks wait in the
        evictor, or stay shared), and a new one arrives whose prompt is the old sequence's
        tokens and a few more, under the same extra key: its prefix is found again, revived
        from the evictor, hits that a scheduler's questions and the marks must count right."""
        members = self.ledger.members(group)
        if not members:
            return self._admit(self._prompt(data), data)
        history = list(self.ledger.seqs[members[0]].tokens)
        key = self.ledger.groups[group].extra_key
        for seq_id in members:
            self.both(calls.free(seq_id))
        more = data.draw(integers(1, self.config.block_size), label="new tokens")
        return self._admit([*history, *self._tokens(data, len(history), more)], data, key)

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

    # --- decoding -----------------------------------------------------------------------------

    @rule(data=st.data())
    def decode_step(self, data: st.DataObject) -> None:
        """One scheduler iteration: every group on the GPU gets its decode step. This is what
        fills the pool, so it is what makes copy-on-write and window releases common. First,
        as a scheduler looks at its swapped queue, each group on the CPU is asked about (with a
        lookahead, or one at the GPU's edge) and comes back if it may."""
        for group_id, group in sorted(self.ledger.groups.items()):
            if group.device is Device.CPU:
                edge = data.draw(sampled((None, 2, 1, 0, -1)), label="edge")
                self._swap_in(group_id, 1, edge, only_when_allowed=True)
        for group_id, group in sorted(self.ledger.groups.items()):
            if group.device is Device.GPU:
                self.append_slots(group_id, data)
        if self.config.enable_caching:  # the iteration's statistics, as vLLM's scheduler logs
            for device in (Device.GPU, Device.CPU):
                self.both(calls.get_prefix_cache_hit_rate(device))
        if self.defrag is not None:  # an engine defragments once per scheduler iteration
            self.run_defragmenters()

    @rule(group=groups, data=st.data())
    def append_slots(self, group: int, data: st.DataObject) -> None:
        """One decode step for a group: ask, then append to each of its sequences."""
        lookaheads = (0, 0, 1, 2) if self._lookahead_on() else (0,)
        self._decode(group, data, lookaheads)

    def _lookahead_on(self) -> bool:
        return self.policy.lookahead and self.on("lookahead")

    def _decode(self, group: int, data: st.DataObject, lookaheads: tuple[int, ...]) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return  # a scheduler decodes running groups only
        num_new = data.draw(sampled((1, 1, 1, 0, 2, 3)), label="new tokens")
        lookahead = data.draw(sampled(lookaheads), label="lookahead")
        self._steer_scarcity("scarcity at append")
        members = self.ledger.members(group)
        if members and self.ledger.device_of(group) is Device.GPU:
            # a scheduler's questions each iteration (what its prefill may skip, what is
            # cached), and its stamp on the blocks of each sequence it schedules (vLLM's
            # access_all_blocks_in_seq), so that the eviction order follows who ran last
            self.both(calls.get_common_computed_block_ids(members))
            self.both(calls.get_num_cached_tokens(members[0]))
            self.clock += 1.0
            for seq_id in members:
                self.both(calls.access_all_blocks_in_seq(seq_id, self.clock))
        allowed = self.both(calls.can_append_slots(group, num_new, lookahead))
        if isinstance(allowed, PagedKVError):
            return
        if not allowed:
            event("outcome: can_append_slots refused")
            # a scheduler preempts it (swapped out, or freed to be recomputed); under the any
            # contract, half the time, else the appends are made anyway and must be refused
            if self.scheduler or data.draw(BOOLEANS, label="preempted"):
                self._preempt(group)
                return
        scheduled: dict[int, range] = {}
        for seq_id in self.ledger.members(group):
            start = len(self.ledger.seqs[seq_id].tokens)
            tokens = self._tokens(data, start, num_new)
            before = self.model_view()
            pairs = self.both(calls.append_slots(seq_id, tokens, lookahead))
            if allowed:
                assert not isinstance(pairs, PagedKVError), f"can_append_slots said yes: {pairs!r}"
            if isinstance(pairs, list):
                assert not pair_problems(pairs, "copy-on-write", each_block_once=False)
                if pairs:
                    event("outcome: copy-on-write")
                for side in self.kv_sides():
                    side.run_copies(pairs)
                scheduled[seq_id] = range(start, start + num_new)
                self._note_window(before, seq_id)
        if scheduled:
            self.run_model(group, scheduled, data)

    def _preempt(self, group: int) -> None:
        """What a scheduler does with a group it cannot decode: swap it out if the CPU has room,
        else free it (it will be recomputed from its prompt)."""
        status = self.both(calls.can_swap_out(group))
        if status is AllocStatus.OK:
            event("outcome: preempted by swap")
            pairs = self.both(calls.swap_out(group))
            if isinstance(pairs, list):
                for side in self.kv_sides():
                    side.run_swap(pairs, Device.CPU)
            return
        event("outcome: preempted by recomputation")
        for seq_id in self.ledger.members(group):
            self.both(calls.free(seq_id))

    def _note_window(self, before: ManagerView | None, seq_id: int) -> None:
        after = self.model_view()
        if before is None or after is None or after.null_block is None:
            return
        null = after.null_block
        old = before.seqs[seq_id].blocks
        new = after.seqs[seq_id].blocks
        if any(a != null and b == null for a, b in zip(old, new, strict=False)):
            event("outcome: sliding-window release")
            self.window_releases += 1
            self._score(float(self.window_releases), label="window releases")

    @rule(group=groups, data=st.data())
    def fork(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group)
        if not members or not self.policy.copy_on_write:  # a fork shares a partial last block
            return
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return  # a scheduler forks running sequences only
        parent = data.draw(st.sampled_from(members), label="parent")
        self.both(calls.fork(parent, self.fresh_id()))
        self._steer_sharing()

    @rule(group=groups, data=st.data())
    def free(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group)
        if not members:
            return
        self.both(calls.free(data.draw(st.sampled_from(members), label="sequence")))

    # --- swapping -----------------------------------------------------------------------------

    def _each_block_once(self) -> bool:
        return self.mode != "safety" and self.policy.swap_pairs == "copies"

    @rule(group=groups)
    def swap_out(self, group: int) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return
        status = self.both(calls.can_swap_out(group))
        if isinstance(status, PagedKVError):
            return
        event(f"outcome: can_swap_out {status.name}")
        if self.scheduler and status is not AllocStatus.OK:
            return
        pairs = self.both(calls.swap_out(group))
        if status is AllocStatus.OK:
            assert isinstance(pairs, list), f"can_swap_out said OK, then {pairs!r}"
        if status is AllocStatus.NEVER:
            assert isinstance(pairs, OutOfBlocksError), "a NEVER swap out succeeded"
        if isinstance(pairs, list):
            assert not pair_problems(pairs, "swap out", each_block_once=self._each_block_once())
            event("outcome: swapped out")
            for side in self.kv_sides():
                side.run_swap(pairs, Device.CPU)

    @rule(group=groups, lookahead=sampled((0, 0, 1, 3)), edge=sampled((None, None, 2, 1, 0, -1)))
    def swap_in(self, group: int, lookahead: int, edge: int | None) -> None:
        self._swap_in(group, lookahead, edge, only_when_allowed=self.scheduler)

    def _swap_in(
        self, group: int, lookahead: int, edge: int | None, *, only_when_allowed: bool
    ) -> None:
        """``can_swap_in``, then the swap (only after an OK, if ``only_when_allowed``); with an
        ``edge``, the lookahead is the one that brings the swap-in's worst case to ``edge``
        blocks short of the GPU's capacity (the watermark's blocks lie there: boundary values
        for each answer and its promise)."""
        if only_when_allowed and self.ledger.device_of(group) is not Device.CPU:
            return
        if edge is not None:
            lookahead = self._edge_lookahead(group, edge)
        lookahead = lookahead if self._lookahead_on() else 0
        self._steer_scarcity("scarcity at swap-in")
        status = self.both(calls.can_swap_in(group, lookahead))
        if isinstance(status, PagedKVError):
            return
        event(f"outcome: can_swap_in {status.name}")
        if only_when_allowed and status is not AllocStatus.OK:
            return
        pairs = self.both(calls.swap_in(group))
        if status is AllocStatus.OK:
            assert isinstance(pairs, list), f"can_swap_in said OK, then {pairs!r}"
        if isinstance(pairs, list):
            assert not pair_problems(pairs, "swap in", each_block_once=self._each_block_once())
            event("outcome: swapped in")
            for side in self.kv_sides():
                side.run_swap(pairs, Device.GPU)
        if status is AllocStatus.OK and lookahead:
            self._lookahead_promised(group, lookahead)

    def _edge_lookahead(self, group: int, short: int) -> int:
        """The fewest lookahead slots that bring ``group``'s swap-in to ``short`` blocks under
        the GPU's capacity, counted as a block per distinct block of its tables (as the model
        has them; under the safety tier, a block per ``block_size`` tokens of each sequence),
        plus the new blocks each sequence's slots take past its table."""
        members = self.ledger.members(group)
        if not members:
            return 0
        size, view = self.config.block_size, self.model_view()
        lengths = [len(self.ledger.seqs[s].tokens) for s in members]
        tables: list[Sequence[int]]
        if view is None:
            tables = [range(blocks_for(length, size)) for length in lengths]
            held = sum(len(table) for table in tables)
        else:
            tables = [view.seqs[s].blocks for s in members]
            held = len({b for table in tables for b in table if b != view.null_block})
        capacity = self.config.num_gpu_blocks - (self.config.sliding_window is not None)
        for lookahead in range(capacity * size + 1):
            more = sum(
                max(0, blocks_for(length + lookahead, size) - len(table))
                for length, table in zip(lengths, tables, strict=True)
            )
            if held + more >= capacity - short:
                return lookahead
        return 0

    @rule(group=groups, lookahead=sampled((0, 1, 3)))
    def preempt_and_resume(self, group: int, lookahead: int) -> None:
        """A scheduler's preemption by swapping, and the resumption: the group goes to the CPU
        and, once it fits again, back (each step only if its ``can_swap_*`` says OK under the
        scheduler contract)."""
        if self.ledger.device_of(group) is not Device.GPU:
            return
        self.swap_out(group)
        if self.ledger.device_of(group) is Device.CPU:
            self._swap_in(group, lookahead, None, only_when_allowed=self.scheduler)

    def _lookahead_promised(self, group: int, lookahead: int) -> None:
        """An OK from ``can_swap_in(group, n)`` promises room for n lookahead slots as well."""
        for seq_id in self.ledger.members(group):
            result = self.both(calls.append_slots(seq_id, [], lookahead))
            assert not isinstance(result, PagedKVError), (
                f"can_swap_in said OK with {lookahead} lookahead slots, then {result!r}"
            )

    @precondition(lambda self: getattr(self, "defrag", None) is not None)
    @rule(data=st.data())
    def defragment(self, data: st.DataObject) -> None:
        """``defragment()`` at any point; sometimes a request on the GPU finishes first (all its
        sequences freed), which is what leaves holes below live blocks in a serving engine."""
        assert self.model is not None
        view = self.views.model()
        on_gpu = [g for g, group in sorted(view.groups.items()) if group.device is Device.GPU]
        finishes = bool(on_gpu) and data.draw(BOOLEANS, label="a request finishes")
        if finishes:
            group_id = data.draw(st.sampled_from(on_gpu), label="finished group")
            for seq_id in self.ledger.members(group_id):
                self.both(calls.free(seq_id))
        self.run_defragmenters()

    def run_defragmenters(self) -> None:
        """The engine's ``defragment()``: each side's defragmenter decides, remaps and exchanges
        its KV; block ids and tables stay as they are, so every block's KV must still be found
        through ``resolve`` (I5), evictable cached blocks' included."""
        event("rule: defragment")
        outcomes = []
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            before = side.defrag_view()
            pairs = side.defragment()
            after = side.defrag_view()
            assert before is not None and after is not None
            problems = invariants.defragmentation(before, after, pairs)
            assert not problems, f"{name} defragmenter: " + "; ".join(problems)
            outcomes.append((pairs, after))
        pairs, after = outcomes[0]
        for pairs_other, after_other in outcomes[1:]:
            assert pairs_other == pairs, f"target exchanged {pairs_other}, the model {pairs}"
            assert after_other == after, "the target's defragmenter differs from the model's"
        event(f"outcome: defragmented, {'some' if pairs else 'no'} exchanges")
        assert self.model is not None
        evictable = self.views.model().gpu.evictable
        if any(after.backward[used] in evictable for used, _ in pairs):
            # the logical block that sat at the free id now sits where the used one was
            event("outcome: an evictable cached block's KV exchanged away")

    @rule(group=groups, leave=sampled((0, 0, 1, 2, 3, 5)), data=st.data())
    def fill_pool(self, group: int, leave: int, data: st.DataObject) -> None:
        """Drive the GPU to its edge on purpose, for one question: admit one-block requests
        until ``leave`` blocks are free (or admission refuses), then make one step there (a new
        request, or ``group``'s next step: a swap-in with lookahead from the CPU, a decode step
        on the GPU), then let the requests finish, their cached blocks left for eviction. The
        squeeze passes: a filled pool that stayed, with its requests in the bundle, made most
        later steps pick a filler, and lost swap pairs and leaked copy sources were found in
        half as many runs. In a ``steady`` state (with caching, sometimes) the requests are full
        blocks and finish before the step, as a serving engine's pool is once it has run a
        while: nothing free, everything cached and evictable, so that every block the step
        takes evicts one; the step on the GPU is then a whole scheduler iteration."""
        steady = self.config.enable_caching and data.draw(BOOLEANS, label="steady state")
        finishing = []
        for index in range(self.config.num_gpu_blocks):
            if self.ended or self._free_gpu() <= leave:
                break
            prompt = self._filler_tokens(index, steady)
            status = self.both(calls.can_allocate(prompt, 0, None))
            if status is AllocStatus.NEVER or (self.scheduler and status is not AllocStatus.OK):
                break
            group_id, seq_id = self.fresh_id(), self.fresh_id()
            result = self.both(calls.allocate(group_id, [seq_id], prompt, ExtraKey(), None))
            if status is AllocStatus.OK:
                assert not isinstance(result, PagedKVError), f"can_allocate said OK: {result!r}"
            if isinstance(result, PagedKVError):
                break
            self.run_model(group_id, {seq_id: range(len(prompt))}, data)
            finishing.append(seq_id)
        event(f"outcome: pool filled with {min(len(finishing), 3)}+ requests")
        self._steer_scarcity("scarcity after filling")
        if steady:
            for seq_id in finishing:
                self.both(calls.free(seq_id))
            finishing = []
        if data.draw(sampled((False, False, True)), label="a new request"):
            finishing += self.ledger.members(self._admit(self._prompt(data), data))
        elif self.ledger.device_of(group) is Device.CPU:
            lookahead = data.draw(sampled((1, 2, 3)), label="lookahead")
            self._swap_in(group, lookahead, None, only_when_allowed=self.scheduler)
        elif steady:  # a scheduler iteration there: each running group decodes in turn
            self.decode_step(data)
        elif self.ledger.members(group):  # a decode step whose lookahead takes blocks
            self._decode(group, data, (1, 2, 3) if self._lookahead_on() else (0,))
        for seq_id in finishing:
            self.both(calls.free(seq_id))

    def _filler_tokens(self, index: int, full: bool) -> list[Token]:
        """One block's prompt no other prompt holds (tokens past the machine's usual 0-9), so
        each filler takes a block of its own; unless ``full``, short of a full block where a
        block holds more than one token, so that it is never cached and, given back, leaves
        the evictor as it was (full fillers, evicted first, shielded the blocks whose order is
        under test)."""
        size = self.config.block_size
        return [FILLER_TOKEN + index] * (size if full else max(1, size - 1))

    # --- marks and queries --------------------------------------------------------------------

    @rule(group=groups, data=st.data(), step=sampled((0.0, 1.0, 2.0)))
    def access(self, group: int, data: st.DataObject, step: float) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return
        members = self.ledger.members(group)
        if members:
            self.clock += step
            self.both(
                calls.access_all_blocks_in_seq(data.draw(st.sampled_from(members)), self.clock)
            )

    @rule(group=groups)
    def mark_blocks_as_computed(self, group: int) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return
        self.both(calls.mark_blocks_as_computed(group))

    @rule(group=groups, data=st.data())
    def ask(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group) or [group]
        seq_id = data.draw(st.sampled_from(members), label="sequence")
        queries: list[ManagerCall[object]] = [
            calls.get_common_computed_block_ids(members),
            calls.get_num_cached_tokens(seq_id),
            calls.get_block_table(seq_id),
            calls.get_cross_block_table(group),
            calls.get_num_free_gpu_blocks(),
            calls.get_num_free_cpu_blocks(),
            calls.get_prefix_cache_hit_rate(Device.GPU),
            calls.get_prefix_cache_hit_rate(Device.CPU),
        ]
        query = data.draw(st.sampled_from(queries), label="query")
        result = self.both(query)
        if query.name == "get_common_computed_block_ids" and result:
            event("outcome: a common computed prefix")
        if query.name == "get_num_cached_tokens" and result:
            event("outcome: cached tokens")

    @rule(device=sampled((None, Device.GPU, Device.CPU)))
    def reset_prefix_cache(self, device: Device | None) -> None:
        done = self.both(calls.reset_prefix_cache(device))
        event(f"outcome: reset {'done' if done else 'refused'}")

    # --- calls that must fail -----------------------------------------------------------------

    @precondition(lambda self: self.mode != "safety" and not self.scheduler)
    @rule(group=groups, data=st.data())
    def misuse(self, group: int, data: st.DataObject) -> None:
        """A call the spec refuses (checked against the reference; the safety tier leaves
        argument checking to the policy)."""
        members = self.ledger.members(group)
        device = self.ledger.device_of(group)
        wrong: list[ManagerCall[object]] = [
            calls.free(10_000),
            calls.append_slots(10_000, [1]),
            calls.fork(10_000, self.fresh_id()),
            calls.can_swap_out(10_000),
            calls.allocate(self.fresh_id(), [self.fresh_id()], []),
            calls.allocate(self.fresh_id(), [], [1]),
            calls.can_allocate([1], -1),
            calls.get_prefix_cache_hit_rate(cast(Device, "gpu")),  # not a Device, on purpose
        ]
        if members:
            known = members[0]
            wrong += [
                calls.allocate(self.fresh_id(), [known], [1]),
                calls.allocate(group, [self.fresh_id()], [1]),
                calls.fork(known, known),
                calls.append_slots(known, [-5]),
                calls.access_all_blocks_in_seq(known, float("inf")),
            ]
        view = self.model_view()
        if device is Device.GPU and view is not None:
            wrong += [calls.swap_in(group), calls.can_swap_in(group)]
            room = len(view.seqs[known].blocks) * self.config.block_size
            wrong.append(calls.append_slots(known, [1] * (room + 40)))
        if device is Device.CPU:
            wrong += [
                calls.swap_out(group),
                calls.append_slots(known, [1]),
                calls.can_append_slots(group),
            ]
        if self.config.enable_caching or self.config.sliding_window is not None:
            wrong.append(calls.allocate(self.fresh_id(), [self.fresh_id()], [1], ExtraKey(), [1]))
        call = data.draw(st.sampled_from(wrong), label="call")
        result = self.both(call)
        if not self.ended:
            assert isinstance(result, PagedKVError), f"{call} was accepted"

    @precondition(lambda self: self.mode != "safety")
    @rule(
        gpu=integers(0, 2),
        cpu=integers(0, 2),
        watermark=sampled((0.0, 1.0, -0.1)),
        window=sampled((None, 0, 2)),
    )
    def bad_configuration(self, gpu: int, cpu: int, watermark: float, window: int | None) -> None:
        config = ManagerConfig(2, gpu, cpu, watermark, window)
        self.checking_config = config
        outcomes = [
            construction_outcome(factory, config)
            for factory in (
                partial(ReferenceBlockSpaceManager, policy=self.policy),
                type(self).make_target,
            )
        ]
        if outcomes[1] != "UnsupportedError":  # one the target declines is not compared
            assert outcomes[0] == outcomes[1], (
                f"{config}: model {outcomes[0]}, target {outcomes[1]}"
            )
        self.checking_config = None

    def teardown(self) -> None:
        for label, value in sorted(self.scores.items()):
            target(value, label=label)
        capture.finish(self, "manager")

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        if self.model is not None and self.mode == "exact":
            model, target = self.model_view(), self.target_view()
            passed = self.passed_checks.get("same state")
            # both views are the very ones that passed until a call renders them anew
            if passed is None or passed[0] is not model or passed[1] is not target:
                assert_same_state(model, target, "manager state")
                self.passed_checks["same state"] = (model, target)

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

    @invariant()
    def kv_data_intact(self) -> None:
        """I5, on the model and on a target with tensors (the safety session checks its own)."""
        if self.model is None or self.unchanged_since_passed("kv"):
            return
        view = self.views.model()
        self.prefixes.record(view)
        # exact mode: same_state holds the target's tables equal to the model's, so what each
        # slot must hold is computed once, from the model's view
        expected = expected_kv(view, self.prefixes)
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            problems = kv_problems(side, expected)
            assert not problems, f"{name} KV: " + "; ".join(problems)

    @invariant()
    def defragmenters_agree(self) -> None:
        """I4 for each side's defragmenter: inverse tables, reserved ids in place, ref counts as
        the GPU tables hold; and the target's equals the model's (exact mode)."""
        if getattr(self, "defrag", None) is None or self.model is None:
            return
        if self.unchanged_since_passed("defragmenters"):
            return
        tables = gpu_tables(self.views.model())
        views = []
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            view = side.defrag_view()
            assert view is not None
            problems = invariants.defragmenter_state(view, tables)
            assert not problems, f"{name} defragmenter: " + "; ".join(problems)
            views.append(view)
        assert all(view == views[0] for view in views), "the defragmenters differ"

    @invariant()
    def invariants_hold(self) -> None:
        if self.model is None or self.unchanged_since_passed("invariants"):
            return
        # exact mode: same_state holds the target's view equal to the model's
        view = self.views.model()
        problems = mapping_problems(view)
        for device in (Device.GPU, Device.CPU):
            pool = view.pool(device)
            problems += invariants.ref_counts(pool, held_references(view, device))
            problems += invariants.pool_invariants(pool)
        assert not problems, "model: " + "; ".join(problems)


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
