"""A vLLM-style scheduler loop (vLLM 0.6's default scheduler, without chunked prefill) over a
block space manager, recording every call it makes: the operation stream of a workload.

Each step is either a prefill step (waiting requests admitted while ``can_allocate`` says OK,
within a token budget, only when nothing is swapped out) or a decode step (every running group
asks ``can_append_slots`` and appends its sequences' new tokens; when the pool is full the
youngest running group is preempted: swapped out if the CPU has room, else freed and queued again
to be recomputed; groups swapped out come back in FCFS order while they fit). Then, for every
scheduled group, what vLLM's ``schedule()`` asks: each sequence's block table and access time, the
group's common computed blocks; and after the model ran, ``mark_blocks_as_computed``. Finished
sequences are freed; a finished request's next conversation turn arrives a few steps later.

The loop reads the manager's answers, so the stream depends on them; any conforming manager gives
the same answers (they depend on free-block counts only, never on which ids were chosen), so the
stream replays on every implementation that follows the same policy. A profile that lacks an
operation (``Offered``: vLLM 0.6.3 has no ``get_num_cached_tokens``, nano-vllm no fork, swap or
lookahead) is served as its engine's scheduler serves it: the question is not asked (the whole
prompt counts as scheduled), a preemption recomputes, a request samples one sequence, a
speculative one decodes without lookahead slots.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pagedkv.model_tests.bench.requests import Request
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.types import AllocStatus, Token

T = TypeVar("T")

Call = tuple[str, tuple[Any, ...]]

STEP_SECONDS = 0.05
"""The scheduler clock (``now`` of ``access_all_blocks_in_seq``) advances this much a step."""


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int = 256
    max_prefill_tokens: int = 4096
    max_steps: int = 1_000_000
    max_calls: int | None = None
    """Stop after about this many calls (the scaling runs measure a bounded prefix)."""


def digest(result: Any) -> Any:
    """What a replay compares a call's result with: the value itself, except block ids (another
    implementation may choose other ids), of which only the number is kept."""
    if isinstance(result, list):
        return ("list", len(result))
    return result


@dataclass
class Recorder:
    """Forwards calls to a manager and records each with the digest of its result."""

    manager: BlockSpaceManager
    calls: list[Call] = field(default_factory=list)
    outcomes: list[Any] = field(default_factory=list)

    def __call__(self, call: ManagerCall[T]) -> T:
        self.calls.append((call.name, call.args))
        result = call.method(self.manager)(*call.args)
        self.outcomes.append(digest(result))
        return result


@dataclass(frozen=True)
class Offered:
    """What the manager under a profile offers the scheduler (``specs/policy.py``:
    ``unsupported`` and ``lookahead``); everything by default."""

    unsupported: frozenset[str] = frozenset()
    lookahead: bool = True

    def __contains__(self, operation: str) -> bool:
        return operation not in self.unsupported


class Caller(Protocol):
    """What the scheduler calls the manager through (a ``Recorder``)."""

    def __call__(self, call: ManagerCall[T]) -> T: ...


@dataclass
class Group:
    """A running (or swapped-out) request: its group id, sequence ids and progress."""

    request: Request
    group_id: int
    seq_ids: list[int]
    sampled: list[int]
    """Per sequence: output tokens sampled so far."""
    appended: list[int]
    """Per sequence: sampled tokens already given to ``append_slots``."""
    decode_steps: int = 0
    forked: bool = False

    def pending(self, index: int) -> list[Token]:
        return self.request.outputs[index][self.appended[index] : self.sampled[index]]


@dataclass
class Totals:
    steps: int = 0
    scheduled_tokens: int = 0
    """Tokens the model computes: prompt tokens past the cached prefix, and decoded tokens."""
    prefill_steps: int = 0
    preempted_by_swap: int = 0
    preempted_by_recompute: int = 0
    finished: int = 0
    refused: int = 0


class Scheduler:
    def __init__(
        self,
        call: Caller,
        requests: list[Request],
        block_size: int,
        limits: SchedulerLimits,
        offered: Offered | None = None,
    ) -> None:
        self.call = call
        self.offered = offered or Offered()
        self.block_size = block_size
        self.limits = limits
        self.arrivals: deque[Request] = deque(requests)
        self.later: dict[int, list[Request]] = {}
        """Follow-up turns by the step they arrive at."""
        self.waiting: deque[Request] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self.next_id = 0
        self.totals = Totals()
        self.calls_made = 0

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    # --- the loop -------------------------------------------------------------------------------

    def run(self, count_calls: Callable[[], int]) -> Totals:
        step = 0
        while step < self.limits.max_steps and self._work_left():
            if self.limits.max_calls is not None and count_calls() >= self.limits.max_calls:
                break
            self._arrive(step)
            self.step(step)
            step += 1
        self.totals.steps = step
        return self.totals

    def _work_left(self) -> bool:
        return bool(self.arrivals or self.later or self.waiting or self.running or self.swapped)

    def _arrive(self, step: int) -> None:
        while self.arrivals and self.arrivals[0].arrival_step <= step:
            self.waiting.append(self.arrivals.popleft())
        self.waiting.extend(self.later.pop(step, []))

    def step(self, step: int) -> None:
        now = step * STEP_SECONDS
        scheduled: list[Group] = []
        if not self.swapped:
            scheduled = self._admit()
        if scheduled:
            self.totals.prefill_steps += 1
        else:
            scheduled, preempted = self._decode()
            if not preempted:
                scheduled += self._swap_in()
        for group in scheduled:
            for seq_id in group.seq_ids:
                self.call(calls.get_block_table(seq_id))
                self.call(calls.access_all_blocks_in_seq(seq_id, now))
            if "get_common_computed_block_ids" in self.offered:
                self.call(calls.get_common_computed_block_ids(list(group.seq_ids)))
        for group in scheduled:
            self.call(calls.mark_blocks_as_computed(group.group_id))
        for group in scheduled:
            self._sample(group, step)

    # --- prefill --------------------------------------------------------------------------------

    def _admit(self) -> list[Group]:
        admitted: list[Group] = []
        budget = self.limits.max_prefill_tokens
        num_running = sum(len(g.seq_ids) for g in self.running)
        while self.waiting and num_running < self.limits.max_num_seqs:
            request = self.waiting[0]
            status = self.call(calls.can_allocate(request.prompt))
            if status is AllocStatus.NEVER:
                self.waiting.popleft()
                self.totals.refused += 1
                continue
            if status is AllocStatus.LATER or len(request.prompt) > budget:
                break
            self.waiting.popleft()
            budget -= len(request.prompt)
            group = Group(request, self.fresh_id(), [self.fresh_id()], [0], [0])
            self.call(
                calls.allocate(
                    group.group_id, list(group.seq_ids), request.prompt, request.extra_key
                )
            )
            cached = 0
            if "get_num_cached_tokens" in self.offered:
                cached = self.call(calls.get_num_cached_tokens(group.seq_ids[0]))
            self.totals.scheduled_tokens += max(1, len(request.prompt) - cached)
            self.running.append(group)
            admitted.append(group)
            num_running += 1
        return admitted

    # --- decode and preemption ------------------------------------------------------------------

    def _decode(self) -> tuple[list[Group], bool]:
        queue = deque(self.running)
        kept: list[Group] = []
        preempted = False
        while queue:
            group = queue.popleft()
            num_new = max(len(group.pending(i)) for i in range(len(group.seq_ids)))
            while not self.call(
                calls.can_append_slots(group.group_id, num_new, self._lookahead(group))
            ):
                preempted = True
                if queue:
                    self._preempt(queue.pop())
                    continue
                self._preempt(group)
                break
            else:
                self._append(group)
                kept.append(group)
        self.running = kept
        return list(kept), preempted

    def _lookahead(self, group: Group) -> int:
        return group.request.lookahead if self.offered.lookahead else 0

    def _append(self, group: Group) -> None:
        for index, seq_id in enumerate(group.seq_ids):
            tokens = group.pending(index)
            self.call(calls.append_slots(seq_id, tokens, self._lookahead(group)))
            group.appended[index] = group.sampled[index]
            self.totals.scheduled_tokens += len(tokens)

    def _preempt(self, group: Group) -> None:
        swaps = "can_swap_out" in self.offered and "swap_out" in self.offered
        if swaps and self.call(calls.can_swap_out(group.group_id)) is AllocStatus.OK:
            self.call(calls.swap_out(group.group_id))
            self.swapped.append(group)
            self.totals.preempted_by_swap += 1
            return
        for seq_id in group.seq_ids:
            self.call(calls.free(seq_id))
        request = group.request
        done = group.sampled[0]
        again = Request(
            request.request_id,
            (*request.prompt, *request.outputs[0][:done]),
            [request.outputs[0][done:]],
            request.extra_key,
            request.lookahead,
            request.arrival_step,
            request.follow_up,
            request.think_steps,
            request.accepted,
        )
        self.waiting.appendleft(again)
        self.totals.preempted_by_recompute += 1

    def _swap_in(self) -> list[Group]:
        back: list[Group] = []
        while self.swapped:
            group = self.swapped[0]
            status = self.call(calls.can_swap_in(group.group_id, self._lookahead(group)))
            if status is AllocStatus.NEVER:  # it cannot come back: give it up
                self.swapped.popleft()
                for seq_id in group.seq_ids:
                    self.call(calls.free(seq_id))
                self.totals.refused += 1
                continue
            if status is not AllocStatus.OK:
                break
            self.swapped.popleft()
            self.call(calls.swap_in(group.group_id))
            self.running.append(group)
            # can_swap_in promised the lookahead slots, not the tokens sampled before the group
            # left: it decodes now only if they fit, else the next step's decode decides
            num_new = max(len(group.pending(i)) for i in range(len(group.seq_ids)))
            if self.call(calls.can_append_slots(group.group_id, num_new, self._lookahead(group))):
                self._append(group)
                back.append(group)
        return back

    # --- the model's output ---------------------------------------------------------------------

    def _sample(self, group: Group, step: int) -> None:
        """Each sequence samples its next token(s); a request wanting two sequences forks after
        its prefill; a sequence with all its tokens is freed."""
        request = group.request
        accepted = 1
        if request.accepted and group.decode_steps:
            accepted = request.accepted[group.decode_steps % len(request.accepted)]
        group.decode_steps += 1
        for index in range(len(group.seq_ids)):
            wanted = len(request.outputs[index])
            group.sampled[index] = min(wanted, group.sampled[index] + accepted)
        forks = "fork" in self.offered
        if forks and request.num_seqs > len(group.seq_ids) and not group.forked:
            child = self.fresh_id()
            self.call(calls.fork(group.seq_ids[0], child))
            group.seq_ids.append(child)
            group.sampled.append(1)
            group.appended.append(group.appended[0])
            group.forked = True
        self._finish(group, step)

    def _finish(self, group: Group, step: int) -> None:
        request = group.request
        for index in reversed(range(len(group.seq_ids))):
            if group.sampled[index] >= len(request.outputs[index]):
                self.call(calls.free(group.seq_ids[index]))
                del group.seq_ids[index], group.sampled[index], group.appended[index]
        if group.seq_ids:
            return
        self.running.remove(group)
        self.totals.finished += 1
        follow_up = request.follow_up
        if follow_up is not None:
            self.later.setdefault(step + 1 + follow_up.think_steps, []).append(follow_up)
