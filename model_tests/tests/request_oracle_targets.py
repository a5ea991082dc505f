"""Request-level managers the oracle must reject, each the reference with one thing changed
(``test_request_oracle.py``): a policy of another engine (a hit of every token, blocks given
back head first), a rule broken (draft tokens cached), or an answer that only compares like the
right value."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pagedkv.model_tests.tests import request_planted
from pagedkv.model_tests.tests.false_pass_targets import AgreeableInt
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.request_types import GroupBlocks, Request

HERE = "pagedkv.model_tests.tests.request_oracle_targets"


no_hit_cap = request_planted.hit_without_cap
"""Hits every full block, the last token's included (``request_hit_cap=n``)."""
head_first = request_planted.frees_head_first
"""Gives a request's blocks back head first (``request_free_order=head_first``): another
eviction order, no unsafe one."""


class DraftsCached(ReferenceRequestKVManager):
    """Caches the blocks its draft tokens fill, as if they were committed (with the token 0
    where a draft stands: it never sees their values)."""

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        reach = request.num_computed_tokens + num_new_computed_tokens + num_new_tokens
        drafts = reach - request.num_tokens
        if drafts > 0 and type(num_new_tokens) is int:
            request = replace(request, tokens=(*request.tokens, *(0,) * drafts))
        return super().allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )


class FreeCountAgreesWrongly(ReferenceRequestKVManager):
    """One block more than it has, in an int that agrees with every other."""

    def num_free_blocks(self) -> int:
        return AgreeableInt(super().num_free_blocks() + 1)


class FreeCountIsNumpy(ReferenceRequestKVManager):
    def num_free_blocks(self) -> Any:
        import numpy  # only this fixture needs it, and only where it is installed

        return numpy.int64(super().num_free_blocks())
