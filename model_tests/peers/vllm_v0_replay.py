"""vLLM 0.6.3's ``SelfAttnBlockSpaceManager`` driven as vLLM's scheduler drives it, for timing:
the manager level's honest figure beside pagedkv (``pagedkv bench``, ``bench/manager_sections.py``).

The adapter (``vllm_v0_manager.py``) serves the oracle: it checks every argument, looks every id
up, builds a probe group for each ``can_allocate`` and copies every block table into a list of
ints, none of which vLLM's engine does, so timing it would time the adapter. Here a recorded
manager-level stream (``bench/streams.py``) is translated before the clock starts into what
vLLM's engine does for the same requests, and only that runs on the clock:

- a request's ``SequenceGroup`` (and its waiting ``Sequence``) is made when the request arrives,
  at its first ``can_allocate`` (as the engine makes it in ``add_request``: counted);
  ``can_allocate`` and ``allocate`` are then asked with that group, and a group the scheduler
  admits has its sequences set RUNNING, as vLLM's scheduler does;
- a sequence's sampled tokens are appended to its ``Sequence`` (``token_ids.extend``, and the
  computed count set to the tokens before them) when the scheduler next looks at it (its group's
  ``can_append_slots``, or its ``append_slots``), as the engine's output processor appends them
  before the next step is scheduled; then ``append_slots(seq, lookahead)``;
- ``fork`` makes the child ``Sequence`` (``Sequence.fork``), swaps set the statuses, and every
  other call is vLLM's own method called with vLLM's own objects, held directly as the engine
  holds them (each allocated empty before the clock, filled when the engine makes it).

The steps are ``(function, arguments)`` pairs, as pagedkv's side of the bench replays its calls:
vLLM's method itself wherever the engine calls nothing else, else one of ``NativeV0``'s few
methods (the engine's own work around the call: statuses, group membership, token appends).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pagedkv.model_tests.peers import vllm_v0
from pagedkv.model_tests.peers.standins.vllm_v0 import Sequence as VllmSequence
from pagedkv.model_tests.peers.standins.vllm_v0 import SequenceGroup, SequenceStatus
from pagedkv.model_tests.peers.vllm_v0_manager import VllmV0Manager
from pagedkv.specs.types import NO_EXTRA_KEY, AllocStatus, ExtraKey, ManagerConfig, Token

Step = tuple[Callable[..., Any], tuple[Any, ...]]
Call = tuple[str, tuple[Any, ...]]

ARRIVAL = "(request arrives: SequenceGroup made)"
TOKENS = "(sampled tokens appended to the Sequence)"
"""The engine's own steps, named as the per-operation table shows them."""


@dataclass
class _Waiting:
    """A request the scheduler has asked ``can_allocate`` about: its group, and the ids and
    extra key of the allocation that admits it (None: it is never admitted)."""

    group: SequenceGroup
    seqs: list[VllmSequence]
    admitted: tuple[int, list[int], ExtraKey] | None


@dataclass
class _Seq:
    """The translation's view of one sequence: its ``Sequence``, its group, and the tokens of
    its coming ``append_slots`` calls (the first one appended to the ``Sequence`` or not)."""

    seq: VllmSequence
    group: SequenceGroup
    appends: deque[list[Token]] = field(default_factory=deque)
    appended: bool = False


def _blank_group() -> SequenceGroup:
    return SequenceGroup.__new__(SequenceGroup)


def _blank_seq() -> VllmSequence:
    return VllmSequence.__new__(VllmSequence)


class NativeV0:
    """The engine's own steps, on the objects it holds. Each ``SequenceGroup`` and ``Sequence``
    is allocated empty before the clock, so that the steps hold it as the engine holds a direct
    reference; the step that makes it (a request's arrival, a fork) takes over the state of the
    one the adapter's constructor builds, the prompt copied in, on the clock."""

    def __init__(self, config: ManagerConfig) -> None:
        self.adapter = VllmV0Manager(config)
        self.manager: Any = self.adapter.vllm_manager

    def arrive(
        self,
        group: SequenceGroup,
        seqs: list[VllmSequence],
        group_id: int,
        seq_ids: list[int],
        prompt: Sequence[Token],
        key: ExtraKey,
    ) -> None:
        made = self.adapter.vllm_group(group_id, seq_ids, prompt, key)
        for seq, fresh in zip(seqs, made.seqs, strict=True):
            seq.__dict__ = fresh.__dict__
        group.__dict__ = made.__dict__
        group.seqs = list(seqs)

    def allocate(self, group: SequenceGroup) -> None:
        self.manager.allocate(group)
        for seq in group.seqs:
            seq.status = SequenceStatus.RUNNING

    @staticmethod
    def append_tokens(seq: VllmSequence, tokens: list[Token]) -> None:
        token_ids = seq.token_ids
        seq.data.num_computed_tokens = len(token_ids)
        token_ids.extend(tokens)

    def fork(self, parent: VllmSequence, child: VllmSequence, child_id: int, group: Any) -> None:
        child.__dict__ = VllmV0Manager.vllm_child(parent, child_id).__dict__
        self.manager.fork(parent, child)
        group.seqs.append(child)

    def free(self, seq: VllmSequence, group: SequenceGroup) -> None:
        self.manager.free(seq)
        group.seqs.remove(seq)
        if not group.seqs:
            self.manager.free_cross(group)

    def swap_out(self, group: SequenceGroup) -> Any:
        pairs = self.manager.swap_out(group)
        for seq in group.seqs:
            seq.status = SequenceStatus.SWAPPED
        return pairs

    def swap_in(self, group: SequenceGroup) -> Any:
        pairs = self.manager.swap_in(group)
        for seq in group.seqs:
            seq.status = SequenceStatus.RUNNING
        return pairs

    def get_cross_block_table(self, group: SequenceGroup) -> Any:
        if not group.is_encoder_decoder():
            return []
        return self.manager.get_cross_block_table(group)


class Translation:
    """A recorded stream as vLLM's steps (``steps``, each named by ``names``: the stream's call
    it serves or one of the engine's own, ``ARRIVAL`` and ``TOKENS``), over a fresh manager."""

    def __init__(self, config: ManagerConfig, calls: Sequence[Call]) -> None:
        self.native = NativeV0(config)
        self.steps: list[Step] = []
        self.names: list[str] = []
        self.answered: list[int] = []
        """Per call of the stream: the index of the step that answers it."""
        self._admissions: dict[int, deque[tuple[int, list[int], ExtraKey]]] = {}
        self._appends: dict[int, deque[list[Token]]] = {}
        self._waiting: dict[int, _Waiting] = {}
        self._groups: dict[int, SequenceGroup] = {}
        self._seqs: dict[int, _Seq] = {}
        self._look_ahead(calls)
        native, manager = self.native, self.native.manager
        translate: dict[str, Callable[..., None]] = {
            "can_allocate": self._can_allocate,
            "allocate": self._allocate,
            "can_append_slots": self._can_append_slots,
            "append_slots": self._append_slots,
            "fork": self._fork,
            "free": self._free,
            "get_block_table": self._on_seq(manager.get_block_table),
            "access_all_blocks_in_seq": self._on_seq(manager.access_all_blocks_in_seq),
            "get_common_computed_block_ids": self._common_computed,
            "mark_blocks_as_computed": self._on_group(manager.mark_blocks_as_computed, 0),
            "can_swap_out": self._on_group(manager.can_swap_out),
            "swap_out": self._on_group(native.swap_out),
            "can_swap_in": self._on_group(manager.can_swap_in),
            "swap_in": self._on_group(native.swap_in),
            "get_cross_block_table": self._on_group(native.get_cross_block_table),
            "get_num_free_gpu_blocks": self._direct(manager.get_num_free_gpu_blocks),
            "get_num_free_cpu_blocks": self._direct(manager.get_num_free_cpu_blocks),
            "get_prefix_cache_hit_rate": self._hit_rate,
        }
        for method, args in calls:
            if method not in translate:
                raise ValueError(f"the native replay has no step for {method}")
            translate[method](*args)
            self.answered.append(len(self.steps) - 1)
            self.names[-1] = method

    # --- before the clock ---------------------------------------------------------------------

    def _look_ahead(self, calls: Sequence[Call]) -> None:
        """Which allocation admits each prompt, and every sequence's coming appends."""
        for method, args in calls:
            if method == "allocate":
                key = args[3] if len(args) > 3 else NO_EXTRA_KEY
                admitted = (int(args[0]), list(args[1]), key)
                self._admissions.setdefault(id(args[2]), deque()).append(admitted)
            elif method == "append_slots":
                self._appends.setdefault(args[0], deque()).append(list(args[1]))

    def _step(self, name: str, function: Callable[..., Any], *args: Any) -> None:
        self.steps.append((function, args))
        self.names.append(name)

    def _arrive(self, prompt: Sequence[Token]) -> _Waiting:
        admissions = self._admissions.get(id(prompt))
        admitted = admissions.popleft() if admissions else None
        group_id, seq_ids, key = admitted or (-1 - len(self.steps), [-1], NO_EXTRA_KEY)
        group, seqs = _blank_group(), [_blank_seq() for _ in seq_ids]
        self._step(ARRIVAL, self.native.arrive, group, seqs, group_id, seq_ids, prompt, key)
        waiting = self._waiting[id(prompt)] = _Waiting(group, seqs, admitted)
        return waiting

    def _can_allocate(
        self, prompt: Sequence[Token], lookahead: int = 0, encoder: object = None
    ) -> None:
        if encoder is not None:
            raise ValueError("the native replay has no encoder prompts")
        waiting = self._waiting.get(id(prompt)) or self._arrive(prompt)
        self._step("", self.native.manager.can_allocate, waiting.group, lookahead)

    def _allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        key: ExtraKey = NO_EXTRA_KEY,
        encoder: object = None,
    ) -> None:
        if encoder is not None:
            raise ValueError("the native replay has no encoder prompts")
        waiting = self._waiting.pop(id(prompt), None) or self._arrive(prompt)
        self._waiting.pop(id(prompt), None)
        if waiting.admitted != (group_id, list(seq_ids), key):
            raise ValueError(f"group {group_id} is admitted out of the order it was asked about")
        self._groups[group_id] = waiting.group
        for seq_id, seq in zip(seq_ids, waiting.seqs, strict=True):
            appends = self._appends.get(seq_id, deque())
            self._seqs[seq_id] = _Seq(seq, waiting.group, appends)
        self._step("", self.native.allocate, waiting.group)

    def _tokens_in(self, seq: _Seq) -> None:
        """The sequence's next sampled tokens into its ``Sequence``, unless they are there."""
        if seq.appends and not seq.appended:
            seq.appended = True
            self._step(TOKENS, self.native.append_tokens, seq.seq, seq.appends[0])

    def _can_append_slots(self, group_id: int, num_new: int = 1, lookahead: int = 0) -> None:
        group = self._groups[group_id]
        for seq in self._seqs.values():
            if seq.group is group:
                self._tokens_in(seq)
        self._step("", self.native.manager.can_append_slots, group, lookahead)

    def _append_slots(self, seq_id: int, tokens: Sequence[Token], lookahead: int = 0) -> None:
        seq = self._seqs[seq_id]
        self._tokens_in(seq)
        if seq.appends.popleft() != list(tokens):
            raise ValueError(f"sequence {seq_id}'s appends are out of order")
        seq.appended = False
        self._step("", self.native.manager.append_slots, seq.seq, lookahead)

    def _fork(self, parent_id: int, child_id: int) -> None:
        parent = self._seqs[parent_id]
        child = _Seq(_blank_seq(), parent.group, self._appends.get(child_id, deque()))
        self._seqs[child_id] = child
        self._step("", self.native.fork, parent.seq, child.seq, child_id, parent.group)

    def _free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id)
        self._step("", self.native.free, seq.seq, seq.group)

    def _common_computed(self, seq_ids: Sequence[int]) -> None:
        seqs = [self._seqs[s].seq for s in seq_ids]
        self._step("", self.native.manager.get_common_computed_block_ids, seqs)

    def _on_seq(self, function: Callable[..., Any]) -> Callable[..., None]:
        return lambda seq_id, *rest: self._step("", function, self._seqs[seq_id].seq, *rest)

    def _on_group(self, function: Callable[..., Any], *more: Any) -> Callable[..., None]:
        return lambda group_id, *rest: self._step(
            "", function, self._groups[group_id], *rest, *more
        )

    def _direct(self, function: Callable[..., Any]) -> Callable[..., None]:
        return lambda: self._step("", function)

    def _hit_rate(self, device: Any) -> None:
        self._step("", self.native.manager.get_prefix_cache_hit_rate, vllm_v0.DEVICES[device])


class VllmV0Replay:
    """The ``ManagerSide`` of ``model_tests/bench/manager_sections.py`` for vLLM 0.6.3."""

    name = "vLLM 0.6.3 SelfAttnBlockSpaceManager (native)"
    profile = "vllm-v0"

    def __init__(self) -> None:
        self._cpu_offset = 0
        """vLLM numbers each device's blocks from 0; pagedkv's CPU ids follow the GPU's."""

    @property
    def charged(self) -> dict[str, str]:
        return {ARRIVAL: "can_allocate", TOKENS: "append_slots"}

    def prepare(self, config: ManagerConfig, calls: Sequence[Call]) -> Translation:
        self._cpu_offset = config.num_gpu_blocks
        return Translation(config, calls)

    def answer(self, name: str, answer: Any) -> Any:
        """vLLM's answer as the adapter gives it (``vllm_v0_manager.py``): pagedkv's
        ``AllocStatus``, block ids as ints, CPU ids of a swap past the GPU's."""
        if name in ("can_allocate", "can_swap_in"):
            return vllm_v0.alloc_status(answer)
        if name == "can_swap_out":
            return AllocStatus.OK if answer else AllocStatus.LATER
        if name == "can_append_slots":
            return bool(answer)
        if name == "swap_out":
            return [(int(gpu), int(cpu) + self._cpu_offset) for gpu, cpu in answer]
        if name == "swap_in":
            return [(int(cpu) + self._cpu_offset, int(gpu)) for cpu, gpu in answer]
        if isinstance(answer, list):
            return [
                tuple(map(int, item)) if isinstance(item, tuple) else int(item) for item in answer
            ]
        return answer
