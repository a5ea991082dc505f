"""Calls a scheduler must never make: each must be refused with its typed error and change
nothing (the session checks that a failed call left both sides as they were)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.machines.draws import sampled
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.request_base import RequestMachineBase
from pagedkv.model_tests.machines.request_book import Scheduled
from pagedkv.specs import request_calls as calls
from pagedkv.specs.errors import (
    ForeignBlockError,
    InvalidArgumentError,
    PagedKVError,
    RequestStateError,
    UnknownRequestError,
)
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import NULL_BLOCK, Request
from pagedkv.specs.request_view import CachedKey

MISUSES = (
    "no new tokens",
    "negative count",
    "float count",
    "computed past its tokens",
    "hit for a running request",
    "hit not cached",
    "hit not whole blocks",
    "hit without a list per group",
    "foreign block",
    "unknown request",
    "computed without blocks",
    "id not a str",
    "earlier token not an int",
)


class MisuseRules(RequestMachineBase):
    @rule(kind=sampled(MISUSES), data=DATA)
    def misuse(self, kind: str, data: st.DataObject) -> None:
        live = self.book.live()
        chosen = self.pick(data, live, "request") if live else None
        built = self._misuse_call(kind, chosen)
        if built is None:
            return
        call, expected = built
        event(f"misuse: {kind}")
        outcome = self.both(call)
        if not isinstance(outcome, expected):
            raise Divergence(
                f"{call!r} ({kind}) must raise {expected.__name__}, it answered {outcome!r}",
                "error",
            )

    def _misuse_call(
        self, kind: str, chosen: Scheduled | None
    ) -> tuple[RequestCall[object], type[PagedKVError]] | None:
        size = self.config.block_size
        groups = len(self.config.groups)
        if chosen is None:
            request = Request("never-admitted", (1, 2, 3), 3)
            running = False
        else:
            request = chosen.request()
            running = chosen in self.book.running
        if kind == "no new tokens":
            return calls.allocate_slots(request, 0), InvalidArgumentError
        if kind == "negative count":
            return calls.allocate_slots(request, 1, 0, None, -1), InvalidArgumentError
        if kind == "float count":
            return calls.allocate_slots(request, 1.0), InvalidArgumentError  # type: ignore[arg-type]
        if kind == "computed past its tokens":
            past = replace(request, num_computed_tokens=request.num_tokens + 1)
            return calls.allocate_slots(past, 1), RequestStateError
        if kind == "unknown request":
            return calls.get_block_ids("never-admitted"), UnknownRequestError
        if kind == "earlier token not an int":  # equal in value (100.0 == 100), still refused
            if chosen is None:
                return None
            tokens = (float(request.tokens[0]), *request.tokens[1:])
            return calls.allocate_slots(replace(request, tokens=tokens), 1), InvalidArgumentError  # type: ignore[arg-type]
        if kind == "id not a str":
            return calls.allocate_slots(replace(request, request_id=7), 1), InvalidArgumentError  # type: ignore[arg-type]
        if kind == "foreign block":
            if running or request.num_computed_tokens:
                return None
            hit = [[self.config.num_blocks] for _ in range(groups)]
            return calls.allocate_slots(request, 1, size, hit), ForeignBlockError
        if kind == "hit without a list per group":
            return calls.allocate_slots(request, 1, 0, [[]] * (groups + 1)), InvalidArgumentError
        if kind == "computed without blocks":
            if running or request.num_computed_tokens or request.num_tokens < 2:
                return None
            return calls.allocate_slots(replace(request, num_computed_tokens=1), 1), (
                RequestStateError
            )
        if kind == "hit not whole blocks":
            if running or size == 1:
                return None
            return calls.allocate_slots(request, 1, size + 1, None), InvalidArgumentError
        if kind == "hit for a running request":
            if not running:
                return None
            own = self.kv_view().requests[request.request_id].blocks
            if not all(own):
                return None
            hit = [list(blocks[:1]) for blocks in own]
            return calls.allocate_slots(request, 1, size, hit), RequestStateError
        # "hit not cached": a block that is not cached under the request's first key
        if running or request.num_tokens < size + 1:
            return None
        first = request_block_hashes(request, size)[0]
        view = self.kv_view()
        hit = []
        for group in range(groups):
            wrong = [b for b, seen in view.blocks.items() if seen.cached != CachedKey(group, first)]
            if not wrong or wrong[0] == NULL_BLOCK:
                return None
            hit.append([wrong[0]])
        return calls.allocate_slots(request, 1, size, hit), RequestStateError
