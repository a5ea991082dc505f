"""The request machine's scheduler: vLLM v1's scheduling loop over a ``RequestKVManager``.

Each ``schedule`` rule is one engine iteration under a token budget: the running requests
first, in order (a prompt not yet computed gets a chunk of it, chunked prefill; a decoding one
its last token and, with speculative decoding, draft tokens beyond its committed ones, plus
lookahead slots); when ``allocate_slots`` answers None the last running request is preempted
by recompute (``preempt`` where the target offers it, else freed; back at the front of the
waiting queue with nothing computed) and the call tried again. Then, if nothing was
preempted, waiting requests are admitted through ``get_computed_blocks`` and
``allocate_slots`` with the hit. The stand-in model runner writes
every scheduled token's KV; a decode accepts some drafts, rejects the rest (its computed count
rolls back) and commits a bonus token; a request that reached its length finishes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.machines.draws import BOOLEANS, integers, sampled, small_tokens
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.request_book import Scheduled
from pagedkv.model_tests.machines.request_checks import answer_problems, none_problems
from pagedkv.model_tests.machines.request_draws import (
    EXTRA_KEYS,
    MAX_SPECULATION,
    SYSTEM_PROMPT,
    capacity,
    multimodal_inputs,
    prompt_capacity,
)
from pagedkv.model_tests.machines.request_steering import RequestSteering
from pagedkv.specs import request_calls as calls
from pagedkv.specs.interface import RequestPreemption
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_types import GroupBlocks, MultimodalInput, RequestId
from pagedkv.specs.types import Token

MAX_LIVE = 6
"""At most this many requests waiting or running at once."""


@dataclass
class Work:
    """What one request was scheduled for in this iteration."""

    request: Scheduled
    num_new_tokens: int
    drafts: tuple[Token, ...] = ()
    hit: GroupBlocks | None = None
    """The cached blocks it was admitted with (read back once the step's KV is written: a
    request may hit blocks another one computes in the same step, as in vLLM, where every
    token's KV of a layer is written before its attention reads)."""
    num_hit: int = 0


class SchedulerRules(RequestSteering):
    @precondition(lambda self: len(self.book.live()) < MAX_LIVE)
    @rule(burst=sampled((1, 1, 2, 3)), data=DATA)
    def add_requests(self, burst: int, data: st.DataObject) -> None:
        """One to three requests arrive at once (so that several run together), now and then
        with the first one's prompt (``twin_of``)."""
        first: Scheduled | None = None
        for _ in range(min(burst, MAX_LIVE - len(self.book.live()))):
            twin = self.twin_of(first, data)
            if twin is not None:
                self.book.waiting.append(twin)
            else:
                first = self.add_request(data)

    def add_request(self, data: st.DataObject) -> Scheduled:
        """A new request in the waiting queue: a shared system prompt and a question, the next
        turn of a finished conversation (its tokens and more), a repeat of an earlier prompt, or
        fresh tokens; with a LoRA id or a cache salt, and multimodal inputs."""
        room = capacity(self.config)
        kinds = ["system", "fresh", "repeat"] + (["turn"] if self.book.finished else [])
        kind = data.draw(sampled(tuple(kinds)), label="prompt")
        keys = EXTRA_KEYS if self.on("extra keys") else EXTRA_KEYS[:1]
        key = data.draw(sampled(keys), label="extra key")
        multimodal: tuple[MultimodalInput, ...] = ()
        if kind == "turn":
            earlier = self.pick(data, self.book.finished, "conversation")
            prompt = list(earlier.tokens) + self._fresh(data, 1, 3)
            key, multimodal = earlier.extra_key, earlier.multimodal
        elif kind == "repeat":
            everyone = [*self.book.finished, *self.book.live()]
            if everyone:
                earlier = self.pick(data, everyone, "repeat of")
                prompt = earlier.tokens[: earlier.num_prompt_tokens]
                key, multimodal = earlier.extra_key, earlier.multimodal
            else:
                prompt = list(SYSTEM_PROMPT[: self.config.block_size * 2])
        elif kind == "system":
            size = self.config.block_size
            lengths = (size, 2 * size, 2 * size + 1, len(SYSTEM_PROMPT))
            shared = data.draw(sampled(lengths), label="system prompt")
            prompt = list(SYSTEM_PROMPT[:shared]) + self._fresh(data, 0, 3)
        else:
            prompt = self._fresh(data, 1, prompt_capacity(self.config))
        prompt = prompt[: prompt_capacity(self.config) - 1]
        multimodal = tuple(m for m in multimodal if m.offset + m.length <= len(prompt))
        if kind != "turn" and self.on("multimodal"):
            multimodal = multimodal_inputs(data, len(prompt), disjoint=self.disjoint_multimodal)
        output = data.draw(integers(1, 3 * self.config.block_size + 4), label="output tokens")
        request = Scheduled(
            request_id=self.book.fresh_id(),
            tokens=prompt,
            num_prompt_tokens=len(prompt),
            final_length=min(len(prompt) + output, room),
            extra_key=key,
            multimodal=multimodal,
        )
        event(f"prompt: {kind}")
        self.book.waiting.append(request)
        return request

    def _fresh(self, data: st.DataObject, low: int, high: int) -> list[Token]:
        count = data.draw(integers(low, max(low, high)), label="new tokens")
        return list(data.draw(small_tokens(count, 3), label="tokens"))

    @rule(iterations=sampled((1, 1, 2, 3)), data=DATA)
    def schedule(self, iterations: int, data: st.DataObject) -> None:
        """One to three engine iterations."""
        for _ in range(iterations):
            self.iteration(data)

    def iteration(self, data: st.DataObject) -> None:
        """One engine iteration (see the module's docstring)."""
        size = self.config.block_size
        chunked = self.on("chunked prefill")
        budget = data.draw(sampled((size, 2 * size + 1, 64)), label="budget") if chunked else 64
        speculate = MAX_SPECULATION if self.on("spec decode") else 0
        ahead = MAX_SPECULATION if self.on("lookahead") else 0
        lookahead = data.draw(integers(0, ahead), label="lookahead")
        work: list[Work] = []
        preempted = False
        index = 0
        while index < len(self.book.running) and budget > 0:
            request = self.book.running[index]
            item = self._running_work(request, budget, speculate, data)
            if self._allocate_running(item, lookahead, data):
                work.append(item)
                budget -= item.num_new_tokens
                index += 1
            else:
                preempted = True
                if request not in self.book.running:
                    break
        while not preempted and self.book.waiting and budget > 0:
            admitted = self._admit(self.book.waiting[0], budget, lookahead, data)
            if admitted is None:
                break
            work.append(admitted)
            budget -= admitted.num_new_tokens
        self._run_model(work, data)
        self._after_step(data)

    def _running_work(
        self, request: Scheduled, budget: int, speculate: int, data: st.DataObject
    ) -> Work:
        left = request.num_tokens - request.num_computed_tokens
        if left > 1 or request.num_tokens == request.num_prompt_tokens:  # (a chunk of) prefill
            return Work(request, min(left, budget))
        room = min(request.final_length - request.num_tokens - 1, budget - 1, speculate)
        count = data.draw(integers(0, max(room, 0)), label="drafts")
        drafts = tuple(data.draw(small_tokens(count, 3), label="draft tokens"))
        return Work(request, left + count, drafts)

    def _allocate_running(self, item: Work, lookahead: int, data: st.DataObject) -> bool:
        """Slots for a running request's step (at an edge now and then, ``request_steering``);
        on None, preempt the last running request (the request itself, at worst), say False."""
        request = item.request
        lookahead = self.steered_lookahead(request, item.num_new_tokens, lookahead, data)
        answer = self._allocate(request, item.num_new_tokens, 0, None, lookahead)
        if answer is not None:
            return True
        victim = self.book.running[-1]
        event("outcome: preemption" + (" of itself" if victim is request else ""))
        self.tally("preemptions")
        self.succeeded(self.preemption(victim.request_id))
        self.book.preempted(victim)
        return False

    def preemption(self, request_id: RequestId) -> RequestCall[None]:
        """The optional ``preempt`` where the target offers it (``RequestPreemption``), else
        ``free``, what vLLM's scheduler calls for a preemption too."""
        if isinstance(self.target, RequestPreemption):
            return calls.preempt(request_id)
        return calls.free(request_id)

    def _admit(
        self, request: Scheduled, budget: int, lookahead: int, data: st.DataObject
    ) -> Work | None:
        """The head of the waiting queue: its hit, then slots for the rest (or a chunk of it)."""
        hit, num_hit = self.succeeded(calls.get_computed_blocks(request.request()))
        if num_hit:
            event(f"outcome: hit of {min(num_hit // self.config.block_size, 3)}+ blocks")
            self.tally("hit blocks", num_hit // self.config.block_size)
        num_new = min(request.num_tokens - num_hit, budget)
        offered: GroupBlocks | None = hit
        if not num_hit and data.draw(BOOLEANS, label="no hit as None"):
            offered = None
        if num_hit:
            lookahead = self.admission_lookahead(hit, num_hit, num_new, lookahead, data)
        answer = self._allocate(request, num_new, num_hit, offered, lookahead)
        if answer is None:
            if not self.book.running:  # all of the pool could not hold it: the engine drops it
                event("outcome: a request too large for the pool")
                self.book.finish(request)
            return None
        self.book.waiting.remove(request)
        self.book.running.append(request)
        request.num_computed_tokens = num_hit
        return Work(request, num_new, hit=hit, num_hit=num_hit)

    def _read_hit(self, request: Scheduled, hit: GroupBlocks, num_hit: int) -> None:
        """A hit's blocks hold exactly this request's tokens and keys (read through the KV
        model); each group's list is ``num_hit // B`` blocks, the null block only where a window
        group needs none."""
        size = self.config.block_size
        found = self.contents_of(request)
        problems = []
        if len(hit) != len(self.config.groups) or num_hit % size or num_hit > request.num_tokens:
            problems.append(f"a hit of {num_hit} tokens for {request.num_tokens}: {hit}")
        for group, (kind, blocks) in enumerate(zip(self.config.groups, hit, strict=False)):
            if len(blocks) != num_hit // size:
                problems.append(f"group {group}'s hit has {len(blocks)} blocks: {blocks}")
                continue
            window = kind.sliding_window
            needed = 0 if window is None else max(0, num_hit - window + 1) // size
            if 0 in blocks[needed:]:
                problems.append(f"group {group}'s hit has the null block where read: {blocks}")
            problems += self.kv.misread(group, blocks, found.cells, range(num_hit))
        if problems:
            raise Divergence(
                f"get_computed_blocks({request.request_id!r}) served a wrong hit: "
                + "; ".join(problems),
                "kv",
            )

    def _allocate(
        self,
        request: Scheduled,
        num_new: int,
        num_hit: int,
        hit: GroupBlocks | None,
        lookahead: int,
    ) -> GroupBlocks | None:
        """``allocate_slots``; a None must change nothing but the window's release (the counts,
        read right after it, show whether the release stayed)."""
        before = self.kv_view()
        call = calls.allocate_slots(request.request(), num_new, num_hit, hit, lookahead)
        answer = self.succeeded(call)
        if answer is None:
            event("outcome: allocate_slots answered None" + (" to a hit" if num_hit else ""))
            self.tally("answers None")
            problems = none_problems(before, self.kv_view(), request.request_id)
            if problems:
                raise Divergence(f"{call!r} answered None and " + "; ".join(problems), "atomicity")
            self.read_counts()  # what a None left free: the window's release kept or not
            return None
        problems = answer_problems(self.kv_view(), request.request_id, answer)
        if problems:
            raise Divergence(f"{call!r}: " + "; ".join(problems), "placement")
        return answer

    def _run_model(self, work: list[Work], data: st.DataObject) -> None:
        """Write each scheduled token's KV through the tables ``get_block_ids`` answers (as
        the engine builds its model input), then advance: the computed count by the accepted
        tokens; a finished prefill or a decode commits its accepted drafts and a bonus token."""
        view = self.kv_view()
        for item in work:
            request = item.request
            tables = self.succeeded(calls.get_block_ids(request.request_id))
            held = [list(blocks) for blocks in view.requests[request.request_id].blocks]
            if tables != held:
                raise Divergence(
                    f"get_block_ids({request.request_id!r}) answered {tables}, the view holds"
                    f" {held}",
                    "table",
                )
            found = self.contents_of(request, item.drafts)
            start = request.num_computed_tokens
            positions = range(start, start + item.num_new_tokens)
            problems = self.kv.write(tables, found.cells, positions)
            if problems:
                raise Divergence(
                    f"{request.request_id!r} has no slot: " + "; ".join(problems), "placement"
                )
        for item in work:
            if item.hit is not None:
                self._read_hit(item.request, item.hit, item.num_hit)
        for item in work:
            request = item.request
            request.num_computed_tokens += item.num_new_tokens
            if request.num_computed_tokens < request.num_tokens:
                continue  # a chunk of the prompt: nothing sampled yet
            accepted = data.draw(integers(0, len(item.drafts)), label="accepted drafts")
            rejected = item.drafts[accepted:]
            bonus = data.draw(integers(0, 3), label="sampled token")
            if rejected and bonus == rejected[0]:
                bonus = (bonus + 1) % 4  # the model's token where it disagreed with the draft
            if rejected:
                event("outcome: drafts rejected")
                self.tally("drafts rejected")
            request.num_computed_tokens -= len(rejected)
            request.tokens += [*item.drafts[:accepted], bonus]
            if request.num_tokens >= request.final_length:
                self.succeeded(calls.free(request.request_id))
                self.book.finish(request)

    def _after_step(self, data: st.DataObject) -> None:
        """What the engine reads after each iteration: the KV events (for routers), the free
        count and the usage (for its statistics)."""
        if self.on("events") and data.draw(sampled((True, True, False)), label="take events"):
            self.take_events()
        self.read_counts()

    @precondition(lambda self: bool(self.book.live()))
    @rule(data=DATA)
    def abort(self, data: st.DataObject) -> None:
        """A request aborted, waiting (the manager may not know it) or running."""
        request = self.pick(data, self.book.live(), "aborted")
        self.succeeded(calls.free(request.request_id))
        self.book.finish(request)

    @rule(drain=sampled((False, False, False, True)))
    def reset(self, drain: bool) -> None:
        """``reset_prefix_cache``: refused while any block is in use; with ``drain``, every
        request is aborted first, so that it succeeds."""
        if drain:
            for request in list(self.book.live()):
                self.succeeded(calls.free(request.request_id))
                self.book.finish(request)
        in_use = any(seen.ref_count for seen in self.kv_view().blocks.values())
        answer = self.succeeded(calls.reset_prefix_cache())
        event(f"outcome: reset_prefix_cache {answer}")
        if answer is in_use:
            raise Divergence(
                f"reset_prefix_cache() answered {answer} with blocks {'' if in_use else 'not '}"
                "in use",
                "result",
            )
        if answer and any(seen.cached for seen in self.kv_view().blocks.values()):
            raise Divergence("reset_prefix_cache() answered True and left blocks cached")
