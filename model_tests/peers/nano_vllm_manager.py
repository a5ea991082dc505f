"""nano-vllm's ``BlockManager`` (the published ``nano-vllm-fork`` wheel) behind pagedkv's
``BlockSpaceManager``.

nano-vllm has one GPU pool, prefix caching always on, no groups, no fork, no swap, no lookahead
slots, no sliding window, no watermark, no computed marks and no access times. The adapter plays
its scheduler: it owns the sequences (ids, groups, arguments checked with
``pagedkv.specs.validation``) and maps each call onto the block manager's own:

- ``can_allocate(prompt, L)``: ``can_allocate`` of a probe sequence of the prompt and ``L``
  placeholder tokens; yes is ``OK``, no is ``LATER`` (nano-vllm has no NEVER).
- ``allocate(g, seq_ids, prompt)``: one ``allocate`` per sequence, as nano-vllm serves ``n``
  samples of one prompt: separate sequences sharing full blocks through its hash table.
- ``append_slots(seq, tokens)``: per token, ``append_token`` then ``may_append`` (nano-vllm
  appends one token per step); ``can_append_slots(g, n)``: its ``can_append`` rule (a token at a
  position that is a multiple of the block size takes a new block) summed over the group.
- ``free``: ``deallocate``. Out of blocks is nano-vllm's ``IndexError`` on its empty free list.
- ``access_all_blocks_in_seq`` and ``mark_blocks_as_computed`` are notifications nano-vllm does
  not need (it keeps no access times and no computed marks): they change nothing.
- it has no CPU pool: its free CPU count is the configured one, never touched (swap is lacked).

Lacked (``UnsupportedError``): the swaps, ``fork``, ``get_common_computed_block_ids``, the hit
rate, ``reset_prefix_cache``; lookahead slots and encoder prompts are refused the same way.
``serves`` is the configurations it can run: prefix caching on, no window, block size >= 2 (its
own config demands multiples of 256; its append rule ``len % block_size == 1`` breaks at 1); any
other is declined with ``UnsupportedError`` when the manager is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.admission import new_ids
from pagedkv.model_tests.peers.engine_tokens import EngineTokens
from pagedkv.model_tests.peers.standins import nano_vllm
from pagedkv.model_tests.peers.standins.nano_vllm import Sequence as NanoSequence
from pagedkv.specs.errors import OutOfBlocksError, UnsupportedError
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
    check_extra_key,
    check_manager_config,
    check_time,
    check_tokens,
    lookup_group,
    lookup_sequence,
)


def modules() -> dict[str, ModuleType]:
    return sources.load(sources.NANO_VLLM, nano_vllm.MODULES, ("nanovllm.engine.block_manager",))


def serves(config: ManagerConfig) -> bool:
    return config.enable_caching and config.sliding_window is None and config.block_size >= 2


Result = TypeVar("Result")


def _call(action: Callable[..., Result], *args: Any) -> Result:
    try:
        return action(*args)
    except IndexError as error:  # free_block_ids[0] of an empty deque
        raise OutOfBlocksError(f"nano-vllm: no free block ({error})") from error


def _unsupported(what: str) -> UnsupportedError:
    return UnsupportedError(f"nano-vllm has no {what}")


@dataclass(frozen=True)
class Switches:
    """Each switch papers over one known difference (``specs/peers.md``); all off by default."""

    hash_extra_key: bool = False
    """D6: requests with different extra keys never share a block: each extra key gets its own
    token ids inside nano-vllm, so its hashes differ (nano-vllm hashes tokens only)."""
    upstream_deallocate: bool = False
    """Free as upstream nano-vllm does (its repository; it has no published wheel): the fork's
    one change, dropping a freed block's hash in ``deallocate``, undone. Each block of the table,
    tail first, loses a holder and at none goes to the end of the free list through the engine's
    own ``_deallocate_block``, its hash kept: cached, and taken in its turn by the list."""


class NanoVllmManager:
    """The lacked operations raise ``UnsupportedError`` (the ``nano-vllm`` profile names them in
    ``unsupported``); a configuration nano-vllm does not serve is declined the same way, when the
    manager is made (a declared limit: the check draws another)."""

    def __init__(self, config: ManagerConfig, switches: Switches | None = None) -> None:
        check_manager_config(config)
        self.switches = switches or Switches()
        self._engine_tokens = EngineTokens(self.switches.hash_extra_key)
        self._key_of: dict[int, ExtraKey] = {}
        if not serves(config):
            raise UnsupportedError(
                "nano-vllm runs only with prefix caching, no sliding window and block_size >= 2"
                f" (got {config})"
            )
        self._config = config
        manager_class = modules()["nanovllm.engine.block_manager"].BlockManager
        self._nano: Any = manager_class(config.num_gpu_blocks, config.block_size)
        self._seqs: dict[int, NanoSequence] = {}
        self._groups: dict[int, list[int]] = {}
        self._group_of: dict[int, int] = {}

    @property
    def config(self) -> ManagerConfig:
        return self._config

    def _sequence(self, tokens: list[Token], seq_id: int = -1) -> NanoSequence:
        return NanoSequence(tokens, seq_id, self._config.block_size)

    def _seq(self, seq_id: object) -> NanoSequence:
        return lookup_sequence(self._seqs, seq_id)

    # --- admission and decoding ----------------------------------------------------------------

    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        lookahead = check_count("num_lookahead_slots", num_lookahead_slots)
        tokens = check_tokens(prompt)
        if encoder_prompt is not None:
            check_tokens(encoder_prompt)
            raise _unsupported("encoder-decoder models")
        probe = self._sequence([*tokens, *[0] * lookahead])
        return AllocStatus.OK if self._nano.can_allocate(probe) else AllocStatus.LATER

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        gid, ids = new_ids(self._groups, self._seqs, group_id, seq_ids)
        check_extra_key(extra_key)  # nano-vllm's hash has no extra key
        tokens = check_tokens(prompt)
        if encoder_prompt is not None:
            check_tokens(encoder_prompt)
            raise _unsupported("encoder-decoder models")
        self._groups[gid] = []
        for seq_id in ids:
            seq = self._sequence(self._engine_tokens(tokens, extra_key), seq_id)
            self._key_of[seq_id] = extra_key
            _call(self._nano.allocate, seq)
            self._seqs[seq_id] = seq
            self._group_of[seq_id] = gid
            self._groups[gid].append(seq_id)

    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        members = lookup_group(self._groups, group_id)
        num_new = check_count("num_new_tokens", num_new_tokens)
        if check_count("num_lookahead_slots", num_lookahead_slots):
            raise _unsupported("lookahead slots")
        size = self._config.block_size
        needed = sum(
            sum(1 for p in range(len(self._seqs[s]), len(self._seqs[s]) + num_new) if p % size == 0)
            for s in members
        )
        return len(self._nano.free_block_ids) >= needed

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        seq = self._seq(seq_id)
        new_tokens = check_tokens(tokens, allow_empty=True)
        if check_count("num_lookahead_slots", num_lookahead_slots):
            raise _unsupported("lookahead slots")
        for token in self._engine_tokens(new_tokens, self._key_of[seq.seq_id]):
            seq.append_token(token)
            _call(self._nano.may_append, seq)
        return []

    def fork(self, parent_id: int, child_id: int) -> None:
        raise _unsupported("fork")

    def _deallocate_as_upstream(self, seq: NanoSequence) -> None:
        for block_id in reversed(seq.block_table):
            block = self._nano.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._nano._deallocate_block(block_id)
        seq.num_cached_tokens = 0
        seq.block_table.clear()

    def free(self, seq_id: int) -> None:
        seq = self._seq(seq_id)
        gid = self._group_of.pop(seq.seq_id)
        if self.switches.upstream_deallocate:
            self._deallocate_as_upstream(seq)
        else:
            self._nano.deallocate(seq)
        del self._seqs[seq.seq_id]
        self._groups[gid].remove(seq.seq_id)
        if not self._groups[gid]:
            del self._groups[gid]

    # --- swapping: none ------------------------------------------------------------------------

    def can_swap_out(self, group_id: int) -> AllocStatus:
        raise _unsupported("swap")

    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        raise _unsupported("swap")

    def swap_out(self, group_id: int) -> list[CopyPair]:
        raise _unsupported("swap")

    def swap_in(self, group_id: int) -> list[CopyPair]:
        raise _unsupported("swap")

    # --- queries and notifications -------------------------------------------------------------

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return list(self._seq(seq_id).block_table)

    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        lookup_group(self._groups, group_id)
        return []

    def get_num_free_gpu_blocks(self) -> int:
        return len(self._nano.free_block_ids)

    def get_num_free_cpu_blocks(self) -> int:
        return self._config.num_cpu_blocks

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        self._seq(seq_id)
        check_time(now)

    def mark_blocks_as_computed(self, group_id: int) -> None:
        lookup_group(self._groups, group_id)

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        raise _unsupported("computed-block query")

    def get_num_cached_tokens(self, seq_id: int) -> int:
        return int(self._seq(seq_id).num_cached_tokens)

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        raise _unsupported("prefix-cache hit rate")

    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        raise _unsupported("reset_prefix_cache")
