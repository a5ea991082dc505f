"""The block space manager lockstep machine: the reference and an implementation, step by step.

Groups live in a bundle; a step picks the sequences it acts on among a group's live members.
The configuration (block size, pool sizes, watermark, sliding window, caching) is drawn per run.
After every step both managers must look the same (exact mode), and invariants I1-I4 of
``specs/invariants.md`` must hold on both devices, I5 (KV data) on the model and on a target that
has tensors; every ``can_*`` answer is held to its promise (I7), and a step that raises must leave
both unchanged (I6).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from model_tests.lockstep import capture
from model_tests.lockstep.calls import assert_same_state, construction_outcome
from model_tests.lockstep.manager_session import (
    ExactManagerSession,
    IsomorphicManagerSession,
    ManagerSession,
)
from model_tests.lockstep.views import Views
from model_tests.machines.kv_harness import (
    AbstractKV,
    CachedPrefixes,
    KVSide,
    Writer,
    expected_kv,
    kv_problems,
)
from reference.manager_adapter import ReferenceBlockSpaceManager
from reference.manager_state import ManagerState
from specs import invariants
from specs.errors import OutOfBlocksError, PagedKVError
from specs.interface import BlockSpaceManager, BlockSpaceManagerFactory
from specs.manager_view import ManagerView
from specs.types import AllocStatus, BlockId, Device, ExtraKey, ManagerConfig, Token

TEMPLATE: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))

manager_configs = st.builds(
    ManagerConfig,
    block_size=st.sampled_from([1, 2, 2, 3, 4]),
    num_gpu_blocks=st.integers(2, 12),
    num_cpu_blocks=st.integers(1, 8),
    watermark=st.sampled_from([0.0, 0.0, 0.1, 0.3]),
    sliding_window=st.sampled_from([None, None, 1, 2, 3, 5]),
    enable_caching=st.booleans(),
)


def held_references(view: ManagerView, device: Device) -> Counter[BlockId]:
    """What block tables hold on ``device``: one per table entry, one per cross entry, and the
    null block's pin."""
    held: Counter[BlockId] = Counter()
    for seq in view.seqs.values():
        if view.groups[seq.group_id].device is device:
            held.update(b for b in seq.blocks if b != view.null_block)
    for group in view.groups.values():
        if group.device is device:
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
        for block in (*seq.blocks, *group.cross_blocks):
            if block == view.null_block:
                continue
            if block not in pool.config.block_ids or pool.blocks[block].ref_count == 0:
                problems.append(
                    f"sequence {seq_id} maps to block {block}, not an allocated"
                    f" {group.device.value} block"
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


def pair_problems(pairs: list[tuple[int, int]], what: str) -> list[str]:
    sources = [s for s, _ in pairs]
    destinations = [d for _, d in pairs]
    if len(set(sources)) != len(sources) or len(set(destinations)) != len(destinations):
        return [f"{what} mapping is not injective: {pairs}"]
    return []


class ManagerLockstep(RuleBasedStateMachine):
    """Subclass and set ``make_target`` to check another manager against the reference."""

    make_target: ClassVar[BlockSpaceManagerFactory]
    isomorphic: ClassVar[bool] = False
    target_kv: ClassVar[Callable[[ManagerConfig], KVSide] | None] = None
    """The target's KV (its tensors, moved by its kernels), when it has one to check."""
    last_run: ClassVar[capture.RunRecord | None] = None
    on_run_end: ClassVar[capture.RunHook | None] = None
    release_target: ClassVar[capture.ReleaseHook | None] = None
    groups = Bundle("groups")

    def __init__(self) -> None:
        super().__init__()
        self.model: ReferenceBlockSpaceManager
        self.target: BlockSpaceManager
        self.next_id = 0
        self.clock = 0.0
        self.pending: capture.Call | None = None
        self.checking_config: ManagerConfig | None = None

    @initialize(config=manager_configs)
    def create_managers(self, config: ManagerConfig) -> None:
        self.model = ReferenceBlockSpaceManager(config)
        self.target = type(self).make_target(config)
        self.session: ManagerSession
        if self.isomorphic:
            self.session = IsomorphicManagerSession(self.model, self.target)
        else:
            self.session = ExactManagerSession(self.model, self.target)
        self.views = Views(self.model, self.target)
        self.model_kv: KVSide = AbstractKV(config)
        make_kv = type(self).target_kv
        self.target_side: KVSide | None = None if make_kv is None else make_kv(config)
        self.prefixes = CachedPrefixes()
        event(f"config: caching={config.enable_caching}, window={config.sliding_window}")

    def both(self, method: str, *args: Any) -> Any:
        event(f"rule: {method}")
        self.pending = (method, args)
        self.views.changed()
        outcome = self.session.call(method, *args)
        self.pending = None
        return outcome

    def model_view(self) -> ManagerView:
        view: ManagerView = self.views.model()
        return view

    def target_view(self) -> ManagerView:
        view: ManagerView = self.views.target()
        return view

    def sides(self) -> list[tuple[KVSide, ManagerView]]:
        """Each side's KV with the tables that place it (the target's, in exact mode)."""
        sides = [(self.model_kv, self.model_view())]
        if self.target_side is not None:
            sides.append((self.target_side, self.target_view()))
        return sides

    def kv_sides(self) -> list[KVSide]:
        return [side for side, _ in self.sides()]

    def run_model(self, group_id: int, new_tokens: dict[int, range], data: st.DataObject) -> None:
        """The engine's model step: write the new tokens' KV, then (usually at once; sometimes
        a later step does it, as with chunked prefill) mark the group computed. Until then a
        scheduler's questions must not count the new blocks as computed, cache hit or not."""
        view = self.model_view()  # exact mode: the target's tables are the same (checked)
        for side in self.kv_sides():
            for seq_id, positions in new_tokens.items():
                Writer(side).write_tokens(view, seq_id, positions)
        if data.draw(st.sampled_from([True, True, False]), label="mark computed now"):
            self.both("mark_blocks_as_computed", group_id)

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _tokens(self, data: st.DataObject, start: int, count: int) -> list[Token]:
        if data.draw(st.sampled_from([True, True, True, False]), label="follow template"):
            return [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(count)]
        return data.draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))

    # The rules read the reference's frozen state (its tables and groups) rather than render
    # a whole view after every call.

    def _members(self, group_id: int) -> list[int]:
        group = self.model.state.groups.get(group_id)
        return list(group.seq_ids) if group else []

    def _device_of(self, group_id: int) -> Device | None:
        group = self.model.state.groups.get(group_id)
        return group.device if group else None

    # --- admission ----------------------------------------------------------------------------

    @rule(target=groups, data=st.data())
    def allocate(self, data: st.DataObject) -> int:
        size = self.model.config.block_size
        length = data.draw(st.integers(1, 3 * size + 1), label="prompt length")
        prompt = self._tokens(data, 0, length)
        num_seqs = data.draw(st.integers(1, 3), label="sequences")
        key = data.draw(st.sampled_from(EXTRA_KEYS), label="extra key")
        encoder = None
        plain = not self.model.config.enable_caching and self.model.config.sliding_window is None
        if plain and data.draw(st.sampled_from([False, False, True]), label="encoder"):
            encoder = self._tokens(data, 5, data.draw(st.integers(1, 2 * size), label="enc"))
        lookahead = data.draw(st.integers(0, 2), label="lookahead")
        status = self.both("can_allocate", prompt, lookahead, encoder)
        event(f"outcome: can_allocate {status.name}")
        if status is AllocStatus.NEVER:
            fresh = ReferenceBlockSpaceManager(self.model.config)
            assert fresh.can_allocate(prompt, lookahead, encoder) is AllocStatus.NEVER
        group_id = self.fresh_id()
        seq_ids = [self.fresh_id() for _ in range(num_seqs)]
        result = self.both("allocate", group_id, seq_ids, prompt, key, encoder)
        if status is AllocStatus.OK:
            assert not isinstance(result, PagedKVError), f"can_allocate said OK, then {result!r}"
        if not isinstance(result, PagedKVError):
            if encoder is not None:
                for side in self.kv_sides():
                    Writer(side).write_cross(self.model_view(), group_id)
            # the scheduler asks what prefill it may skip before the model runs
            self.both("get_common_computed_block_ids", seq_ids)
            self.both("get_num_cached_tokens", seq_ids[0])
            self.run_model(group_id, {s: range(length) for s in seq_ids}, data)
        return group_id

    # --- decoding -----------------------------------------------------------------------------

    @rule(data=st.data())
    def decode_step(self, data: st.DataObject) -> None:
        """One scheduler iteration: every group on the GPU gets its decode step. This is what
        fills the pool, so it is what makes copy-on-write and window releases common."""
        for group_id, group in sorted(self.model.state.groups.items()):
            if group.device is Device.GPU:
                self.append_slots(group_id, data)

    @rule(group=groups, data=st.data())
    def append_slots(self, group: int, data: st.DataObject) -> None:
        """One decode step for a group: ask, then append to each of its sequences."""
        num_new = data.draw(st.sampled_from([1, 1, 1, 0, 2, 3]), label="new tokens")
        lookahead = data.draw(st.sampled_from([0, 0, 1, 2]), label="lookahead")
        allowed = self.both("can_append_slots", group, num_new, lookahead)
        if isinstance(allowed, PagedKVError):
            return
        if not allowed:
            event("outcome: can_append_slots refused")
        scheduled: dict[int, range] = {}
        for seq_id in self._members(group):
            before = self.model.state
            start = len(before.seqs[seq_id].tokens)
            tokens = self._tokens(data, start, num_new)
            pairs = self.both("append_slots", seq_id, tokens, lookahead)
            if allowed:
                assert not isinstance(pairs, PagedKVError), f"can_append_slots said yes: {pairs!r}"
            if isinstance(pairs, list):
                assert not pair_problems(pairs, "copy-on-write")
                if pairs:
                    event("outcome: copy-on-write")
                for side in self.kv_sides():
                    side.run_copies(pairs)
                scheduled[seq_id] = range(start, start + num_new)
                self._note_window(before, seq_id)
        if scheduled:
            self.run_model(group, scheduled, data)

    def _note_window(self, before: ManagerState, seq_id: int) -> None:
        null = before.null_block
        if null is None:
            return
        old = before.seqs[seq_id].blocks
        new = self.model.state.seqs[seq_id].blocks
        if any(a != null and b == null for a, b in zip(old, new, strict=False)):
            event("outcome: sliding-window release")

    @rule(group=groups, data=st.data())
    def fork(self, group: int, data: st.DataObject) -> None:
        members = self._members(group)
        if not members:
            return
        parent = data.draw(st.sampled_from(members), label="parent")
        self.both("fork", parent, self.fresh_id())

    @rule(group=groups, data=st.data())
    def free(self, group: int, data: st.DataObject) -> None:
        members = self._members(group)
        if not members:
            return
        self.both("free", data.draw(st.sampled_from(members), label="sequence"))

    # --- swapping -----------------------------------------------------------------------------

    @rule(group=groups)
    def swap_out(self, group: int) -> None:
        status = self.both("can_swap_out", group)
        if isinstance(status, PagedKVError):
            return
        event(f"outcome: can_swap_out {status.name}")
        pairs = self.both("swap_out", group)
        if status is AllocStatus.OK:
            assert isinstance(pairs, list), f"can_swap_out said OK, then {pairs!r}"
        if status is AllocStatus.NEVER:
            assert isinstance(pairs, OutOfBlocksError), "a NEVER swap out succeeded"
        if isinstance(pairs, list):
            assert not pair_problems(pairs, "swap out")
            event("outcome: swapped out")
            for side in self.kv_sides():
                side.run_swap(pairs, Device.CPU)

    @rule(group=groups, lookahead=st.sampled_from([0, 0, 1, 3]))
    def swap_in(self, group: int, lookahead: int) -> None:
        status = self.both("can_swap_in", group, lookahead)
        if isinstance(status, PagedKVError):
            return
        event(f"outcome: can_swap_in {status.name}")
        pairs = self.both("swap_in", group)
        if status is AllocStatus.OK:
            assert isinstance(pairs, list), f"can_swap_in said OK, then {pairs!r}"
        if isinstance(pairs, list):
            assert not pair_problems(pairs, "swap in")
            event("outcome: swapped in")
            for side in self.kv_sides():
                side.run_swap(pairs, Device.GPU)
        if status is AllocStatus.OK and lookahead:
            self._lookahead_promised(group, lookahead)

    def _lookahead_promised(self, group: int, lookahead: int) -> None:
        """An OK from ``can_swap_in(group, n)`` promises room for n lookahead slots as well."""
        for seq_id in self._members(group):
            result = self.both("append_slots", seq_id, [], lookahead)
            assert not isinstance(result, PagedKVError), (
                f"can_swap_in said OK with {lookahead} lookahead slots, then {result!r}"
            )

    @precondition(lambda self: type(self).target_kv is not None)  # it moves the target's tensors
    @rule(data=st.data())
    def defragment(self, data: st.DataObject) -> None:
        """Blocks trade storage by in-place exchange; block ids and tables stay as they are, so
        every block's KV must still be found through the storage tables. A free block may
        still hold cached KV, so a one-way copy would lose it. (Which blocks pair up comes from
        one drawn seed: a choice that cannot change what the manager does needs no shrinking.)"""
        seed, count = data.draw(st.tuples(st.integers(0, 2**16), st.integers(1, 6)), label="pairs")
        ids = list(range(self.model.config.num_gpu_blocks))
        order = random.Random(seed).sample(ids, len(ids))
        pairs = [(order[2 * i], order[2 * i + 1]) for i in range(min(count, len(ids) // 2))]
        for side in self.kv_sides():
            side.defragment(pairs)
        event("outcome: defragmented")

    # --- marks and queries --------------------------------------------------------------------

    @rule(group=groups, data=st.data(), step=st.sampled_from([0.0, 1.0, 2.0]))
    def access(self, group: int, data: st.DataObject, step: float) -> None:
        members = self._members(group)
        if members:
            self.clock += step
            self.both("access_all_blocks_in_seq", data.draw(st.sampled_from(members)), self.clock)

    @rule(group=groups)
    def mark_blocks_as_computed(self, group: int) -> None:
        self.both("mark_blocks_as_computed", group)

    @rule(group=groups, data=st.data())
    def ask(self, group: int, data: st.DataObject) -> None:
        members = self._members(group) or [group]
        seq_id = data.draw(st.sampled_from(members), label="sequence")
        queries: list[tuple[Any, ...]] = [
            ("get_common_computed_block_ids", members),
            ("get_num_cached_tokens", seq_id),
            ("get_block_table", seq_id),
            ("get_cross_block_table", group),
            ("get_num_free_gpu_blocks",),
            ("get_num_free_cpu_blocks",),
            ("get_prefix_cache_hit_rate", Device.GPU),
            ("get_prefix_cache_hit_rate", Device.CPU),
        ]
        query = data.draw(st.sampled_from(queries), label="query")
        result = self.both(*query)
        if query[0] == "get_common_computed_block_ids" and result:
            event("outcome: a common computed prefix")
        if query[0] == "get_num_cached_tokens" and result:
            event("outcome: cached tokens")

    @rule(device=st.sampled_from([None, Device.GPU, Device.CPU]))
    def reset_prefix_cache(self, device: Device | None) -> None:
        done = self.both("reset_prefix_cache", device)
        event(f"outcome: reset {'done' if done else 'refused'}")

    # --- calls that must fail -----------------------------------------------------------------

    @rule(group=groups, data=st.data())
    def misuse(self, group: int, data: st.DataObject) -> None:
        members = self._members(group)
        device = self._device_of(group)
        calls: list[tuple[Any, ...]] = [
            ("free", 10_000),
            ("append_slots", 10_000, [1]),
            ("fork", 10_000, self.fresh_id()),
            ("can_swap_out", 10_000),
            ("allocate", self.fresh_id(), [self.fresh_id()], []),
            ("allocate", self.fresh_id(), [], [1]),
            ("can_allocate", [1], -1),
            ("get_prefix_cache_hit_rate", "gpu"),
        ]
        if members:
            known = members[0]
            calls += [
                ("allocate", self.fresh_id(), [known], [1]),
                ("allocate", group, [self.fresh_id()], [1]),
                ("fork", known, known),
                ("append_slots", known, [-5]),
                ("access_all_blocks_in_seq", known, float("inf")),
            ]
        if device is Device.GPU:
            calls += [("swap_in", group), ("can_swap_in", group)]
            room = len(self.model.state.seqs[known].blocks) * self.model.config.block_size
            calls.append(("append_slots", known, [1] * (room + 40)))
        if device is Device.CPU:
            calls += [
                ("swap_out", group),
                ("append_slots", known, [1]),
                ("can_append_slots", group),
            ]
        if not self.model.config.enable_caching and self.model.config.sliding_window is None:
            pass
        else:
            calls.append(("allocate", self.fresh_id(), [self.fresh_id()], [1], ExtraKey(), [1]))
        call = data.draw(st.sampled_from(calls), label="call")
        result = self.both(*call)
        assert isinstance(result, PagedKVError), f"{call} was accepted"

    @rule(
        gpu=st.integers(0, 2),
        cpu=st.integers(0, 2),
        watermark=st.sampled_from([0.0, 1.0, -0.1]),
        window=st.sampled_from([None, 0, 2]),
    )
    def bad_configuration(self, gpu: int, cpu: int, watermark: float, window: int | None) -> None:
        config = ManagerConfig(2, gpu, cpu, watermark, window)
        self.checking_config = config
        outcomes = [
            construction_outcome(factory, config)
            for factory in (ReferenceBlockSpaceManager, type(self).make_target)
        ]
        assert outcomes[0] == outcomes[1], f"{config}: model {outcomes[0]}, target {outcomes[1]}"
        self.checking_config = None

    def teardown(self) -> None:
        capture.finish(self, "manager")

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        if hasattr(self, "model") and not self.isomorphic:
            assert_same_state(self.model_view(), self.target_view(), "manager state")

    # In exact mode ``same_state`` holds the target's view equal to the model's after every
    # step, so what is a function of the view (the invariants, what each KV slot must hold) is
    # computed once, from the model's.

    @invariant()
    def kv_data_intact(self) -> None:
        """I5, on both sides: each side's KV read through the (common) tables."""
        if not hasattr(self, "model"):
            return
        view = self.model_view()
        self.prefixes.record(view)
        expected = expected_kv(view, self.prefixes)
        for name, side in zip(("model", "target"), self.kv_sides(), strict=False):
            problems = kv_problems(side, expected)
            assert not problems, f"{name} KV: " + "; ".join(problems)

    @invariant()
    def invariants_hold(self) -> None:
        if not hasattr(self, "model"):
            return
        view = self.model_view()
        problems = mapping_problems(view)
        for device in (Device.GPU, Device.CPU):
            pool = view.pool(device)
            problems += invariants.ref_counts(pool, held_references(view, device))
            problems += invariants.pool_invariants(pool)
        assert not problems, "; ".join(problems)


def manager_lockstep_case(
    factory: Any,
    *,
    isomorphic: bool = False,
    target_kv: Callable[[ManagerConfig], KVSide] | None = None,
) -> type[ManagerLockstep]:
    """A machine class checking ``factory``'s managers against the reference: in exact mode
    (same ids and state) or in isomorphic mode (ids through a bijection, the protocol only);
    with ``target_kv``, the target's KV data is checked too."""
    return type(
        f"ManagerLockstep_{getattr(factory, '__name__', 'target')}",
        (ManagerLockstep,),
        {
            "make_target": staticmethod(factory),
            "isomorphic": isomorphic,
            "target_kv": None if target_kv is None else staticmethod(target_kv),
        },
    )
