"""Wrong request-level managers the request machine must catch (``test_request_machine.py``):
the reference with one clause of ``specs/request_level.md`` broken. The first two break a policy
(caught in exact mode, against the reference); the others break safety, which the machine's
invariants catch with no reference beside the target."""

from __future__ import annotations

from dataclasses import replace

from pagedkv.reference import request_manager as ops
from pagedkv.reference.free_queue import touch
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.reference.request_state import RequestState
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.request_types import GroupBlocks, Request, RequestConfig, RequestId


def hit_without_cap(config: RequestConfig) -> ReferenceRequestKVManager:
    """A hit may cover every token: a fully cached prompt recomputes nothing (policy)."""
    return ReferenceRequestKVManager(config, replace(PAGEDKV, request_hit_cap="n"))


def frees_head_first(config: RequestConfig) -> ReferenceRequestKVManager:
    """``free`` gives a request's blocks back head first: a chain's head is evicted before its
    tail (policy)."""
    return ReferenceRequestKVManager(config, replace(PAGEDKV, request_free_order="head_first"))


class AfterAllocation(ReferenceRequestKVManager):
    """The reference, and something wrong done after each allocation that succeeded."""

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        answer = super().allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )
        if answer is not None:
            self.state = self.wrong_after(self.state, request)
        return answer

    def wrong_after(self, state: RequestState, request: Request) -> RequestState:
        raise NotImplementedError


class CachesUncomputedPrompt(AfterAllocation):
    """Caches every full block of the committed tokens at once, the prompt's chunks not yet
    computed among them: a hit then reads KV nobody wrote (safety)."""

    def wrong_after(self, state: RequestState, request: Request) -> RequestState:
        slots = min(len(blocks) for blocks in state.requests[request.request_id].blocks)
        slots *= self.config.block_size
        return ops.cache_full_blocks(state, request, min(request.num_tokens, slots))


class ReleasesInsideWindow(AfterAllocation):
    """Releases a window group's blocks one block early: the last block the window still reads
    goes back to the pool (safety)."""

    def wrong_after(self, state: RequestState, request: Request) -> RequestState:
        early = request.num_computed_tokens + self.config.block_size
        return ops.release_window(state, request.request_id, early)


class FreeForgetsLastGroup(ReferenceRequestKVManager):
    """``free`` gives back every group's blocks but the last group's, which leak (safety)."""

    def free(self, request_id: RequestId) -> None:
        table = self.state.requests.get(request_id)
        super().free(request_id)
        if table is not None and len(table.blocks) > 1:
            kept = table.blocks[-1]
            self.state = touch(self.state, [b for b in kept if b])  # held by nobody


class ShiftedHit(ReferenceRequestKVManager):
    """A hit of two or more blocks answers each group's blocks rotated by one, so each index
    names another position's block: the request reads another position's KV (safety). Its
    tables are right (it takes its own answer back rotated the other way)."""

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        hit, tokens = super().get_computed_blocks(request)
        return [blocks[1:] + blocks[:1] for blocks in hit], tokens

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        if new_computed_blocks is not None:
            new_computed_blocks = [b[-1:] + b[:-1] for b in new_computed_blocks]
        return super().allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )


PLANTED_EXACT = (hit_without_cap, frees_head_first, CachesUncomputedPrompt)
PLANTED_SAFETY = (CachesUncomputedPrompt, ReleasesInsideWindow, FreeForgetsLastGroup, ShiftedHit)
