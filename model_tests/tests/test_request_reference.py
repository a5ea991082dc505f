"""Worked examples of the request level (``specs/request_level.md``) on the reference: each
clause by a small scenario with its exact answer, every typed error with a message naming the
value (and a failed call changing nothing), and ``usage`` against its formula."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.errors import (
    ConfigurationError,
    ForeignBlockError,
    InvalidArgumentError,
    PagedKVError,
    RequestStateError,
    UnknownRequestError,
)
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    FULL_ATTENTION,
    NULL_BLOCK,
    AllBlocksCleared,
    AttentionKind,
    BlockRemoved,
    BlockStored,
    GroupBlocks,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.request_view import CachedKey, RequestBlockView, RequestTableView
from pagedkv.specs.types import ExtraKey


def window(tokens: int) -> KVGroup:
    return KVGroup(AttentionKind.SLIDING_WINDOW, tokens)


def manager(
    num_blocks: int = 10,
    block_size: int = 4,
    groups: tuple[KVGroup, ...] = FULL_ATTENTION,
    *,
    caching: bool = True,
    max_model_len: int | None = None,
    policy: Policy = PAGEDKV,
) -> ReferenceRequestKVManager:
    config = RequestConfig(num_blocks, block_size, groups, caching, max_model_len)
    return ReferenceRequestKVManager(config, policy)


def request(request_id: str, num_tokens: int, computed: int = 0, **keys: object) -> Request:
    """Tokens ``0 .. num_tokens - 1``, all of them the prompt unless ``num_prompt_tokens``."""
    prompt = keys.pop("num_prompt_tokens", num_tokens)
    tokens = keys.pop("tokens", tuple(range(num_tokens)))
    return Request(request_id, tokens, prompt, computed, **keys)  # type: ignore[arg-type]


def admit(m: RequestKVManager, r: Request, num_new_tokens: int | None = None) -> GroupBlocks | None:
    """What a v1 scheduler does for a waiting request: look the cache up, then allocate the rest
    of the prompt (or ``num_new_tokens`` of it) after the hit."""
    hit, hit_tokens = m.get_computed_blocks(r)
    new = r.num_tokens - hit_tokens if num_new_tokens is None else num_new_tokens
    return m.allocate_slots(r, new, hit_tokens, hit)


def stored(events: Sequence[object]) -> list[BlockStored]:
    return [e for e in events if isinstance(e, BlockStored)]


# --- §1 state -----------------------------------------------------------------------------------


def test_a_new_manager_queues_every_block_but_the_null_block() -> None:
    m = manager(num_blocks=5)
    view = m.view()
    assert view.free_queue == (1, 2, 3, 4)
    assert NULL_BLOCK not in view.blocks
    assert all(b == RequestBlockView(0, None) for b in view.blocks.values())
    assert m.num_free_blocks() == 4 and m.usage() == 0.0


def test_allocation_takes_the_front_of_the_free_queue() -> None:
    m = manager(num_blocks=6, block_size=2)
    assert m.allocate_slots(request("a", 3), 3) == [[1, 2]]
    assert m.allocate_slots(request("b", 1, tokens=(9,)), 1) == [[3]]
    assert m.view().free_queue == (4, 5)
    assert m.view().requests["a"] == RequestTableView(((1, 2),), (1,))


# --- §3 hits ------------------------------------------------------------------------------------


def test_a_hit_is_capped_at_all_tokens_but_the_last() -> None:
    m = manager()
    admit(m, request("a", 8))
    # a fully cached 8-token prompt still recomputes its last block (token 7's logits)
    assert m.get_computed_blocks(request("b", 8)) == ([[1]], 4)
    # one more token, and both blocks hit
    assert m.get_computed_blocks(request("c", 9)) == ([[1, 2]], 8)
    # policy request_hit_cap=n: every full block may hit
    n = manager(policy=replace(PAGEDKV, request_hit_cap="n"))
    admit(n, request("a", 8))
    assert n.get_computed_blocks(request("b", 8)) == ([[1, 2]], 8)


def test_get_computed_blocks_changes_nothing_and_needs_caching() -> None:
    m = manager()
    admit(m, request("a", 8))
    m.free("a")
    before = m.view()
    assert m.get_computed_blocks(request("b", 9)) == ([[1, 2]], 8)
    assert m.view() == before
    off = manager(caching=False)
    admit(off, request("a", 8))
    assert off.get_computed_blocks(request("b", 9)) == ([[]], 0)
    assert off.take_events() == []


def test_a_hit_stops_at_the_first_block_not_cached() -> None:
    m = manager()
    admit(m, request("a", 8))
    other = request("b", 12, tokens=(0, 1, 2, 3, 9, 9, 9, 9, 8, 9, 10, 11))
    assert m.get_computed_blocks(other) == ([[1]], 4)


def test_a_window_group_hit_reads_only_its_window() -> None:
    """W = 4, B = 2: a window group serves k blocks when blocks k-2 and k-1 are cached; its
    earlier blocks are the null block in the hit."""
    m = manager(num_blocks=12, block_size=2, groups=(window(4),))
    admit(m, request("a", 10))
    assert m.get_block_ids("a") == [[1, 2, 3, 4, 5]]  # nothing computed yet: nothing released
    m.free("a")
    hit, tokens = m.get_computed_blocks(request("b", 12))
    assert (hit, tokens) == ([[NULL_BLOCK, NULL_BLOCK, NULL_BLOCK, 4, 5]], 10)
    b = request("b", 12)
    assert m.allocate_slots(b, 2, tokens, hit) == [[6]]
    # 10 computed: tokens 0..6 left the window, blocks 0..2 are null; 4 and 5 touched
    assert m.get_block_ids("b") == [[0, 0, 0, 4, 5, 6]]
    assert m.view().blocks[4].ref_count == 1 and 1 in m.view().free_queue


def test_a_hybrid_hit_is_the_length_every_group_serves() -> None:
    """Groups (window 4, full), B = 2. The full group could hit 3 blocks; the window group
    lost its third block, so it serves 2 blocks (its blocks 0 and 1), and so does the hit."""
    m = manager(num_blocks=8, block_size=2, groups=(window(4), KVGroup()))
    admit(m, request("a", 6))
    assert m.get_block_ids("a") == [[1, 2, 3], [4, 5, 6]]
    m.free("a")
    # window group's blocks go back first, tail first, to the back of the queue
    assert m.view().free_queue == (7, 3, 2, 1, 6, 5, 4)
    admit(m, request("x", 1, tokens=(99,)))  # takes 7 and 3: the window group's block 2
    assert m.take_events()[-1] == BlockRemoved((request_block_hashes(request("a", 6), 2)[2],), 0)
    b = request("b", 8)
    hit, tokens = m.get_computed_blocks(b)
    assert (hit, tokens) == ([[1, 2], [4, 5]], 4)
    # the full group alone would serve 3 blocks
    hashes = request_block_hashes(b, 2)
    assert all(
        m.view().blocks[f].cached == CachedKey(1, hashes[i]) for i, f in enumerate((4, 5, 6))
    )


# --- §4 allocate_slots --------------------------------------------------------------------------


def test_chunked_prefill_caches_each_full_block_once() -> None:
    m = manager()
    r = request("a", 10)
    hashes = request_block_hashes(r, 4)
    assert m.allocate_slots(r, 4) == [[1]]
    assert m.allocate_slots(replace(r, num_computed_tokens=4), 4) == [[2]]
    assert m.allocate_slots(replace(r, num_computed_tokens=8), 2) == [[3]]
    assert m.view().requests["a"] == RequestTableView(((1, 2, 3),), (2,))
    first, second = stored(m.take_events())
    assert first == BlockStored((hashes[0],), None, (0, 1, 2, 3), 4, None, 0)
    assert second == BlockStored((hashes[1],), hashes[0], (4, 5, 6, 7), 4, None, 0)


def test_a_draft_token_is_never_cached() -> None:
    m = manager()
    prefill = request("a", 6)
    admit(m, prefill)
    m.take_events()
    # one sampled token (committed, 7 tokens) and two drafts: slots for 9, block 1 not cached
    decode = request("a", 7, computed=6)
    assert m.allocate_slots(decode, 3) == [[3]]
    assert m.view().requests["a"].num_cached_blocks == (1,)
    assert m.take_events() == []
    assert m.view().blocks[2].cached is None
    # both drafts rejected: the computed count rolls back; the bonus token fills block 1
    rolled = request("a", 8, computed=7)
    assert m.allocate_slots(rolled, 3) == [[]]
    hashes = request_block_hashes(rolled, 4)
    assert stored(m.take_events()) == [
        BlockStored((hashes[1],), hashes[0], (4, 5, 6, 7), 4, None, 0)
    ]


def test_lookahead_slots_are_allocated_and_never_cached() -> None:
    m = manager()
    assert m.allocate_slots(request("a", 4), 4, num_lookahead_tokens=5) == [[1, 2, 3]]
    assert m.view().requests["a"].num_cached_blocks == (1,)
    assert [b for b, v in m.view().blocks.items() if v.cached] == [1]


def test_max_model_len_caps_the_slots() -> None:
    m = manager(max_model_len=6)
    assert m.allocate_slots(request("a", 6), 6, num_lookahead_tokens=4) == [[1, 2]]


def test_a_known_request_needs_only_blocks_past_its_table() -> None:
    m = manager(num_blocks=4, block_size=2)
    admit(m, request("a", 4))
    assert m.allocate_slots(request("a", 5, computed=4), 1) == [[3]]
    assert m.allocate_slots(request("a", 6, computed=5), 1) == [[]]
    assert m.allocate_slots(request("a", 7, computed=6), 1) is None


def test_a_hit_counts_its_blocks_that_sit_in_the_free_queue() -> None:
    """Touching a free hit block takes it out of the free queue: it counts against the fit."""
    m = manager(num_blocks=4, block_size=2)
    admit(m, request("a", 5))
    m.free("a")
    assert m.view().free_queue == (3, 2, 1)
    hit, tokens = m.get_computed_blocks(request("b", 7))
    assert (hit, tokens) == ([[1, 2]], 4)
    before = m.view()
    assert m.allocate_slots(request("b", 7), 3, tokens, hit) is None  # 2 new + 2 touched > 3
    assert m.view() == before
    assert m.allocate_slots(request("b", 5), 1, tokens, hit) == [[3]]  # 1 new + 2 touched
    assert m.get_block_ids("b") == [[1, 2, 3]]
    assert m.view().free_queue == ()


def test_none_leaves_everything_unchanged() -> None:
    m = manager(num_blocks=4)
    admit(m, request("a", 4))
    events = m.take_events()
    before = m.view()
    assert m.allocate_slots(request("b", 12, tokens=tuple(range(50, 62))), 12) is None
    assert m.view() == before
    assert m.take_events() == []
    assert events


def test_window_release_happens_even_when_the_answer_is_none() -> None:
    groups = (window(4),)
    m = manager(num_blocks=5, block_size=2, groups=groups)
    admit(m, request("a", 6))
    assert m.get_block_ids("a") == [[1, 2, 3]]
    big = request("a", 16, computed=6)
    # 6 computed: tokens 0..2 left the window, so block 0 goes back (cached: to the back)
    assert m.allocate_slots(big, 10) is None
    assert m.get_block_ids("a") == [[0, 2, 3]]
    assert m.view().free_queue == (4, 1)
    # policy request_release_before_fit=false: a None changes nothing
    strict = manager(
        num_blocks=5,
        block_size=2,
        groups=groups,
        policy=replace(PAGEDKV, request_release_before_fit=False),
    )
    admit(strict, request("a", 6))
    before = strict.view()
    assert strict.allocate_slots(big, 10) is None
    assert strict.view() == before
    assert strict.allocate_slots(request("a", 7, computed=6), 1) == [[4]]
    assert strict.get_block_ids("a") == [[0, 2, 3, 4]]


def test_window_release_walks_down_to_the_first_null_block() -> None:
    m = manager(num_blocks=10, block_size=2, groups=(window(4),))
    r = request("a", 10)
    assert m.allocate_slots(replace(r, tokens=r.tokens[:4], num_prompt_tokens=4), 4) == [[1, 2]]
    assert m.allocate_slots(
        replace(r, tokens=r.tokens[:6], num_prompt_tokens=6, num_computed_tokens=4), 2
    ) == [[3]]
    assert m.get_block_ids("a") == [[1, 2, 3]]  # 4 computed: only token 0 left the window
    assert m.allocate_slots(
        replace(r, tokens=r.tokens[:7], num_prompt_tokens=7, num_computed_tokens=6), 1
    ) == [[4]]
    assert m.get_block_ids("a") == [[0, 2, 3, 4]]
    m.take_events()
    assert m.allocate_slots(
        replace(r, tokens=r.tokens[:9], num_prompt_tokens=9, num_computed_tokens=8), 1
    ) == [[5]]
    assert m.get_block_ids("a") == [[0, 0, 3, 4, 5]]
    assert m.view().free_queue[-2:] == (1, 2)  # both cached: to the back, in release order


def test_duplicates_stay_in_the_cache_map_and_the_first_is_found() -> None:
    m = manager(num_blocks=8)
    prompt = request("a", 8)
    admit(m, prompt)
    # b computed the same prompt at the same time (its lookup came before a was cached)
    assert m.allocate_slots(replace(prompt, request_id="b"), 8) == [[3, 4]]
    hashes = request_block_hashes(prompt, 4)
    assert m.view().blocks[3].cached == m.view().blocks[1].cached == CachedKey(0, hashes[0])
    assert m.get_computed_blocks(request("c", 9)) == ([[1, 2]], 8)
    m.free("a")
    m.free("b")
    assert m.view().free_queue == (5, 6, 7, 2, 1, 4, 3)
    admit(m, request("x", 16, tokens=tuple(range(50, 66))))  # takes 5, 6, 7, 2: 2 evicted
    # block 1 is still the first under hash 0; the second block is now b's 4
    assert m.get_computed_blocks(request("c", 9)) == ([[1, 4]], 8)


# --- §5 free and §7 giving back ----------------------------------------------------------------


def test_free_gives_back_tail_first_uncached_to_the_front_cached_to_the_back() -> None:
    m = manager(num_blocks=8, block_size=2)
    admit(m, request("a", 5))
    assert m.get_block_ids("a") == [[1, 2, 3]]
    m.free("a")
    assert m.view().free_queue == (3, 4, 5, 6, 7, 2, 1)
    # the chain's tail is evicted before its head
    admit(m, request("x", 12, tokens=tuple(range(50, 62))))
    hashes = request_block_hashes(request("a", 5), 2)
    removed = [e for e in m.take_events() if isinstance(e, BlockRemoved)]
    assert removed == [BlockRemoved((hashes[1],), 0)]
    assert m.get_computed_blocks(request("c", 5)) == ([[1]], 2)
    # policy request_free_order=head_first
    h = manager(
        num_blocks=8, block_size=2, policy=replace(PAGEDKV, request_free_order="head_first")
    )
    admit(h, request("a", 5))
    h.free("a")
    assert h.view().free_queue == (3, 4, 5, 6, 7, 1, 2)


def test_without_caching_every_block_goes_to_the_front() -> None:
    m = manager(num_blocks=6, block_size=2, caching=False)
    admit(m, request("a", 5))
    m.free("a")
    assert m.view().free_queue == (3, 2, 1, 4, 5)
    assert m.take_events() == []


def test_free_of_an_unknown_request_is_a_no_op_and_groups_give_back_in_order() -> None:
    m = manager(num_blocks=8, block_size=2, groups=(KVGroup(), KVGroup()), caching=False)
    before = m.view()
    m.free("nobody")
    assert m.view() == before
    admit(m, request("a", 3))
    assert m.get_block_ids("a") == [[1, 2], [3, 4]]
    m.free("a")
    # one give-back per group: the second group's blocks land in front of the first's
    assert m.view().free_queue == (4, 3, 2, 1, 5, 6, 7)


def test_preemption_by_recompute_hits_its_own_prefix() -> None:
    m = manager()
    admit(m, request("a", 10))
    m.free("a")
    assert admit(m, request("a", 11)) == [[3]]
    assert m.get_block_ids("a") == [[1, 2, 3]]
    assert m.view().requests["a"].num_cached_blocks == (2,)


# --- §6 queries, §9 reset and events ------------------------------------------------------------


def test_get_block_ids_of_an_unknown_request_is_an_error() -> None:
    m = manager()
    with pytest.raises(UnknownRequestError, match="'nobody'"):
        m.get_block_ids("nobody")


def test_reset_is_refused_while_a_block_is_held() -> None:
    m = manager()
    admit(m, request("a", 8))
    m.take_events()
    before = m.view()
    assert m.reset_prefix_cache() is False
    assert m.view() == before and m.take_events() == []
    m.free("a")
    queue = m.view().free_queue
    assert m.reset_prefix_cache() is True
    assert m.view().free_queue == queue
    assert all(v.cached is None for v in m.view().blocks.values())
    assert m.take_events() == [AllBlocksCleared()]
    assert m.get_computed_blocks(request("b", 9)) == ([[]], 0)


def test_events_name_the_run_its_parent_tokens_lora_and_group() -> None:
    m = manager(num_blocks=10, block_size=2, groups=(KVGroup(), window(4)))
    r = request("a", 5, extra_key=ExtraKey(lora_id=3))
    hashes = request_block_hashes(r, 2)
    admit(m, r)
    events = m.take_events()
    assert events == [
        BlockStored(tuple(hashes), None, (0, 1, 2, 3), 2, 3, 0),
        BlockStored(tuple(hashes), None, (0, 1, 2, 3), 2, 3, 1),
    ]
    assert m.take_events() == []


def test_keys_separate_hits() -> None:
    m = manager(num_blocks=20)
    admit(m, request("a", 12))
    for key in (ExtraKey(lora_id=1), ExtraKey(cache_salt="s")):
        assert m.get_computed_blocks(request("b", 12, extra_key=key)) == ([[]], 0)
    picture = MultimodalInput(offset=5, length=2, identifier="img-1")
    admit(m, request("p", 12, multimodal=(picture,)))
    # the same tokens with another picture share only the block before it
    other = request("q", 12, multimodal=(replace(picture, identifier="img-2"),))
    assert m.get_computed_blocks(other) == ([[1]], 4)
    assert m.get_computed_blocks(request("r", 12, multimodal=(picture,))) == (
        [m.get_block_ids("p")[0][:2]],
        8,
    )


# --- §6 usage -----------------------------------------------------------------------------------


def test_usage_is_exactly_the_formula() -> None:
    for num_blocks in (2, 3, 7, 10):
        m = manager(num_blocks=num_blocks, block_size=1)
        for step in range(num_blocks - 1):
            expected = 1.0 - m.num_free_blocks() / (num_blocks - 1)
            assert m.usage() == expected
            assert Fraction(m.usage()).limit_denominator(1000) == Fraction(
                num_blocks - 1 - m.num_free_blocks(), num_blocks - 1
            )
            m.allocate_slots(request(f"r{step}", 1, tokens=(step,)), 1)
        assert m.usage() == 1.0
        m.free("r0")
        assert m.usage() == 1.0 - 1 / (num_blocks - 1)


# --- §8 typed errors ----------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[object, str]] = [
    ("not a config", "'not a config'"),
    (RequestConfig(1, 4), "got 1"),
    (RequestConfig(4, 0), "got 0"),
    (RequestConfig(4, 4, ()), "got ()"),
    (RequestConfig(4, 4, (window(1),)), "got 1"),
    (RequestConfig(4, 4, (KVGroup(AttentionKind.SLIDING_WINDOW),)), "got None"),
    (RequestConfig(4, 4, (KVGroup(sliding_window=8),)), "got 8"),
    (RequestConfig(4, 4, ("full",)), "'full'"),  # type: ignore[arg-type]
    (RequestConfig(4, 4, enable_caching="yes"), "'yes'"),  # type: ignore[arg-type]
    (RequestConfig(4, 4, max_model_len=0), "got 0"),
]


@pytest.mark.parametrize(("config", "named"), BAD_CONFIGS)
def test_a_bad_config_is_a_configuration_error(config: object, named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        ReferenceRequestKVManager(config)  # type: ignore[arg-type]
    assert named in str(raised.value)


GOOD = request("g", 6)


def bad(value: object) -> Any:
    """A value of the wrong type, handed on as the type checker would refuse it."""
    return value


def bent(r: Request, **changes: object) -> Any:
    """``r`` with fields of any value (what a buggy caller might pass)."""
    return replace(r, **changes)  # type: ignore[arg-type]


BAD_CALLS: list[tuple[str, Callable[[RequestKVManager], object], type[PagedKVError], str]] = [
    ("not a request", lambda m: m.get_computed_blocks(bad("g")), InvalidArgumentError, "'g'"),
    ("id", lambda m: m.get_computed_blocks(bent(GOOD, request_id=7)), InvalidArgumentError, "7"),
    (
        "tokens",
        lambda m: m.get_computed_blocks(bent(GOOD, tokens="abc")),
        InvalidArgumentError,
        "'abc'",
    ),
    (
        "no tokens",
        lambda m: m.allocate_slots(bent(GOOD, tokens=()), 1),
        InvalidArgumentError,
        "none",
    ),
    (
        "token",
        lambda m: m.allocate_slots(bent(GOOD, tokens=(1, -5)), 1),
        InvalidArgumentError,
        "-5",
    ),
    (
        "prompt",
        lambda m: m.allocate_slots(bent(GOOD, num_prompt_tokens=0), 1),
        InvalidArgumentError,
        "got 0",
    ),
    (
        "prompt long",
        lambda m: m.allocate_slots(bent(GOOD, num_prompt_tokens=9), 1),
        InvalidArgumentError,
        "got 9",
    ),
    (
        "computed",
        lambda m: m.allocate_slots(bent(GOOD, num_computed_tokens=-2), 1),
        InvalidArgumentError,
        "-2",
    ),
    (
        "computed past",
        lambda m: m.allocate_slots(bent(GOOD, num_computed_tokens=7), 1),
        RequestStateError,
        "7",
    ),
    (
        "lora",
        lambda m: m.allocate_slots(bent(GOOD, extra_key=ExtraKey(lora_id=-1)), 1),
        InvalidArgumentError,
        "-1",
    ),
    (
        "salt",
        lambda m: m.allocate_slots(bent(GOOD, extra_key=ExtraKey(cache_salt="\ud800")), 1),
        InvalidArgumentError,
        "\\ud800",
    ),
    (
        "mm tuple",
        lambda m: m.allocate_slots(bent(GOOD, multimodal=[]), 1),
        InvalidArgumentError,
        "[]",
    ),
    (
        "mm item",
        lambda m: m.allocate_slots(bent(GOOD, multimodal=("x",)), 1),
        InvalidArgumentError,
        "'x'",
    ),
    (
        "mm range",
        lambda m: m.allocate_slots(bent(GOOD, multimodal=(MultimodalInput(4, 3, "i"),)), 1),
        InvalidArgumentError,
        "[4, 7)",
    ),
    (
        "mm length",
        lambda m: m.allocate_slots(bent(GOOD, multimodal=(MultimodalInput(1, 0, "i"),)), 1),
        InvalidArgumentError,
        "length=0",
    ),
    (
        "mm id",
        lambda m: m.allocate_slots(bent(GOOD, multimodal=(MultimodalInput(1, 1, "\udfff"),)), 1),
        InvalidArgumentError,
        "\\udfff",
    ),
    ("too long", lambda m: m.allocate_slots(request("g", 25), 1), InvalidArgumentError, "25"),
    ("new", lambda m: m.allocate_slots(GOOD, -1), InvalidArgumentError, "-1"),
    ("new type", lambda m: m.allocate_slots(GOOD, bad("2")), InvalidArgumentError, "'2'"),
    ("adopted", lambda m: m.allocate_slots(GOOD, 1, True), InvalidArgumentError, "True"),
    ("lookahead", lambda m: m.allocate_slots(GOOD, 1, 0, None, -3), InvalidArgumentError, "-3"),
    ("nothing", lambda m: m.allocate_slots(GOOD, 0), InvalidArgumentError, "got 0"),
    ("hit shape", lambda m: m.allocate_slots(GOOD, 1, 0, bad("xy")), InvalidArgumentError, "'xy'"),
    (
        "hit groups",
        lambda m: m.allocate_slots(GOOD, 1, 0, [[], [], []]),
        InvalidArgumentError,
        "got 3",
    ),
    ("hit list", lambda m: m.allocate_slots(GOOD, 1, 0, bad([[], 5])), InvalidArgumentError, "5"),
    (
        "hit id",
        lambda m: m.allocate_slots(GOOD, 1, 4, bad([["1"], [1]])),
        InvalidArgumentError,
        "'1'",
    ),
    ("hit range", lambda m: m.allocate_slots(GOOD, 1, 4, [[99], [1]]), ForeignBlockError, "99"),
    (
        "known hit",
        lambda m: m.allocate_slots(request("known", 6, 4), 1, 4, [[1], [2]]),
        RequestStateError,
        "'known'",
    ),
    (
        "unknown computed",
        lambda m: m.allocate_slots(bent(GOOD, num_computed_tokens=4), 1),
        RequestStateError,
        "4",
    ),
    ("not whole", lambda m: m.allocate_slots(GOOD, 1, 3, [[], []]), InvalidArgumentError, "got 3"),
    (
        "hit length",
        lambda m: m.allocate_slots(GOOD, 1, 4, [[1], []]),
        InvalidArgumentError,
        "has 0",
    ),
    ("hit none", lambda m: m.allocate_slots(GOOD, 1, 4), InvalidArgumentError, "has 0"),
    (
        "not cached",
        lambda m: m.allocate_slots(GOOD, 1, 4, [[9], [1]]),
        RequestStateError,
        "block 9",
    ),
    (
        "wrong group",
        lambda m: m.allocate_slots(GOOD, 1, 4, [[2], [1]]),
        RequestStateError,
        "block 2",
    ),
    ("null", lambda m: m.allocate_slots(GOOD, 1, 4, [[0], [2]]), RequestStateError, "index 0"),
    (
        "past",
        lambda m: m.allocate_slots(request("g", 2), 1, 4, [[1], [2]]),
        RequestStateError,
        "index 0",
    ),
    ("free id", lambda m: m.free(bad(3)), InvalidArgumentError, "3"),
    ("block ids id", lambda m: m.get_block_ids(bad(None)), InvalidArgumentError, "None"),
    ("unknown", lambda m: m.get_block_ids("ghost"), UnknownRequestError, "'ghost'"),
]


def _prepared() -> ReferenceRequestKVManager:
    """Groups (full, window 8), B = 4, max_model_len 24; ``known`` holds blocks, and blocks 1
    (full) and 2 (window) are cached for tokens 0..3 and free."""
    m = manager(num_blocks=12, groups=(KVGroup(), window(8)), max_model_len=24)
    admit(m, request("first", 4))
    m.free("first")
    admit(m, request("known", 4, tokens=(7, 7, 7, 7)))
    return m


@pytest.mark.parametrize(
    ("what", "call", "error", "named"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS]
)
def test_a_bad_call_raises_its_typed_error_naming_the_value_and_changes_nothing(
    what: str,
    call: Callable[[RequestKVManager], object],
    error: type[PagedKVError],
    named: str,
) -> None:
    m = _prepared()
    assert m.atomic is True
    assert m.view().blocks[1].cached is not None and m.view().blocks[2].cached is not None
    before, events = m.view(), m.state.events
    with pytest.raises(error) as raised:
        call(m)
    assert type(raised.value) is error, what
    assert named in str(raised.value), (what, str(raised.value))
    assert m.view() == before and m.state.events == events


def test_the_prepared_hit_is_accepted() -> None:
    """The control of the table above: the hit its errors bend is a valid one."""
    m = _prepared()
    assert m.allocate_slots(GOOD, 2, 4, [[1], [2]]) == [[5], [6]]
