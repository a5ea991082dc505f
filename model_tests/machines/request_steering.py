"""Edges the scheduler machine steers to, states a random run seldom builds
(``specs/corpus.md``, the request level): a running request's lookahead chosen so that its
step fits the pool only once its window released blocks (the release comes before the fit,
``specs/request_level.md`` §4.4), or not even then (whether a None keeps the release: policy
``request_release_before_fit``), or so that its slots would reach past
``max_model_len``, or so that a prefill chunk's lookahead fills a block of prompt tokens not
computed yet; a request admitted with a hit whose blocks wait in the free queue, its
lookahead chosen so that its new blocks fit only if the hit's blocks are left out of the count
(touching them takes them out of the queue: §4.3); and requests that arrive together with one
prompt, so that two blocks are cached under one key before a later request hits it.

Each edge is read off the state the machine already sees (``kv_view``) and drawn only where one
exists, so runs that never meet one draw nothing more."""

from __future__ import annotations

from hypothesis import event
from hypothesis import strategies as st

from pagedkv.model_tests.machines.draws import sampled
from pagedkv.model_tests.machines.request_book import Scheduled
from pagedkv.model_tests.machines.request_invariants import RequestInvariants
from pagedkv.specs.request_types import NULL_BLOCK, GroupBlocks
from pagedkv.specs.request_validation import cdiv
from pagedkv.specs.request_view import RequestManagerView

TAKE_EDGE = sampled((False, True))
"""How often an edge found is taken: half the time, so runs stay varied."""

TAKE_RARE_EDGE = sampled((False, True, True, True))
"""How often the rarest edges are taken: several blocks leave a window in the call that then
takes one of them (their order in the free queue shows); an admission whose hit waits in the
free queue while the pool is nearly full."""

TWIN = sampled((False, True))

MAX_EDGE_LOOKAHEAD = 24
"""The longest lookahead an edge may ask for (a few blocks of the largest block size)."""


class RequestSteering(RequestInvariants):
    """Edge lookaheads and twin prompts, for the scheduler's rules to use."""

    def _needed(self, view: RequestManagerView, request: Scheduled, total: int) -> tuple[int, int]:
        """The blocks a known request's step to ``total`` tokens takes from the free queue, and
        the blocks its window release gives back first (those only it holds)."""
        table = view.requests.get(request.request_id)
        if table is None:
            return 0, 0
        size = self.config.block_size
        needed = sum(max(cdiv(total, size) - len(blocks), 0) for blocks in table.blocks)
        released = 0
        computed = request.num_computed_tokens
        for group, blocks in zip(self.config.groups, table.blocks, strict=False):
            if group.sliding_window is None:
                continue
            end = min(max(0, computed - group.sliding_window + 1) // size, len(blocks))
            for block in reversed(blocks[:end]):
                if block == NULL_BLOCK:
                    break
                seen = view.blocks.get(block)
                released += seen is not None and seen.ref_count == 1
        return needed, released

    def _edges(self, request: Scheduled, num_new: int) -> tuple[list[int], bool]:
        """Lookaheads that put ``request``'s step at an edge: the fewest that make it fit only
        after its window's release, the fewest that make it not fit even then (a None that
        keeps or undoes the release), the fewest that reach a block past ``max_model_len``
        where the step fits up to it, and, in a prefill chunk, the fewest that fill the block
        the chunk ends in with committed tokens not computed yet (never cached); and whether
        the first takes one of several blocks released at once."""
        edges = []
        rare = False
        start = request.num_computed_tokens + num_new
        view = self.kv_view()  # read once: the edges below only look
        free = len(view.free_queue)
        for lookahead in range(MAX_EDGE_LOOKAHEAD + 1):
            needed, released = self._needed(view, request, start + lookahead)
            if free < needed <= free + released:
                edges.append(lookahead)
                event("edge: fits only after the window's release")
                rare = released > 1
                break
            if needed > free + released:
                if released:
                    edges.append(lookahead)
                    event("edge: fits not even after the window's release")
                break
        limit = self.config.max_model_len
        size = self.config.block_size
        if limit is not None:
            past = limit + size - start
            if 0 < past <= MAX_EDGE_LOOKAHEAD and self._fits(view, request, limit):
                edges.append(past)  # the step fits only as far as the limit
        fill = size - start % size
        if start + fill <= request.num_tokens and self._fits(view, request, start + fill):
            edges.append(fill)  # a prefill chunk's lookahead fills a block of committed tokens
        return edges, rare

    def _fits(self, view: RequestManagerView, request: Scheduled, total: int) -> bool:
        """Whether ``request``'s step to ``total`` tokens fits (after its window's release)."""
        needed, released = self._needed(view, request, total)
        return needed <= len(view.free_queue) + released

    def steered_lookahead(
        self, request: Scheduled, num_new: int, lookahead: int, data: st.DataObject
    ) -> int:
        """The iteration's lookahead, or now and then an edge one for this running request."""
        edges, rare = self._edges(request, num_new)
        if not edges or not data.draw(TAKE_RARE_EDGE if rare else TAKE_EDGE, label="edge"):
            return lookahead
        if rare:
            event("edge: several blocks released, one taken back")
            return edges[0]
        chosen: int = data.draw(sampled(tuple(edges)), label="which edge")
        event("edge: lookahead taken")
        return chosen

    def admission_lookahead(
        self, hit: GroupBlocks, num_hit: int, num_new: int, lookahead: int, data: st.DataObject
    ) -> int:
        """The admission's lookahead, or now and then the fewest that make the new request's
        blocks fit the free queue only when its hit's evictable blocks are not counted (the
        spec's answer is then ``None``). A window group's hit blocks before its window are
        neither touched nor counted."""
        view = self.kv_view()
        size = self.config.block_size
        evictable = 0
        kept = []
        for group, blocks in zip(self.config.groups, hit, strict=True):
            window = group.sliding_window
            skipped = 0 if window is None else max(0, num_hit - window + 1) // size
            kept.append(max(skipped, len(blocks)))
            for block in blocks[skipped:]:
                seen = view.blocks.get(block)
                evictable += block != NULL_BLOCK and seen is not None and seen.ref_count == 0
        if not evictable:
            return lookahead
        free = len(view.free_queue)
        limit = self.config.max_model_len
        for edge in range(MAX_EDGE_LOOKAHEAD + 1):
            slots = num_hit + num_new + edge
            slots = slots if limit is None else min(slots, limit)
            fresh = sum(max(cdiv(slots, size) - held, 0) for held in kept)
            if fresh > free:
                break
            if free < fresh + evictable:
                if not data.draw(TAKE_RARE_EDGE, label="edge"):
                    break
                event("edge: fits only without the hit's evictable blocks")
                return edge
        return lookahead

    def twin_of(self, first: Scheduled | None, data: st.DataObject) -> Scheduled | None:
        """Now and then a request with the same prompt and keys as ``first``, which arrived with
        it: both compute one prefix at once (vLLM caches both blocks under one key)."""
        if first is None or not data.draw(TWIN, label="same prompt"):
            return None
        event("edge: two requests with one prompt")
        return Scheduled(
            request_id=self.book.fresh_id(),
            tokens=list(first.tokens),
            num_prompt_tokens=first.num_prompt_tokens,
            final_length=first.final_length,
            extra_key=first.extra_key,
            multimodal=first.multimodal,
        )
