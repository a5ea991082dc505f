"""What the request machine checks after every step (the checks themselves are pure,
``request_checks.py``), and the two readings an engine makes after each iteration whose answers
are checked at once: the KV events, folded into the set of cached keys, and the free count and
usage."""

from __future__ import annotations

from hypothesis import event
from hypothesis.stateful import invariant

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.machines.request_base import RequestMachineBase
from pagedkv.model_tests.machines.request_checks import (
    accounting_problems,
    cached_keys,
    count_problems,
    fold_events,
    kv_problems,
    sharing_problems,
    table_problems,
)
from pagedkv.specs import request_calls as calls
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, KVEvent


class RequestInvariants(RequestMachineBase):
    def take_events(self) -> None:
        """The events since the last take fold into exactly the keys now cached (none at all
        without caching)."""
        events = self.succeeded(calls.take_events())
        for kind in sorted({type(item).__name__ for item in events}):
            event(f"outcome: event {kind}")
        self.tally("evictions", sum(isinstance(item, BlockRemoved) for item in events))
        problems = fold_events(self.folded, events, self.kv, self.config.block_size)
        if not self.config.enable_caching and any(map(self.uncalled_for, events)):
            problems.append(f"caching is off, yet take_events() answered {events}")
        cached = cached_keys(self.kv_view())
        if +self.folded != cached:
            problems.append(
                f"the events add up to {sorted(k.block_hash.hex()[:8] for k in self.folded)},"
                f" the cached keys are {sorted(k.block_hash.hex()[:8] for k in cached)}"
            )
        if problems:
            raise Divergence("take_events(): " + "; ".join(problems), "result")

    def uncalled_for(self, item: KVEvent) -> bool:
        """An event a manager without caching may not send: any, but an ``AllBlocksCleared``
        under policy ``request_clear_event=always`` (``specs/request_level.md`` §9)."""
        return not (
            isinstance(item, AllBlocksCleared) and self.policy.request_clear_event == "always"
        )

    def read_counts(self) -> None:
        free = self.succeeded(calls.num_free_blocks())
        usage = self.succeeded(calls.usage())
        problems = count_problems(self.kv_view(), free, usage)
        if problems:
            raise Divergence("; ".join(problems), "count")

    @invariant()
    def blocks_accounted(self) -> None:
        """Ref counts equal holders; every other block free exactly once; the tables of exactly
        the running requests, the null block only where a window no longer reads."""
        if not hasattr(self, "target"):
            return
        view = self.kv_view()
        problems = accounting_problems(view) + table_problems(view, self.book.running)
        released = sum(sum(r.window_nulls.values()) for r in self.book.running)
        if released:
            event("outcome: a window released blocks")
            self._score(released, "window blocks released")
        if problems:
            raise Divergence("; ".join(problems), "accounting")

    @invariant()
    def data_intact(self) -> None:
        """Every running request's computed tokens read back from its blocks, every cached
        block holds what its hash says, and a block two requests share is the same full block
        of both."""
        if not hasattr(self, "target"):
            return
        view = self.kv_view()
        found = {r.request_id: self.contents_of(r) for r in self.book.running}
        problems = sharing_problems(view, found) + kv_problems(
            view, self.book.running, found, self.kv
        )
        if problems:
            raise Divergence("; ".join(problems), "kv")
