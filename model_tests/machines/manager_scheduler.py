"""The scheduler iteration, and the pool driven to its edge: the rules that act on every group
at once, as an engine's step does."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pagedkv.model_tests.machines.draws import BOOLEANS, sampled
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.manager_base import GROUPS
from pagedkv.model_tests.machines.manager_defrag import Defragmentation
from pagedkv.model_tests.machines.manager_draws import FILLER_TOKEN
from pagedkv.model_tests.machines.manager_rules import ProtocolRules
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.types import AllocStatus, Device, ExtraKey, Token

T = TypeVar("T")


class SchedulerIteration(ProtocolRules, Defragmentation):
    """Whole iterations: every group decodes in turn; the pool filled, then one step there."""

    @rule(data=DATA)
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

    @rule(group=GROUPS, leave=sampled((0, 0, 1, 2, 3, 5)), data=DATA)
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
