"""The scheduler's side of the request machine: every request it owns, as vLLM v1's scheduler
keeps them (committed tokens, how many are computed, its keys), in its waiting and running
queues. None of this depends on the manager under test: the manager only ever sees ``Request``
values built from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagedkv.specs.request_types import MultimodalInput, Request, RequestId
from pagedkv.specs.types import ExtraKey, Token


@dataclass
class Scheduled:
    """One request as the scheduler owns it."""

    request_id: RequestId
    tokens: list[Token]
    """Committed tokens: the prompt, then accepted output (never a draft)."""
    num_prompt_tokens: int
    final_length: int
    """It finishes once it holds this many tokens."""
    extra_key: ExtraKey = field(default_factory=ExtraKey)
    multimodal: tuple[MultimodalInput, ...] = ()
    num_computed_tokens: int = 0
    window_nulls: dict[int, int] = field(default_factory=dict)
    """Per window group, how many leading table entries were the null block last seen: a
    released block is never read again, so this never falls while the request runs."""

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def request(self) -> Request:
        return Request(
            request_id=self.request_id,
            tokens=tuple(self.tokens),
            num_prompt_tokens=self.num_prompt_tokens,
            num_computed_tokens=self.num_computed_tokens,
            extra_key=self.extra_key,
            multimodal=self.multimodal,
        )


@dataclass
class RequestBook:
    waiting: list[Scheduled] = field(default_factory=list)
    """Front first: admitted in order; a preempted request goes back to the front."""
    running: list[Scheduled] = field(default_factory=list)
    """In admission order; preemption takes the last (the lowest priority, as in vLLM)."""
    finished: list[Scheduled] = field(default_factory=list)
    """What later turns extend (multi-turn prefixes)."""
    next_id: int = 0

    def fresh_id(self) -> RequestId:
        self.next_id += 1
        return f"r{self.next_id}"

    def live(self) -> list[Scheduled]:
        return [*self.running, *self.waiting]

    def preempted(self, request: Scheduled) -> None:
        """Preemption by recompute: everything computed is forgotten (the manager freed it; a
        re-admission hits the cache again)."""
        self.running.remove(request)
        request.num_computed_tokens = 0
        request.window_nulls.clear()
        self.waiting.insert(0, request)

    def finish(self, request: Scheduled) -> None:
        if request in self.running:
            self.running.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)
        request.window_nulls.clear()
        self.finished.append(request)
