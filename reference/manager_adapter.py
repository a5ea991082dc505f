"""The reference block space manager behind the mutable ``pagedkv.specs.interface`` face."""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference import block_manager as ops
from pagedkv.reference.manager_state import (
    DevicePicker,
    ManagerState,
    lowest_ids,
    new_manager,
    to_manager_view,
)
from pagedkv.reference.offered import offered, refuse_lacking
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.policy import PAGEDKV, Policy
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


class ReferenceBlockSpaceManager:
    """``pick`` makes the spec's open allocation choices; the oracle sets it to replay another
    implementation's choices (``pagedkv.reference.allocation.Picker``). ``policy`` selects the
    choices where correct managers differ (``specs/policy.md``); pagedkv's own by default."""

    def __init__(self, config: ManagerConfig, policy: Policy = PAGEDKV) -> None:
        self.state: ManagerState = new_manager(config, policy)
        refuse_lacking(self, policy)
        self.pick: DevicePicker = lowest_ids
        self.atomic = policy.atomic
        """Whether every failed call changes nothing (``specs/safety.md`` S6)."""

    @property
    def config(self) -> ManagerConfig:
        return self.state.config

    @property
    def policy(self) -> Policy:
        return self.state.policy

    def get_null_block(self) -> BlockId | None:
        """The block released window entries point at, once it is taken."""
        return self.state.null_block

    @offered
    def can_allocate(
        self,
        prompt: Sequence[Token],
        num_lookahead_slots: int = 0,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> AllocStatus:
        return ops.can_allocate(self.state, prompt, num_lookahead_slots, encoder_prompt)

    @offered
    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder_prompt: Sequence[Token] | None = None,
    ) -> None:
        self.state = ops.allocate(
            self.state, group_id, seq_ids, prompt, extra_key, encoder_prompt, self.pick
        )

    @offered
    def can_append_slots(
        self, group_id: int, num_new_tokens: int = 1, num_lookahead_slots: int = 0
    ) -> bool:
        return ops.can_append_slots(self.state, group_id, num_new_tokens, num_lookahead_slots)

    @offered
    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], num_lookahead_slots: int = 0
    ) -> list[CopyPair]:
        self.state, pairs = ops.append_slots(
            self.state, seq_id, tokens, num_lookahead_slots, self.pick
        )
        return pairs

    @offered
    def fork(self, parent_id: int, child_id: int) -> None:
        self.state = ops.fork(self.state, parent_id, child_id)

    @offered
    def free(self, seq_id: int) -> None:
        self.state = ops.free(self.state, seq_id)

    @offered
    def can_swap_out(self, group_id: int) -> AllocStatus:
        return ops.can_swap_out(self.state, group_id)

    @offered
    def can_swap_in(self, group_id: int, num_lookahead_slots: int = 0) -> AllocStatus:
        return ops.can_swap_in(self.state, group_id, num_lookahead_slots)

    @offered
    def swap_out(self, group_id: int) -> list[CopyPair]:
        self.state, pairs = ops.swap_out(self.state, group_id, self.pick)
        return pairs

    @offered
    def swap_in(self, group_id: int) -> list[CopyPair]:
        self.state, pairs = ops.swap_in(self.state, group_id, self.pick)
        return pairs

    @offered
    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return ops.get_block_table(self.state, seq_id)

    @offered
    def get_cross_block_table(self, group_id: int) -> list[BlockId]:
        return ops.get_cross_block_table(self.state, group_id)

    @offered
    def get_num_free_gpu_blocks(self) -> int:
        return ops.num_free_blocks(self.state, Device.GPU)

    @offered
    def get_num_free_cpu_blocks(self) -> int:
        return ops.num_free_blocks(self.state, Device.CPU)

    @offered
    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        self.state = ops.access_all_blocks_in_seq(self.state, seq_id, now)

    @offered
    def mark_blocks_as_computed(self, group_id: int) -> None:
        self.state = ops.mark_blocks_as_computed(self.state, group_id)

    @offered
    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        self.state, common = ops.get_common_computed_block_ids(self.state, seq_ids)
        return common

    @offered
    def get_num_cached_tokens(self, seq_id: int) -> int:
        return ops.get_num_cached_tokens(self.state, seq_id)

    @offered
    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        return ops.get_prefix_cache_hit_rate(self.state, device)

    @offered
    def reset_prefix_cache(self, device: Device | None = None) -> bool:
        self.state, done = ops.reset_prefix_cache(self.state, device)
        return done

    def view(self) -> ManagerView:
        return to_manager_view(self.state)
