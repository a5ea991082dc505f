"""The reference request-level manager under a drawn v1-style schedule, alone: the safety clauses
of ``specs/request_level.md`` §10 after every call, for full attention, a sliding window and a
hybrid of both. A small KV model writes each computed token's (token, position, salt) into its
slot, so a hit whose blocks hold anything but the request's own tokens shows as wrong data; a
broken manager (a hit shifted by one block) is shown failing the same checks.

The lockstep machine (reference against optimized, and the oracle) is elsewhere; this holds the
reference to the clauses it must keep whatever it is compared with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    AttentionKind,
    BlockRemoved,
    BlockStored,
    GroupBlocks,
    KVGroup,
    Request,
    RequestConfig,
)
from pagedkv.specs.request_view import CachedKey, RequestManagerView
from pagedkv.specs.types import ExtraKey

BLOCK_SIZE = 2
CONFIGS = {
    "full": (KVGroup(),),
    "window": (KVGroup(AttentionKind.SLIDING_WINDOW, 4),),
    "hybrid": (KVGroup(), KVGroup(AttentionKind.SLIDING_WINDOW, 3)),
}
SYSTEM_PROMPTS = ((), (7, 7, 8, 8, 9), (7, 7, 8, 8, 9, 9, 5, 5))
"""Shared prefixes, so that requests hit each other's blocks."""

Slot = tuple[int, int, str | None]
"""What the KV model holds in a slot: the token, its position, the request's salt."""


@dataclass
class Live:
    """A request as the scheduler keeps it."""

    request: Request
    running: bool = False


@dataclass
class Schedule:
    """The scheduler's side: the requests, the KV model, the events folded so far."""

    manager: ReferenceRequestKVManager
    live: dict[str, Live] = field(default_factory=dict)
    kv: dict[int, dict[int, Slot]] = field(default_factory=dict)
    folded: Counter[CachedKey] = field(default_factory=Counter)


def draft_token(position: int) -> int:
    """The token a draft proposes at ``position``; the token sampled there is ``100 +
    position``, so a rejected draft's KV differs from what the position finally holds."""
    return 1000 + position


def write(s: Schedule, r: Request, start: int, end: int) -> None:
    """The step computes positions ``start .. end - 1``: each group writes every slot it holds
    (past the committed tokens, a draft token's: ``draft_token(position)``)."""
    size = BLOCK_SIZE
    for table in s.manager.get_block_ids(r.request_id):
        for position in range(start, end):
            block = table[position // size]
            if block != NULL_BLOCK:
                token = r.tokens[position] if position < r.num_tokens else draft_token(position)
                s.kv.setdefault(block, {})[position % size] = (
                    token,
                    position,
                    r.extra_key.cache_salt,
                )


def check_hit(s: Schedule, r: Request, hit: GroupBlocks, tokens: int) -> None:
    """Every block of the hit holds exactly the request's tokens at their positions, with its
    salt; a window group's null blocks only before its window."""
    assert tokens % BLOCK_SIZE == 0 and tokens < r.num_tokens
    for group, blocks in zip(s.manager.config.groups, hit, strict=True):
        assert len(blocks) == tokens // BLOCK_SIZE
        for i, block in enumerate(blocks):
            if block == NULL_BLOCK:
                assert group.sliding_window is not None
                assert (i + 1) * BLOCK_SIZE <= tokens - group.sliding_window + 1
                continue
            expected = {
                j: (r.tokens[i * BLOCK_SIZE + j], i * BLOCK_SIZE + j, r.extra_key.cache_salt)
                for j in range(BLOCK_SIZE)
            }
            assert s.kv.get(block) == expected, (block, i, s.kv.get(block), expected)


def check_invariants(s: Schedule) -> None:
    view = s.manager.view()
    holders: Counter[int] = Counter()
    for request_id, table in view.requests.items():
        for blocks in table.blocks:
            for block in blocks:
                if block != NULL_BLOCK:
                    holders[block] += 1
        assert request_id in s.live and s.live[request_id].running
    assert NULL_BLOCK not in view.blocks and NULL_BLOCK not in view.free_queue
    for block, block_view in view.blocks.items():
        assert block_view.ref_count == holders[block], block
    assert len(set(view.free_queue)) == len(view.free_queue)
    assert set(view.free_queue) == {b for b, v in view.blocks.items() if v.ref_count == 0}
    # a block two tables hold sits at one index of one group in both (one prefix)
    places: dict[int, set[tuple[int, int]]] = {}
    for table in view.requests.values():
        for g, blocks in enumerate(table.blocks):
            for i, block in enumerate(blocks):
                if block != NULL_BLOCK:
                    places.setdefault(block, set()).add((g, i))
    assert all(len(where) == 1 for where in places.values()), places
    # the events fold into exactly the cached keys (with their duplicates)
    cached = Counter(v.cached for v in view.blocks.values() if v.cached is not None)
    assert all(count >= 0 for count in s.folded.values())
    assert +s.folded == cached
    num_blocks = s.manager.config.num_blocks
    assert s.manager.num_free_blocks() == len(view.free_queue)
    assert s.manager.usage() == 1.0 - len(view.free_queue) / (num_blocks - 1)


def fold(s: Schedule) -> None:
    for event in s.manager.take_events():
        if isinstance(event, BlockStored):
            for block_hash in event.block_hashes:
                s.folded[CachedKey(event.group, block_hash)] += 1
        elif isinstance(event, BlockRemoved):
            for block_hash in event.block_hashes:
                s.folded[CachedKey(event.group, block_hash)] -= 1
        else:
            assert isinstance(event, AllBlocksCleared)
            s.folded.clear()


def schedule_step(s: Schedule, request_id: str, chunk: int, drafts: int, accepted: int) -> None:
    """One scheduler step of a request: admission through the cache, a prefill chunk, or a
    decode step with ``drafts`` draft tokens of which ``accepted`` are kept."""
    live = s.live[request_id]
    r = live.request
    if not live.running:
        hit, tokens = s.manager.get_computed_blocks(r)
        check_hit(s, r, hit, tokens)
        new = min(chunk, r.num_tokens - tokens)
        before = s.manager.view()
        if s.manager.allocate_slots(r, new, tokens, hit) is None:
            assert s.manager.view() == before  # a new request has nothing to release
            return
        live.running = True
        live.request = replace(r, num_computed_tokens=tokens + new)
        write(s, live.request, tokens, tokens + new)
        return
    computed = r.num_computed_tokens
    if computed == r.num_tokens:  # the token sampled last step joins the committed ones
        r = replace(r, tokens=(*r.tokens, 100 + computed))
    new = min(chunk, r.num_tokens - computed) if computed < r.num_tokens - 1 else 1 + drafts
    before = s.manager.view()
    answer = s.manager.allocate_slots(r, new, num_lookahead_tokens=drafts)
    if answer is None:
        check_only_released(before, s.manager.view(), request_id)
        live.request = r
        return
    write(s, r, computed, computed + new)
    committed = min(computed + new, r.num_tokens)
    if computed + new > r.num_tokens:  # a decode with drafts: the first `accepted` are kept
        kept = min(accepted, computed + new - r.num_tokens)
        drafted = tuple(draft_token(p) for p in range(r.num_tokens, r.num_tokens + kept))
        r = replace(r, tokens=(*r.tokens, *drafted))
        committed = r.num_tokens
    live.request = replace(r, num_computed_tokens=committed)


def check_only_released(before: RequestManagerView, after: RequestManagerView, owner: str) -> None:
    """A ``None`` changed nothing but the owner's window release: entries turned null, their
    blocks given back; every key, every other table as it was."""
    assert {b: v.cached for b, v in before.blocks.items()} == {
        b: v.cached for b, v in after.blocks.items()
    }
    released: set[int] = set()
    for request_id, table in before.requests.items():
        now = after.requests[request_id]
        if request_id != owner:
            assert now == table
            continue
        assert now.num_cached_blocks == table.num_cached_blocks
        for old_blocks, new_blocks in zip(table.blocks, now.blocks, strict=True):
            assert len(old_blocks) == len(new_blocks)
            for old, new in zip(old_blocks, new_blocks, strict=True):
                assert new in (old, NULL_BLOCK)
                if new != old:
                    released.add(old)
    for block, view in before.blocks.items():
        lost = 1 if block in released else 0
        assert after.blocks[block].ref_count == view.ref_count - lost


@st.composite
def schedules(draw: st.DrawFn) -> list[tuple[object, ...]]:
    steps: list[tuple[object, ...]] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(("new", "step", "step", "step", "free", "reset")))
        if kind == "new":
            prefix = draw(st.sampled_from(SYSTEM_PROMPTS))
            suffix = draw(st.lists(st.integers(0, 3), min_size=1, max_size=6))
            salt = draw(st.sampled_from((None, None, "s")))
            steps.append(("new", (*prefix, *suffix), salt))
        elif kind == "step":
            chunk = draw(st.integers(1, 8))
            drafts = draw(st.integers(0, 2))
            steps.append(("step", draw(st.integers(0, 5)), chunk, drafts, draw(st.integers(0, 2))))
        elif kind == "free":
            steps.append(("free", draw(st.integers(0, 5)), draw(st.booleans())))
        else:
            steps.append(("reset",))
    return steps


def run(manager: ReferenceRequestKVManager, steps: list[tuple[object, ...]]) -> None:
    s = Schedule(manager)
    count = 0
    for step in steps:
        ids = sorted(s.live)
        if step[0] == "new":
            tokens, salt = step[1], step[2]
            assert isinstance(tokens, tuple) and (salt is None or isinstance(salt, str))
            request_id = f"r{count}"
            count += 1
            key = ExtraKey(cache_salt=salt)
            s.live[request_id] = Live(Request(request_id, tokens, len(tokens), 0, key))
        elif step[0] == "step" and ids:
            _, which, chunk, drafts, accepted = step
            assert isinstance(which, int) and isinstance(chunk, int)
            assert isinstance(drafts, int) and isinstance(accepted, int)
            schedule_step(s, ids[which % len(ids)], chunk, drafts, accepted)
        elif step[0] == "free" and ids:
            _, which, preempted = step
            assert isinstance(which, int)
            request_id = ids[which % len(ids)]
            manager.free(request_id)
            if preempted:  # back to waiting, to recompute (and hit its own prefix)
                live = s.live[request_id]
                live.request = replace(live.request, num_computed_tokens=0)
                live.running = False
            else:
                del s.live[request_id]
        elif step[0] == "reset":
            manager.reset_prefix_cache()
        fold(s)
        check_invariants(s)


@pytest.mark.parametrize("name", CONFIGS)
@given(steps=schedules(), num_blocks=st.integers(4, 14), caching=st.booleans())
def test_the_reference_keeps_the_safety_clauses(
    name: str, steps: list[tuple[object, ...]], num_blocks: int, caching: bool
) -> None:
    config = RequestConfig(num_blocks, BLOCK_SIZE, CONFIGS[name], caching)
    run(ReferenceRequestKVManager(config), steps)


class ShiftedHit(ReferenceRequestKVManager):
    """Broken on purpose: a hit of two or more blocks answers each group's blocks rotated by
    one, so each index names another position's block."""

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        hit, tokens = super().get_computed_blocks(request)
        return [blocks[1:] + blocks[:1] for blocks in hit], tokens


def test_the_checks_catch_a_wrong_hit() -> None:
    config = RequestConfig(12, BLOCK_SIZE, CONFIGS["full"])
    prompt = (7, 7, 8, 8, 9, 9, 1)
    steps: list[tuple[object, ...]] = [
        ("new", prompt, None),
        ("step", 0, 8, 0, 0),
        ("new", prompt, None),
        ("step", 1, 8, 0, 0),
    ]
    run(ReferenceRequestKVManager(config), steps)
    with pytest.raises(AssertionError):
        run(ShiftedHit(config), steps)
