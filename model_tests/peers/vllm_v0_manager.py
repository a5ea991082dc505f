"""vLLM 0.6.3.post1's ``SelfAttnBlockSpaceManager`` behind pagedkv's ``BlockSpaceManager``.

The adapter plays the part of vLLM's scheduler and nothing more. The scheduler owns the
``Sequence`` and ``SequenceGroup`` objects, their ids and statuses (RUNNING on the GPU, SWAPPED on
the CPU), and never calls the block manager with an unknown id, a malformed argument or a group
in the wrong state; so those checks of the protocol are the adapter's
(``pagedkv.specs.validation``, in
the spec's order). Everything about blocks is vLLM's own code, unchanged: which blocks, the
answers of the ``can_*`` questions, copy-on-write pairs, swap mappings, computed marks, and its
failures (``vllm_v0.call``), including failures midway.

How the protocol's calls become the scheduler's:

- ``append_slots(seq, tokens, L)``: the tokens are added to the sequence, then
  ``append_slots(seq, L)`` appends what the block table has not seen. The sequence's
  ``num_computed_tokens`` (which drives vLLM's sliding-window release) is the token count before
  the append: a scheduler without chunked prefill has computed every token it appended before.
- ``can_append_slots(g, n, L)``: asked, as vLLM's scheduler asks it, with the ``n`` new tokens
  already in each running sequence (placeholders, taken out again).
- ``can_allocate``: a probe group with one waiting sequence holding the prompt.
- ``free``: the scheduler's ``free_seq``; the group's cross table goes (``free_cross``) with its
  last sequence. ``get_cross_block_table`` of a group without an encoder prompt is ``[]`` (the
  scheduler asks only encoder-decoder groups; vLLM asserts).
- swap mappings: vLLM returns ids relative to each device; the CPU ids are shifted by
  ``num_gpu_blocks`` into the id space its block tables use.

``get_num_cached_tokens`` and ``reset_prefix_cache`` do not exist in 0.6.3 (later releases added
them): ``UnsupportedError``. ``Switches`` paper over one known difference each, to look past it
while studying the next (all off: the faithful adapter); ``specs/peers.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.peers import vllm_v0
from pagedkv.model_tests.peers.admission import new_ids
from pagedkv.model_tests.peers.engine_tokens import EngineTokens
from pagedkv.model_tests.peers.standins.vllm_v0 import Sequence as VllmSequence
from pagedkv.model_tests.peers.standins.vllm_v0 import SequenceData, SequenceGroup, SequenceStatus
from pagedkv.specs.accounting import blocks_for, blocks_touched_by_append
from pagedkv.specs.errors import DuplicateSequenceError, OutOfBlocksError, UnsupportedError
from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)
from pagedkv.specs.validation import (
    check_count,
    check_device,
    check_extra_key,
    check_id,
    check_manager_config,
    check_on_device,
    check_seq_ids,
    check_time,
    check_tokens,
    lookup_group,
    lookup_sequence,
)

ON = {Device.GPU: SequenceStatus.RUNNING, Device.CPU: SequenceStatus.SWAPPED}


@dataclass(frozen=True)
class Switches:
    """Each switch papers over one known difference (``specs/peers.md``); all off by default."""

    eager_null_block: bool = False
    """Take the sliding window's null block at construction (vLLM takes it at the first
    append: ``CpuGpuBlockAllocator.allocate_or_get_null_block``)."""
    refuse_up_front: bool = False
    """Refuse ``allocate``, ``append_slots`` and the swaps with ``OutOfBlocksError`` before vLLM
    runs when an upper bound of the blocks they take exceeds the free count (vLLM's scheduler
    calls them only after a ``can_*`` said yes; without it they fail midway)."""
    swap_out_status: bool = False
    """Answer ``can_swap_out`` with the ``AllocStatus`` vLLM computes inside (``_can_swap``)
    before ``can_swap_out`` folds it into a bool (no NEVER)."""
    never_without_null: bool = False
    """D1: judge NEVER (``can_allocate``, ``can_swap_in``) against the GPU blocks but the null
    block."""
    no_window_cap: bool = False
    """D2: ``can_allocate`` counts the whole prompt with a window, as ``allocate`` takes it."""
    hash_extra_key: bool = False
    """D4: requests with different extra keys (LoRA id, cache salt) never share a block: each
    extra key gets its own token ids inside vLLM, so its hashes differ (vLLM hashes tokens
    only)."""
    forget_cpu_access: bool = False
    """D8: freeing a swapped-out sequence drops its recorded access time first (vLLM would mark
    its CPU block ids through the GPU allocator and fail)."""


@dataclass
class _Group:
    group: SequenceGroup
    device: Device
    key: ExtraKey = NO_EXTRA_KEY


class VllmV0Manager:
    """Operations with no counterpart in this engine (``get_num_cached_tokens``,
    ``reset_prefix_cache``) raise ``UnsupportedError``; the ``vllm-v0`` profile names them in
    ``unsupported``, so a check never calls them. Not ``atomic``: vLLM's calls fail midway
    unless the matching ``can_*`` said OK first."""

    def __init__(self, config: ManagerConfig, switches: Switches | None = None) -> None:
        # vLLM validates its configuration in its engine config, not in the block manager
        check_manager_config(config)
        self._config = config
        self.switches = switches or Switches()
        manager_class = vllm_v0.modules()["vllm.core.block_manager"].SelfAttnBlockSpaceManager
        self._vllm: Any = manager_class(
            block_size=config.block_size,
            num_gpu_blocks=config.num_gpu_blocks,
            num_cpu_blocks=config.num_cpu_blocks,
            watermark=config.watermark,
            sliding_window=config.sliding_window,
            enable_caching=config.enable_caching,
        )
        self._seqs: dict[int, VllmSequence] = {}
        self._groups: dict[int, _Group] = {}
        self._group_of: dict[int, int] = {}
        if self.switches.eager_null_block and config.sliding_window is not None:
            self._vllm.block_allocator.allocate_or_get_null_block()
        if self.switches.never_without_null and config.sliding_window is not None:
            self._vllm.num_total_gpu_blocks -= 1
            gpu = self._vllm.block_allocator._allocators[vllm_v0.DEVICES[Device.GPU]]
            total = gpu.get_num_total_blocks()
            gpu.get_num_total_blocks = lambda: total - 1
        self._engine_tokens = EngineTokens(self.switches.hash_extra_key)

    @property
    def config(self) -> ManagerConfig:
        return self._config

    @property
    def vllm_manager(self) -> Any:
        """vLLM's own ``SelfAttnBlockSpaceManager``, as configured here (``vllm_v0_replay.py``
        drives it directly, as vLLM's scheduler does)."""
        return self._vllm

    def vllm_group(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        tokens: Sequence[Token],
        key: ExtraKey = NO_EXTRA_KEY,
        encoder: Sequence[Token] | None = None,
    ) -> SequenceGroup:
        """A new waiting vLLM ``SequenceGroup`` of the prompt, one ``Sequence`` per id: vLLM's
        engine makes it when the request arrives."""
        lora = key.lora_id or 0
        seqs = [
            VllmSequence(s, self._engine_tokens(tokens, key), lora_int_id=lora) for s in seq_ids
        ]
        encoder_seq = None if encoder is None else VllmSequence(-group_id - 1, list(encoder))
        return SequenceGroup(str(group_id), seqs, encoder_seq)

    @staticmethod
    def vllm_child(parent: VllmSequence, child_id: int) -> VllmSequence:
        """The copy of ``parent`` vLLM's ``Sequence.fork`` makes."""
        return VllmSequence(
            child_id,
            list(parent.token_ids),
            parent.status,
            parent.lora_int_id,
            SequenceData(parent.data.num_computed_tokens),
        )

    # --- the scheduler's bookkeeping ---------------------------------------------------------

    def _seq(self, seq_id: object) -> VllmSequence:
        return lookup_sequence(self._seqs, seq_id)

    def _group(self, group_id: object) -> _Group:
        return lookup_group(self._groups, group_id)

    def _group_on(self, group_id: object, device: Device, action: str) -> _Group:
        found = self._group(group_id)
        check_on_device(group_id, found.device, device, action)
        return found

    def _group_of_seq(self, seq: VllmSequence) -> _Group:
        return self._groups[self._group_of[seq.seq_id]]

    def _fresh_seq_id(self, seq_id: object) -> int:
        checked = check_id("sequence", seq_id)
        if checked in self._seqs:
            raise DuplicateSequenceError(f"sequence {checked} already exists")
        return checked

    # --- admission -----------------------------------------------------------------------------

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        tokens = check_tokens(prompt)
        encoder = None if encoder_prompt is None else check_tokens(encoder_prompt)
        probe = SequenceGroup(
            "probe",
            [VllmSequence(-1, tokens)],
            None if encoder is None else VllmSequence(-2, encoder),
        )
        cap = self._vllm.max_block_sliding_window
        if self.switches.no_window_cap:
            self._vllm.max_block_sliding_window = None
        try:
            return vllm_v0.alloc_status(vllm_v0.call(self._vllm.can_allocate, probe, lookahead))
        finally:
            self._vllm.max_block_sliding_window = cap

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        gid, ids = new_ids(self._groups, self._seqs, group_id, seq_ids)
        key = check_extra_key(extra_key)
        tokens = check_tokens(prompt)
        encoder = None if encoder_prompt is None else check_tokens(encoder_prompt)
        group = self.vllm_group(gid, ids, tokens, key, encoder)
        seqs = group.seqs
        if self.switches.refuse_up_front:
            vllm_v0.call(self._vllm.can_allocate, group)  # its encoder-decoder refusal first
            needed = blocks_for(len(tokens), self._config.block_size)
            needed += blocks_for(len(encoder or ()), self._config.block_size)
            self._refuse(needed, Device.GPU, f"allocating group {gid}")
        vllm_v0.call(self._vllm.allocate, group)
        for seq in seqs:
            seq.status = SequenceStatus.RUNNING
            self._seqs[seq.seq_id] = seq
            self._group_of[seq.seq_id] = gid
        self._groups[gid] = _Group(group, Device.GPU, key)

    # --- decoding ------------------------------------------------------------------------------

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        found = self._group_on(group_id, Device.GPU, "append to")
        num_new = check_count("num_new_tokens", num_new_tokens)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        running = found.group.get_seqs(SequenceStatus.RUNNING)
        for seq in running:
            seq.token_ids.extend([0] * num_new)
        try:
            answer = vllm_v0.call(self._vllm.can_append_slots, found.group, lookahead)
        finally:
            for seq in running:
                del seq.token_ids[len(seq.token_ids) - num_new :]
        return bool(answer)

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        seq = self._seq(seq_id)
        check_on_device(
            self._group_of[seq.seq_id], self._group_of_seq(seq).device, Device.GPU, "append to"
        )
        new_tokens = check_tokens(tokens, allow_empty=True)
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        before = len(seq.token_ids)
        if self.switches.refuse_up_front:
            table = len(self._vllm.get_block_table(seq))
            needed = blocks_touched_by_append(
                before, table, self._config.block_size, len(new_tokens), lookahead
            )
            self._refuse(needed, Device.GPU, f"appending to sequence {seq.seq_id}")
        seq.data.num_computed_tokens = before
        seq.token_ids.extend(self._engine_tokens(new_tokens, self._group_of_seq(seq).key))
        try:
            pairs = vllm_v0.call(self._vllm.append_slots, seq, lookahead)
        except BaseException:
            del seq.token_ids[before:]
            raise
        return [(int(s), int(d)) for s, d in pairs]

    def fork(self, parent_id: int, child_id: int) -> None:
        parent = self._seq(parent_id)
        child_seq_id = self._fresh_seq_id(child_id)
        child = self.vllm_child(parent, child_seq_id)
        vllm_v0.call(self._vllm.fork, parent, child)
        found = self._group_of_seq(parent)
        found.group.seqs.append(child)
        self._seqs[child_seq_id] = child
        self._group_of[child_seq_id] = self._group_of[parent.seq_id]

    def free(self, seq_id: int) -> None:
        seq = self._seq(seq_id)
        gid = self._group_of[seq.seq_id]
        found = self._groups[gid]
        if self.switches.forget_cpu_access and found.device is Device.CPU:
            self._vllm._last_access_blocks_tracker._seq_last_access[seq.seq_id] = None
        vllm_v0.call(self._vllm.free, seq)
        found.group.seqs.remove(seq)
        del self._seqs[seq.seq_id], self._group_of[seq.seq_id]
        if not found.group.seqs:
            vllm_v0.call(self._vllm.free_cross, found.group)
            del self._groups[gid]

    # --- swapping ------------------------------------------------------------------------------

    def can_swap_out(self, group_id: int) -> AllocStatus:
        found = self._group_on(group_id, Device.GPU, "swap out")
        if self.switches.swap_out_status:
            cpu, running = vllm_v0.DEVICES[Device.CPU], SequenceStatus.RUNNING
            status = vllm_v0.call(self._vllm._can_swap, found.group, cpu, running)
            return vllm_v0.alloc_status(status)
        fits = vllm_v0.call(self._vllm.can_swap_out, found.group)
        return AllocStatus.OK if fits else AllocStatus.LATER

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        found = self._group_on(group_id, Device.CPU, "swap in")
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        return vllm_v0.alloc_status(vllm_v0.call(self._vllm.can_swap_in, found.group, lookahead))

    def _refuse(self, needed: int, device: Device, what: str) -> None:
        free = self._free(device)
        if needed > free:
            raise OutOfBlocksError(f"{what} may take {needed} {device.value} blocks, {free} free")

    def _free(self, device: Device) -> int:
        if device is Device.GPU:
            return self.get_num_free_gpu_blocks()
        return self.get_num_free_cpu_blocks()

    def _refuse_swap(self, found: _Group, to: Device) -> None:
        """vLLM swaps each sequence's table on its own: one destination block per entry."""
        if self.switches.refuse_up_front:
            null = self._vllm.block_allocator._null_block
            null_id = None if null is None else null.block_id
            needed = sum(
                sum(1 for b in self._vllm.get_block_table(seq) if b != null_id)
                for seq in found.group.seqs
            )
            self._refuse(needed, to, f"swapping group {found.group.request_id}")

    def swap_out(self, group_id: int) -> list[CopyPair]:
        found = self._group_on(group_id, Device.GPU, "swap out")
        self._refuse_swap(found, Device.CPU)
        pairs = vllm_v0.call(self._vllm.swap_out, found.group)
        self._moved(found, Device.CPU)
        cpu = self._config.num_gpu_blocks
        return [(int(g), int(c) + cpu) for g, c in pairs]

    def swap_in(self, group_id: int) -> list[CopyPair]:
        found = self._group_on(group_id, Device.CPU, "swap in")
        self._refuse_swap(found, Device.GPU)
        pairs = vllm_v0.call(self._vllm.swap_in, found.group)
        self._moved(found, Device.GPU)
        cpu = self._config.num_gpu_blocks
        return [(int(c) + cpu, int(g)) for c, g in pairs]

    def _moved(self, found: _Group, device: Device) -> None:
        found.device = device
        for seq in found.group.seqs:
            seq.status = ON[device]

    # --- queries and marks ---------------------------------------------------------------------

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return [int(b) for b in vllm_v0.call(self._vllm.get_block_table, self._seq(seq_id))]

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        found = self._group(group_id)
        if not found.group.is_encoder_decoder():
            return []
        return [int(b) for b in vllm_v0.call(self._vllm.get_cross_block_table, found.group)]

    def get_num_free_gpu_blocks(self) -> int:
        return int(self._vllm.get_num_free_gpu_blocks())

    def get_num_free_cpu_blocks(self) -> int:
        return int(self._vllm.get_num_free_cpu_blocks())

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        seq = self._seq(seq_id)
        vllm_v0.call(self._vllm.access_all_blocks_in_seq, seq, check_time(now))

    def mark_blocks_as_computed(self, group_id: int) -> None:
        found = self._group(group_id)
        vllm_v0.call(self._vllm.mark_blocks_as_computed, found.group, token_chunk_size=0)

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        seqs = [self._seq(s) for s in check_seq_ids(seq_ids)]
        for seq in seqs:
            check_on_device(
                self._group_of[seq.seq_id],
                self._group_of_seq(seq).device,
                Device.GPU,
                "read the computed blocks of",
            )
        ids = vllm_v0.call(self._vllm.get_common_computed_block_ids, seqs)
        return [int(b) for b in ids]

    def get_null_block(self) -> BlockId | None:
        """The sliding window's null block, once vLLM has taken it (at the first append)."""
        null = self._vllm.block_allocator._null_block
        return None if null is None else int(null.block_id)

    def get_num_cached_tokens(self, seq_id: int) -> int:
        raise UnsupportedError(
            "vLLM 0.6.3's SelfAttnBlockSpaceManager has no get_num_cached_tokens"
        )

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        theirs = vllm_v0.DEVICES[check_device(device)]
        return float(vllm_v0.call(self._vllm.get_prefix_cache_hit_rate, theirs))

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        raise UnsupportedError("vLLM 0.6.3's SelfAttnBlockSpaceManager has no reset_prefix_cache")
