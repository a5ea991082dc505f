"""The rules that drive the protocol, one request or group at a time: admission, decoding,
fork, free, swapping, marks and queries. Each asks first where a scheduler would, and holds
every ``can_*`` answer to its promise (I7)."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pagedkv.model_tests.machines.draws import BOOLEANS, integers, sampled, sampled_list
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.manager_base import GROUPS
from pagedkv.model_tests.machines.manager_invariants import pair_problems
from pagedkv.model_tests.machines.manager_steering import Steering
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.types import AllocStatus, Device

T = TypeVar("T")


class ProtocolRules(Steering):
    """The protocol's calls, as a scheduler (or, under the ``any`` contract, any caller) makes
    them."""

    @rule(target=GROUPS, data=DATA)
    def allocate(self, data: st.DataObject) -> int:
        return self._admit(self._prompt(data), data)

    @rule(target=GROUPS, group=GROUPS, data=DATA)
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

    @rule(group=GROUPS, data=DATA)
    def append_slots(self, group: int, data: st.DataObject) -> None:
        """One decode step for a group: ask, then append to each of its sequences."""
        lookaheads = (0, 0, 1, 2) if self._lookahead_on() else (0,)
        self._decode(group, data, lookaheads)

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

    @rule(group=GROUPS, data=DATA)
    def fork(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group)
        if not members or not self.policy.copy_on_write:  # a fork shares a partial last block
            return
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return  # a scheduler forks running sequences only
        parent = data.draw(sampled_list(members), label="parent")
        self.both(calls.fork(parent, self.fresh_id()))
        self._steer_sharing()

    @rule(group=GROUPS, data=DATA)
    def free(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group)
        if not members:
            return
        self.both(calls.free(data.draw(sampled_list(members), label="sequence")))

    def _each_block_once(self) -> bool:
        return self.mode != "safety" and self.policy.swap_pairs == "copies"

    @rule(group=GROUPS)
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

    @rule(group=GROUPS, lookahead=sampled((0, 0, 1, 3)), edge=sampled((None, None, 2, 1, 0, -1)))
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
            # as vLLM's scheduler asks of every group it runs: what a swap kept of the
            # sequences' computed prefixes shows at once (policy computed_list_swap)
            self.both(calls.get_common_computed_block_ids(self.ledger.members(group) or [group]))
        if status is AllocStatus.OK and lookahead:
            self._lookahead_promised(group, lookahead)

    @rule(group=GROUPS, lookahead=sampled((0, 1, 3)))
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

    @rule(group=GROUPS, data=DATA, step=sampled((0.0, 1.0, 2.0)))
    def access(self, group: int, data: st.DataObject, step: float) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return
        members = self.ledger.members(group)
        if members:
            self.clock += step
            self.both(calls.access_all_blocks_in_seq(data.draw(sampled_list(members)), self.clock))

    @rule(group=GROUPS)
    def mark_blocks_as_computed(self, group: int) -> None:
        if self.scheduler and self.ledger.device_of(group) is not Device.GPU:
            return
        self.both(calls.mark_blocks_as_computed(group))

    @rule(group=GROUPS, data=DATA)
    def ask(self, group: int, data: st.DataObject) -> None:
        members = self.ledger.members(group) or [group]
        seq_id = data.draw(sampled_list(members), label="sequence")
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
