"""vLLM 0.33.0's ``KVCacheManager`` driven as vLLM's scheduler drives it, for timing: the
request level's figure beside pagedkv (``pagedkv bench``, ``bench/request_sections.py``).

The adapter (``vllm_v1_manager.py``) serves the oracle: it checks every argument, renames every
hash into pagedkv's and rebuilds each request's hashes on every call, none of which vLLM's engine
does, so timing it would time the adapter. Here a recorded stream of pagedkv calls is translated
before the clock starts into what vLLM's engine does for the same requests, and only that runs
on the clock:

- a request's first call makes its vLLM ``Request`` (as the engine does when the request
  arrives: its prompt's block hashes are computed there, with the engine's default hash);
- each later call first appends the tokens the request gained (``append_output_token_ids``,
  which hashes the blocks they fill) and sets ``num_computed_tokens``, as the scheduler does;
- ``get_computed_blocks`` keeps its ``KVCacheBlocks`` for the admission's ``allocate_slots``
  (and the shared-prefix boundary on the request, as the adapter does); ``allocate_slots``,
  ``free`` and ``take_events`` are vLLM's calls with vLLM's own objects.

The configuration is the adapter's (one pool, vLLM's null block, events on, the engine's
defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from pagedkv.model_tests.peers.vllm_v1_manager import VllmV1Manager
from pagedkv.specs import request_calls
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_types import Request, RequestConfig

ARRIVE, LOOKUP, ALLOCATE, FREE, EVENTS = range(5)
"""What a step of the translated stream does."""


class _Translation:
    """The stream as vLLM's steps, and the fresh manager they run on."""

    def __init__(self, config: RequestConfig, calls: Sequence[RequestCall[Any]]) -> None:
        adapter = VllmV1Manager(config)
        self.manager: Any = adapter.kv_cache_manager
        self.slots: dict[str, int] = {}
        self.known: list[int] = []
        """Per slot: the tokens its vLLM request holds once the steps so far have run."""
        self.steps: list[tuple[Any, ...]] = []
        translate: dict[str, Callable[..., None]] = {
            request_calls.get_computed_blocks.__name__: self._lookup,
            request_calls.allocate_slots.__name__: self._allocate,
            request_calls.free.__name__: self._free,
            request_calls.take_events.__name__: self._events,
        }
        self.make = adapter.vllm_request
        for call in calls:
            if call.name not in translate:
                raise ValueError(f"the native replay has no step for {call.name}")
            translate[call.name](*call.args)

    def _slot(self, request: Request) -> tuple[int, list[int] | None]:
        """The request's slot (made on its first call) and the tokens it gained."""
        slot = self.slots.get(request.request_id)
        if slot is None:
            slot = self.slots[request.request_id] = len(self.known)
            self.known.append(request.num_tokens)
            self.steps.append((ARRIVE, slot, partial(self.make, request)))
            return slot, None
        gained = list(request.tokens[self.known[slot] :]) or None
        self.known[slot] = request.num_tokens
        return slot, gained

    def _lookup(self, request: Request) -> None:
        slot, gained = self._slot(request)
        self.steps.append((LOOKUP, slot, gained, request.num_computed_tokens))

    def _allocate(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: object = None,
        num_lookahead_tokens: int = 0,
    ) -> None:
        slot, gained = self._slot(request)
        self.steps.append(
            (
                ALLOCATE,
                slot,
                gained,
                request.num_computed_tokens,
                num_new_tokens,
                num_new_computed_tokens,
                new_computed_blocks is not None,
                num_lookahead_tokens,
            )
        )

    def _free(self, request_id: str) -> None:
        self.steps.append((FREE, self.slots[request_id]))

    def _events(self) -> None:
        self.steps.append((EVENTS,))

    def run(self) -> list[Any]:
        """The steps, each call's answer kept (vLLM's own objects)."""
        manager = self.manager
        requests: list[Any] = [None] * len(self.known)
        hit: Any = None
        answers: list[Any] = []
        keep = answers.append
        for step in self.steps:
            kind = step[0]
            if kind == ALLOCATE:
                _, slot, gained, computed, new, new_computed, with_hit, lookahead = step
                request = requests[slot]
                if gained:
                    request.append_output_token_ids(gained)
                request.num_computed_tokens = computed
                blocks = hit if with_hit else None
                keep(manager.allocate_slots(request, new, new_computed, blocks, lookahead))
            elif kind == EVENTS:
                keep(manager.take_events())
            elif kind == LOOKUP:
                _, slot, gained, computed = step
                request = requests[slot]
                if gained:
                    request.append_output_token_ids(gained)
                request.num_computed_tokens = computed
                found = manager.get_computed_blocks(request)
                hit, request.shared_prefix_boundary = found[0], found[2]
                keep(found)
            elif kind == ARRIVE:
                requests[step[1]] = step[2]()
            else:
                keep(manager.free(requests[step[1]]))
        return answers


class VllmV1Replay:
    """The ``RequestSide`` of ``model_tests/bench/request_sections.py`` for vLLM 0.33.0."""

    name = "vLLM 0.33.0 KVCacheManager"

    def prepare(
        self, config: RequestConfig, calls: Sequence[RequestCall[Any]]
    ) -> Callable[[], list[Any]]:
        return _Translation(config, calls).run

    def digest(self, name: str, answer: Any) -> Any:
        """vLLM's answer as the bench shapes pagedkv's (its events keep their own classes,
        whose names are pagedkv's)."""
        if answer is None or name == request_calls.free.__name__:
            return None
        if name == request_calls.get_computed_blocks.__name__:
            return tuple(map(tuple, answer[0].get_block_ids())), int(answer[1])
        if name == request_calls.take_events.__name__:
            return tuple((type(e).__name__, len(getattr(e, "block_hashes", ()))) for e in answer)
        return tuple(map(tuple, answer.get_block_ids()))
