"""The reference request-level manager behind the mutable ``RequestKVManager`` face of
``pagedkv.specs.interface`` (``specs/request_level.md``)."""

from __future__ import annotations

from pagedkv.reference import request_manager as ops
from pagedkv.reference.request_state import RequestState, new_request_state, to_request_view
from pagedkv.specs.policy import PAGEDKV, PROFILES, Policy
from pagedkv.specs.request_types import GroupBlocks, KVEvent, Request, RequestConfig, RequestId
from pagedkv.specs.request_view import RequestManagerView


class ReferenceRequestKVManager:
    """``policy`` selects the choices where correct managers differ (``specs/policy.md``);
    pagedkv's own, which are vLLM v1's, by default."""

    def __init__(self, config: RequestConfig, policy: Policy = PAGEDKV) -> None:
        self.state: RequestState = new_request_state(config, policy)
        self.atomic = True
        """Every call its checks refuse changes nothing (``specs/request_level.md`` §8); a
        ``None`` from ``allocate_slots`` is an answer, not a failure."""

    @property
    def config(self) -> RequestConfig:
        return self.state.config

    @property
    def policy(self) -> Policy:
        return self.state.policy

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        return ops.get_computed_blocks(self.state, request)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        self.state, answer = ops.allocate_slots(
            self.state,
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )
        return answer

    def free(self, request_id: RequestId) -> None:
        self.state = ops.free(self.state, request_id)

    def preempt(self, request_id: RequestId) -> None:
        self.state = ops.preempt(self.state, request_id)

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        return ops.get_block_ids(self.state, request_id)

    def num_free_blocks(self) -> int:
        return ops.num_free_blocks(self.state)

    def usage(self) -> float:
        return ops.usage(self.state)

    def reset_prefix_cache(self) -> bool:
        self.state, done = ops.reset_prefix_cache(self.state)
        return done

    def take_events(self) -> list[KVEvent]:
        self.state, events = ops.take_events(self.state)
        return events

    def view(self) -> RequestManagerView:
        return to_request_view(self.state)


def sglang_reference(config: RequestConfig) -> ReferenceRequestKVManager:
    """The reference under the ``sglang`` profile's policy (``specs/radix_cache.md``): what a
    target checked with ``--profile sglang`` must match (``--target reference`` is pagedkv's)."""
    return ReferenceRequestKVManager(config, PROFILES["sglang"])
