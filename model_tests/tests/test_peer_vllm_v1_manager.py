"""vLLM 0.33.0's ``KVCacheManager`` behind ``VllmV1Manager`` (``model_tests/peers/``), held to
the reference request-level manager call for call: the worked cases of
``specs/request_level.md`` and seeded scheduler runs over full attention, a sliding window and
the hybrid of both (``specs/peers.md``, "vLLM v1 (0.33.0) KVCacheManager").

Skipped when ``.peers/`` lacks vLLM's files, failed under ``CI=true`` (as ``test_peers.py``).
The seeded runs play a v1 scheduler: admission through ``get_computed_blocks`` and
``allocate_slots``, chunked prefill, decode with draft tokens and rejections, lookahead,
preemption by recompute, finishing, shared prompts under a few extra keys and multimodal
inputs, and ``reset_prefix_cache``; after every call both managers' answers (or error types)
and views must be equal.
"""

from __future__ import annotations

import inspect
import json
import random
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest

from pagedkv.model_tests.peers import sources, vllm_v1_manager
from pagedkv.model_tests.peers.standins import vllm_v1_manager as standins
from pagedkv.model_tests.peers.vllm_v1_manager import Switches, VllmV1Manager
from pagedkv.model_tests.tests import test_request_reference as examples
from pagedkv.model_tests.tests.test_peers import needs
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.errors import PagedKVError, UnknownRequestError
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.policy import PAGEDKV, PROFILES, Policy
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    AttentionKind,
    BlockStored,
    KVEvent,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import ExtraKey

FULL = (KVGroup(),)


def window(size: int) -> KVGroup:
    return KVGroup(AttentionKind.SLIDING_WINDOW, size)


VLLM_V1 = PROFILES["vllm-v1"]
"""The profile of vLLM's own choices (``request_window_retention=replay_boundary``,
``request_clear_event=always``): what vLLM out of the box is held to."""

AS_PAGEDKV = Switches(dense_window_retention=True, events_only_with_caching=True)
"""vLLM configured as the ``pagedkv`` profile chooses (``specs/peers.md`` P1, P2)."""


def dense() -> Callable[[RequestConfig], RequestKVManager]:
    """vLLM configured as pagedkv's profile (every full block of a window group cached, no
    events without caching): held to the reference under ``pagedkv``."""

    def build(config: RequestConfig) -> RequestKVManager:
        return VllmV1Manager(config, AS_PAGEDKV)

    return build


SPARSE = PAGEDKV.overridden({"request_window_retention": "replay_boundary"})


def sparse() -> Callable[[RequestConfig], RequestKVManager]:
    """vLLM's own window retention, events only with caching: held to ``SPARSE``."""

    def build(config: RequestConfig) -> RequestKVManager:
        return VllmV1Manager(config, Switches(events_only_with_caching=True))

    return build


# --- lockstep -----------------------------------------------------------------------------


class Divergence(AssertionError):
    pass


def past_d1(events: list[KVEvent]) -> list[tuple[object, ...]]:
    """The events as D1 (``specs/peers.md``) leaves them comparable: each ``BlockStored`` without
    its tokens and parent, and a group's stores that follow one another merged into one (vLLM
    sends one per group and call, with the tokens of the whole range, and an empty one when it
    stores nothing; the spec one per run of blocks stored, with exactly their tokens). Every
    other field, and every other event, compared as it is."""
    shown: list[tuple[object, ...]] = []
    for event in events:
        if not isinstance(event, BlockStored):
            shown.append((event,))
            continue
        if not event.block_hashes:
            continue
        fields = ("stored", event.group, event.block_size, event.lora_id)
        if shown and shown[-1][:4] == fields:
            last = shown.pop()
            shown.append((*fields, (*cast(tuple[object, ...], last[4]), *event.block_hashes)))
        else:
            shown.append((*fields, event.block_hashes))
    return shown


@dataclass
class Lockstep:
    """One call on both managers; answers (or error types) and views compared after each.
    ``known_d1`` compares ``take_events``' answers past D1 (``past_d1``)."""

    reference: RequestKVManager
    target: RequestKVManager
    trace: list[str]
    errors: list[str] = field(default_factory=list)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    known_d1: bool = False

    def __call__(self, name: str, *args: Any) -> Any:
        self.trace.append(f"{name}{args!r}")
        self.calls.append((name, args))
        answers = []
        raised: list[Exception] = []
        for side in (self.reference, self.target):
            try:
                answers.append(("ok", getattr(side, name)(*args)))
            except Exception as error:  # the error's type is the answer
                answers.append(("error", type(error).__name__))
                raised.append(error)
                self.errors.append(f"{type(error).__name__}: {error}")
        if self.known_d1 and name == "take_events" and not raised:
            compared = [("ok", past_d1(answer)) for _, answer in answers]
        else:
            compared = answers
        if compared[0] != compared[1]:
            self.fail(f"{name}: reference {answers[0]!r}, vLLM {answers[1]!r} ({self.errors[-1:]})")
        reference_view = self.reference.view().comparable()
        target_view = self.target.view().comparable()
        if reference_view != target_view:
            self.fail(
                f"after {name}: views differ\nreference {reference_view}\nvLLM      {target_view}"
            )
        if raised:
            raise raised[0]  # the reference's error; vLLM raised one of the same type
        return answers[0][1]

    def fail(self, message: str) -> None:
        steps = "\n".join(f"  {i + 1}. {step}" for i, step in enumerate(self.trace))
        raise Divergence(f"{message}\n{steps}")


@dataclass(frozen=True)
class Round:
    """What vLLM is held to: the reference under ``policy``, and whether D1 is stepped past."""

    policy: Policy = PAGEDKV
    known_d1: bool = False


OUT_OF_THE_BOX = Round(VLLM_V1)
"""vLLM as the engine is against the ``vllm-v1`` profile."""


def lockstep(
    config: RequestConfig,
    target: Callable[[RequestConfig], RequestKVManager],
    held_to: Round = OUT_OF_THE_BOX,
) -> Lockstep:
    reference = ReferenceRequestKVManager(config, held_to.policy)
    trace = [f"config {config!r}, {held_to}"]
    return Lockstep(reference, target(config), trace, known_d1=held_to.known_d1)


def replay(
    config: RequestConfig,
    target: Callable[[RequestConfig], RequestKVManager],
    calls: list[tuple[str, tuple[Any, ...]]],
    held_to: Round,
) -> Divergence | None:
    both = lockstep(config, target, held_to)
    for name, args in calls:
        try:
            both(name, *args)
        except PagedKVError:
            pass
        except Divergence as divergence:
            return divergence
    return None


def _request_id(args: tuple[Any, ...]) -> str | None:
    first = args[0] if args else None
    if isinstance(first, Request):
        return first.request_id
    return first if isinstance(first, str) else None


def shrink(
    config: RequestConfig,
    target: Callable[[RequestConfig], RequestKVManager],
    calls: list[tuple[str, tuple[Any, ...]]],
    held_to: Round,
) -> Divergence:
    """The divergence of a short subsequence of ``calls`` (calls carry their request values, so
    any subsequence can be replayed): chunks of halving size dropped while it still diverges."""
    found = replay(config, target, calls, held_to)
    assert found is not None
    named = {_request_id(args) for _, args in calls}
    for request_id in sorted((n for n in named if n is not None), reverse=True):
        fewer = [(name, args) for name, args in calls if _request_id(args) != request_id]
        divergence = replay(config, target, fewer, held_to)
        if divergence is not None:
            calls, found = fewer, divergence
    size = max(1, len(calls) // 2)
    while True:
        start = len(calls) - size
        while start >= 0 and calls:
            fewer = calls[:start] + calls[start + size :]
            divergence = replay(config, target, fewer, held_to)
            if divergence is not None:
                calls, found = fewer, divergence
            start -= size
        if size == 1:
            return found
        size = max(1, size // 2)


def test_a_cache_written_with_fewer_members_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``.peers/`` written when vLLM's source listed only the pool's files lacks the request
    level's: it counts as not fetched, so ``make peers-fetch`` fetches it again."""
    monkeypatch.setenv("PAGEDKV_PEERS_CACHE", str(tmp_path))
    source = sources.VLLM_V1
    source.directory.mkdir(parents=True)
    manifest = source.directory / sources.MANIFEST
    manifest.write_text(json.dumps({"files": {m: "" for m in source.members[:4]}}))
    assert not source.fetched
    manifest.write_text(json.dumps({"files": {m: "" for m in source.members}}))
    assert source.fetched


# --- the worked cases ----------------------------------------------------------------------


class BothManagers:
    """A ``RequestKVManager`` whose every call runs on the reference and on vLLM in lockstep:
    ``test_request_reference.py``'s worked examples, run over it, hold vLLM to each answer."""

    def __init__(self, both: Lockstep) -> None:
        self.both = both

    @property
    def config(self) -> RequestConfig:
        return self.both.reference.config

    @property
    def state(self) -> Any:
        return cast(ReferenceRequestKVManager, self.both.reference).state

    def get_computed_blocks(self, request: Request) -> Any:
        return self.both("get_computed_blocks", request)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Any = None,
        num_lookahead_tokens: int = 0,
    ) -> Any:
        return self.both(
            "allocate_slots",
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
        )

    def free(self, request_id: str) -> None:
        self.both("free", request_id)

    def get_block_ids(self, request_id: str) -> Any:
        return self.both("get_block_ids", request_id)

    def num_free_blocks(self) -> int:
        return cast(int, self.both("num_free_blocks"))

    def usage(self) -> float:
        return cast(float, self.both("usage"))

    def reset_prefix_cache(self) -> bool:
        return cast(bool, self.both("reset_prefix_cache"))

    def take_events(self) -> Any:
        return self.both("take_events")

    def view(self) -> Any:
        return self.both.reference.view()


WORKED = sorted(
    name
    for name, test in vars(examples).items()
    if name.startswith("test_") and not inspect.signature(test).parameters
)


@needs(sources.VLLM_V1)
@pytest.mark.parametrize("name", WORKED)
def test_the_reference_worked_examples_hold_for_vllm(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worked example of ``test_request_reference.py`` under the default policy (vLLM
    configured as it chooses) or under vLLM's sparse window retention (vLLM as it is), with vLLM
    in lockstep with the reference at every call, past D1."""
    build = examples.manager

    def manager(*args: Any, policy: Policy = PAGEDKV, **kwargs: Any) -> Any:
        reference = build(*args, policy=policy, **kwargs)
        if policy == PAGEDKV:
            target = dense()
        elif policy == SPARSE:
            target = sparse()
        else:
            return reference  # another policy's example: not vLLM's choices
        return BothManagers(lockstep(reference.config, target, Round(policy, known_d1=True)))

    monkeypatch.setattr(examples, "manager", manager)
    getattr(examples, name)()


@needs(sources.VLLM_V1)
def test_a_fully_cached_prompt_is_hit_at_n_minus_one_in_full_blocks() -> None:
    both = lockstep(RequestConfig(num_blocks=10, block_size=4), VllmV1Manager)
    first = Request("a", tuple(range(8)), 8)
    assert both("get_computed_blocks", first) == ([[]], 0)
    assert both("allocate_slots", first, 8) == [[1, 2]]
    both("free", "a")
    again = Request("b", tuple(range(8)), 8)
    blocks, hit = both("get_computed_blocks", again)
    assert (blocks, hit) == ([[1]], 4)  # 7 tokens at most: one full block
    assert both("allocate_slots", again, 4, 4, blocks) == [[3]]


@needs(sources.VLLM_V1)
def test_a_draft_token_is_never_cached() -> None:
    both = lockstep(RequestConfig(num_blocks=10, block_size=2), VllmV1Manager)
    request = Request("a", (1, 2, 3), 3)
    both("allocate_slots", request, 3)
    both("take_events")
    decoding = replace(request, tokens=(1, 2, 3, 4), num_computed_tokens=3)
    both("allocate_slots", decoding, 3)  # the committed token 4 and two drafts
    (stored,) = both("take_events")
    assert isinstance(stored, BlockStored) and stored.token_ids == (3, 4)


@needs(sources.VLLM_V1)
def test_a_window_releases_to_the_null_block_even_when_the_answer_is_none() -> None:
    both = lockstep(RequestConfig(num_blocks=5, block_size=2, groups=(window(3),)), VllmV1Manager)
    request = Request("a", tuple(range(6)), 6)
    assert both("allocate_slots", request, 6) == [[1, 2, 3]]
    later = replace(request, tokens=tuple(range(7)), num_computed_tokens=6)
    assert both("allocate_slots", later, 1, 0, None, 8) is None
    assert both("get_block_ids", "a")[0][:2] == [NULL_BLOCK, NULL_BLOCK]


@needs(sources.VLLM_V1)
def test_a_hybrid_hit_is_a_length_both_groups_serve() -> None:
    config = RequestConfig(num_blocks=16, block_size=2, groups=(*FULL, window(4)))
    both = lockstep(config, VllmV1Manager)
    prompt = tuple(range(11))
    both("allocate_slots", Request("a", prompt, 11), 11)
    both("free", "a")
    blocks, hit = both("get_computed_blocks", Request("b", (*prompt, 99), 12))
    assert hit == 10 and blocks[1][:3] == [NULL_BLOCK] * 3


@needs(sources.VLLM_V1)
def test_an_unknown_request_has_no_block_ids_and_its_free_is_a_no_op() -> None:
    both = lockstep(RequestConfig(num_blocks=4, block_size=2), VllmV1Manager)
    both("free", "nobody")
    with pytest.raises(UnknownRequestError):
        both("get_block_ids", "nobody")


@needs(sources.VLLM_V1)
def test_out_of_the_box_a_window_group_caches_only_the_replay_boundarys_tail() -> None:
    """P1 of ``specs/peers.md``, vLLM's default ``prefix_cache_retention_interval=0``: of a
    6-token prompt (block size 2, window 3: one block serves a hit) only the block before
    ``num_prompt_tokens - 1`` rounded down, index 1, is cached, as the ``vllm-v1`` profile's
    reference does; configured dense, vLLM caches all three, as the ``pagedkv`` profile does."""
    config = RequestConfig(num_blocks=5, block_size=2, groups=(window(3),))
    for target, held_to, cached in (
        (VllmV1Manager, OUT_OF_THE_BOX, [2]),
        (dense(), Round(PAGEDKV), [1, 2, 3]),
    ):
        both = lockstep(config, target, held_to)
        both("allocate_slots", Request("a", tuple(range(6)), 6), 6)
        assert [block for block, facts in both.target.view().blocks.items() if facts.cached] == (
            cached
        )


@needs(sources.VLLM_V1)
def test_out_of_the_box_a_reset_without_caching_reports_all_blocks_cleared() -> None:
    """P2 of ``specs/peers.md``: vLLM's events may be on without caching."""
    config = RequestConfig(num_blocks=10, block_size=2, groups=(window(7),), enable_caching=False)
    both = lockstep(config, VllmV1Manager)
    assert both("reset_prefix_cache")
    assert both("take_events") == [AllBlocksCleared()]
    both = lockstep(config, dense(), Round(PAGEDKV))
    both("reset_prefix_cache")
    assert both("take_events") == []


@needs(sources.VLLM_V1)
def test_the_same_image_elsewhere_in_a_block_is_not_a_hit() -> None:
    """H1 of ``specs/peers.md``: vLLM keys an image with its offset in the block; so does the
    spec now."""
    both = lockstep(RequestConfig(num_blocks=10, block_size=2), VllmV1Manager)
    tokens = (0, 0, 0, 0, 1, 2)
    first = Request("a", tokens, 6, multimodal=(MultimodalInput(1, 4, "cat"),))
    both("allocate_slots", first, 6)
    moved = Request("b", tokens, 6, multimodal=(MultimodalInput(0, 4, "cat"),))
    assert both("get_computed_blocks", moved) == ([[]], 0)
    same = Request("c", tokens, 6, multimodal=(MultimodalInput(1, 4, "cat"),))
    assert both("get_computed_blocks", same) == ([[1, 2]], 4)


@needs(sources.VLLM_V1)
def test_c1_overlapping_placeholders_are_keyed_up_to_the_first_that_runs_past_the_block() -> None:
    """C1 of ``specs/peers.md`` (contract): vLLM walks a request's placeholders in order and
    stops a block's keys at the first that runs past the block, so of two placeholders that
    share a token it keys a block with the first alone. Here the block holds an image twice,
    vLLM keys it as the other request's block with the image once and serves a hit the spec
    does not. Its input processor never makes placeholders overlap; the peer's check draws
    none (``model_tests/peers/run.py``, ``disjoint_placeholders``)."""
    config = RequestConfig(num_blocks=4, block_size=2)
    once = (MultimodalInput(2, 1, "img-b"), MultimodalInput(1, 2, "img-b"))
    twice = (MultimodalInput(1, 2, "img-b"), MultimodalInput(1, 2, "img-b"))
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("allocate_slots", (Request("a", (3, 1, 0), 3, multimodal=once), 3)),
        ("get_computed_blocks", (Request("b", (3, 1, 4), 3, multimodal=twice),)),
    ]
    found = replay(config, VllmV1Manager, calls, OUT_OF_THE_BOX)
    assert found is not None and "get_computed_blocks" in str(found), found
    apart = (MultimodalInput(0, 1, "img-b"), MultimodalInput(1, 2, "img-b"))
    calls[1] = ("get_computed_blocks", (Request("b", (3, 1, 4), 3, multimodal=apart),))
    assert replay(config, VllmV1Manager, calls, OUT_OF_THE_BOX) is None


@needs(sources.VLLM_V1)
def test_vllm_d1_a_sparse_window_store_event_names_tokens_it_does_not_store() -> None:
    """D1 of ``specs/peers.md``, on vLLM's own objects (no adapter): a sliding-window group
    under the default retention (``prefix_cache_retention_interval=0``) masks blocks out of
    ``cache_full_blocks``, yet its ``BlockStored`` event keeps the token ids of the whole range
    and the parent hash of the range's start: one hash, six tokens; then no hash, two tokens."""
    loaded = vllm_v1_manager.modules()
    vllm_v1_manager._register_managers(loaded)
    utils = loaded["vllm.v1.core.kv_cache_utils"]
    sha256 = loaded["vllm.utils.hashing"].sha256
    utils.init_none_hash(sha256)
    spec = standins.SlidingWindowSpec(2, sliding_window=3)
    manager = loaded["vllm.v1.core.kv_cache_manager"].KVCacheManager(
        standins.KVCacheConfig(8, [], [standins.KVCacheGroupSpec(["layers.0"], spec)], 0),
        max_model_len=64,
        scheduler_block_size=2,
        hash_block_size=2,
        enable_caching=True,
        enable_kv_cache_events=True,
    )
    request = loaded["vllm.v1.request"].Request(
        request_id="a",
        prompt_token_ids=[10, 11, 12, 13, 14, 15],
        sampling_params=standins.SamplingParams(),
        pooling_params=None,
        block_hasher=utils.get_request_block_hasher(2, sha256),
    )
    manager.allocate_slots(request, 6)
    (stored,) = manager.take_events()
    assert stored.block_hashes == [request.block_hashes[1]]  # only block 1 is cached
    assert stored.parent_block_hash is None and stored.token_ids == [10, 11, 12, 13, 14, 15]
    request.num_computed_tokens = 6
    request.append_output_token_ids([16, 17])
    manager.allocate_slots(request, 2)
    (empty,) = manager.take_events()
    assert empty.block_hashes == [] and empty.token_ids == [16, 17]


@needs(sources.VLLM_V1)
def test_d1_through_the_adapter_is_a_take_events_divergence_and_only_that() -> None:
    """D1 against the ``vllm-v1`` profile's reference: window 3, block size 2, a 6-token prompt
    stores index 1 alone; the reference names its 2 tokens and parent, vLLM the 6 tokens of the
    range. The divergence is ``take_events``' and ``past_d1`` forgives exactly it."""
    config = RequestConfig(num_blocks=8, block_size=2, groups=(window(3),))
    prompt = Request("a", (10, 11, 12, 13, 14, 15), 6)
    hashes = request_block_hashes(prompt, 2)
    both = lockstep(config, VllmV1Manager)
    both("allocate_slots", prompt, 6)
    with pytest.raises(Divergence, match=r"^take_events: reference \('ok', \[BlockStored\("):
        both("take_events")
    past = lockstep(config, VllmV1Manager, Round(VLLM_V1, known_d1=True))
    past("allocate_slots", prompt, 6)
    assert past("take_events") == [BlockStored((hashes[1],), hashes[0], (12, 13), 2, None, 0)]


@needs(sources.VLLM_V1)
def test_d1_also_dense_a_block_released_before_it_is_cached_keeps_its_tokens_in_the_event() -> None:
    """D1 without sparse retention: window 2, block size 1, two drafts accepted: the first
    accepted token's block leaves the window before it is cached; vLLM's event still carries its
    token (3 tokens for 2 hashes), the reference's names the 2 blocks it stores."""
    config = RequestConfig(num_blocks=12, block_size=1, groups=(window(2),))
    accepted = Request("a", (5, 6, 7, 8, 9, 10, 11), 3, 6)  # both drafts and a bonus token
    for held_to in (Round(PAGEDKV), Round(PAGEDKV, known_d1=True)):
        both = lockstep(config, dense(), held_to)
        both("allocate_slots", Request("a", (5, 6, 7), 3), 3)
        both("allocate_slots", Request("a", (5, 6, 7, 8), 3, 3), 3)  # token 8 and two drafts
        both("take_events")
        both("allocate_slots", accepted, 1)
        if not held_to.known_d1:
            with pytest.raises(Divergence, match="take_events"):
                both("take_events")
            continue
        (stored,) = both("take_events")
        assert isinstance(stored, BlockStored)
        assert stored.token_ids == (10, 11) and len(stored.block_hashes) == 2


# --- seeded scheduler runs -----------------------------------------------------------------

CONFIGURATIONS = ("full", "hybrid", "window")


def random_groups(rng: random.Random, groups: str) -> tuple[KVGroup, ...]:
    """Full attention, a sliding window, or both over one pool; windows of 2 to 9 tokens."""
    if groups == "full":
        return (KVGroup(),)
    if groups == "window":
        return (window(rng.randint(2, 9)),)
    return (KVGroup(), window(rng.randint(2, 9)))


def random_config(rng: random.Random, groups: str) -> RequestConfig:
    return RequestConfig(
        num_blocks=rng.randint(3, 24),
        block_size=rng.choice((1, 2, 2, 4)),
        groups=random_groups(rng, groups),
        enable_caching=rng.random() < 0.85,
        max_model_len=rng.choice((None, None, None, 24)),
    )


@dataclass
class Scheduler:
    """A v1-style scheduler's requests: waiting ones (nothing computed) and running ones."""

    rng: random.Random
    both: Lockstep
    waiting: dict[str, Request]
    running: dict[str, Request]
    prefixes: list[tuple[int, ...]]
    next_id: int = 0

    def new_request(self) -> None:
        rng = self.rng
        prompt = rng.choice(self.prefixes) + tuple(
            rng.randrange(3) for _ in range(rng.randint(0, 6))
        )
        if not prompt:
            prompt = (rng.randrange(3),)
        key = rng.choice((ExtraKey(), ExtraKey(), ExtraKey(lora_id=1), ExtraKey(cache_salt="s")))
        multimodal: tuple[MultimodalInput, ...] = ()
        if rng.random() < 0.15:
            offset = rng.randrange(len(prompt))
            length = rng.randint(1, len(prompt) - offset)
            multimodal = (MultimodalInput(offset, length, rng.choice(("cat", "dog"))),)
        request_id = f"r{self.next_id}"
        self.next_id += 1
        self.waiting[request_id] = Request(request_id, prompt, len(prompt), 0, key, multimodal)

    def admit(self) -> None:
        request = self.waiting[self.rng.choice(sorted(self.waiting))]
        blocks, hit = self.both("get_computed_blocks", request)
        if hit and self.rng.random() < 0.2:  # the scheduler takes less than the hit
            size = self.both.reference.config.block_size
            kept = self.rng.randrange(hit // size)
            blocks, hit = [group[:kept] for group in blocks], kept * size
        chunk = self.rng.randint(1, max(1, request.num_tokens - hit))
        if hit and self.rng.random() < 0.1:  # a step that only adopts the hit
            chunk = 0
        lookahead = self.rng.choice((0, 0, 0, 1, 3))
        answer = self.both(
            "allocate_slots", request, chunk, hit, blocks if hit else None, lookahead
        )
        if answer is not None:
            del self.waiting[request.request_id]
            self.advance(replace(request, num_computed_tokens=hit + chunk))

    def advance(self, request: Request) -> None:
        """After a step: a request whose tokens are all computed samples its next token."""
        if request.num_computed_tokens >= request.num_tokens:
            request = replace(request, tokens=(*request.tokens, self.rng.randrange(3)))
        self.running[request.request_id] = request

    def step(self) -> None:
        request = self.running[self.rng.choice(sorted(self.running))]
        remaining = request.num_tokens - request.num_computed_tokens
        lookahead = self.rng.choice((0, 0, 1, 2))
        if remaining > 1:  # chunked prefill
            chunk = self.rng.randint(1, remaining)
            if self.both("allocate_slots", request, chunk, 0, None, lookahead) is not None:
                self.advance(
                    replace(request, num_computed_tokens=request.num_computed_tokens + chunk)
                )
            return
        drafts = self.rng.choice((0, 0, 1, 2))
        if self.both("allocate_slots", request, 1 + drafts, 0, None, lookahead) is None:
            return
        accepted = self.rng.randint(0, drafts)
        tokens = (*request.tokens, *(self.rng.randrange(3) for _ in range(accepted + 1)))
        self.running[request.request_id] = replace(
            request, tokens=tokens, num_computed_tokens=request.num_tokens + accepted
        )

    def preempt(self, finish: bool) -> None:
        request = self.running.pop(self.rng.choice(sorted(self.running)))
        self.both("free", request.request_id)
        if not finish:
            self.waiting[request.request_id] = replace(request, num_computed_tokens=0)

    def query(self) -> None:
        rng = self.rng
        choice = rng.randrange(7)
        if choice == 0:
            self.both("take_events")
        elif choice == 1:
            self.both("usage")
        elif choice == 2:
            self.both("num_free_blocks")
        elif choice == 3:
            self.both("reset_prefix_cache")
        elif choice == 4 and self.running:
            self.both("get_block_ids", rng.choice(sorted(self.running)))
        elif choice == 5 and self.running:
            self.both("get_computed_blocks", self.running[rng.choice(sorted(self.running))])
        else:
            self.both("free", "never-seen")


def run_scheduler(
    seed: int,
    groups: str,
    target: Callable[[RequestConfig], RequestKVManager],
    steps: int,
    held_to: Round = OUT_OF_THE_BOX,
) -> None:
    rng = random.Random(seed)
    config = random_config(rng, groups)
    both = lockstep(config, target, held_to)
    prefixes = [tuple(rng.randrange(3) for _ in range(rng.randint(0, 10))) for _ in range(3)]
    scheduler = Scheduler(rng, both, {}, {}, prefixes)
    for _ in range(steps):
        roll = rng.random()
        try:
            if roll < 0.2 or not (scheduler.waiting or scheduler.running):
                scheduler.new_request()
            elif roll < 0.45 and scheduler.waiting:
                scheduler.admit()
            elif roll < 0.75 and scheduler.running:
                scheduler.step()
            elif roll < 0.85 and scheduler.running:
                scheduler.preempt(finish=rng.random() < 0.5)
            else:
                scheduler.query()
        except PagedKVError:
            pass
        except Divergence:
            raise shrink(config, target, both.calls, held_to) from None
    both("take_events")


SEEDS = range(6)


@needs(sources.VLLM_V1)
@pytest.mark.parametrize("groups", CONFIGURATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_vllm_v1_manager_agrees_with_the_reference_past_d1(seed: int, groups: str) -> None:
    """vLLM as it is, held to the ``vllm-v1`` profile, D1 stepped past."""
    run_scheduler(seed, groups, VllmV1Manager, 300, Round(VLLM_V1, known_d1=True))


@needs(sources.VLLM_V1)
@pytest.mark.parametrize("groups", CONFIGURATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_vllm_configured_as_pagedkv_agrees_with_the_default_profile_past_d1(
    seed: int, groups: str
) -> None:
    """vLLM configured dense and without events unless caching, held to ``pagedkv``."""
    run_scheduler(seed, groups, dense(), 300, Round(PAGEDKV, known_d1=True))


KNOWN = sources.ROOT / "model_tests" / "peers" / "known" / "vllm-0.33.0-manager.toml"


def test_the_known_entry_matches_d1_and_nothing_else() -> None:
    """The known file's D1 entries match a message made only of the misnamings D1 makes the
    oracle report of vLLM's events (no hash; not one run; another parent; the whole range's
    tokens, which hold the blocks' tokens and more), under the profile and the safety tier at
    the ``allocate_slots`` that stored (the profile also at ``take_events``), and no message
    with anything else in it (other keys, tokens that do not hold the blocks', a wrong LoRA id,
    a missing ``BlockRemoved``, another operation or kind)."""
    profile, safety = tomllib.loads(KNOWN.read_text(encoding="utf-8"))["difference"]
    assert (profile["operation"], profile["kind"]) == (["allocate_slots", "take_events"], "events")
    assert (safety["operation"], safety["kind"]) == ("allocate_slots", "events")
    in_profile, in_safety = re.compile(profile["message"]), re.compile(safety["message"])
    start = "take_events(): the target's events store and remove the model's keys in order, but "
    empty = "event 1, a BlockStored of group 1, names no block (tokens [3])"
    whole = (
        "event 0, a BlockStored of group 1, its blocks hold the tokens [5, 6], yet it names"
        " the tokens [3, 4, 5, 6]"
    )
    parent = "event 0, a BlockStored of group 1, gives its first block another parent"
    call = "allocate_slots(Request('r1', tokens=[3, 4, 5, 6] (4), computed=0), 4, 0, [[], []], 0)"
    for message in (empty, whole, f"{whole}; {parent}", f"{parent}; {empty}"):
        assert in_profile.search(start + message), message
        assert in_profile.search(f"{call}, then {start}{message}"), message
    assert not in_profile.search(f"{call}: {start}{empty}")
    other_tokens = whole.replace("[3, 4, 5, 6]", "[3, 4, 5, 7]")
    other_keys = (
        "take_events(): the target's events store or remove other keys than the model's (or in"
        " another order): the model sends 1 events, the target 1; event 0 is ..."
    )
    lora = "event 0, a BlockStored of group 1, names a block the model's events do not: ..."
    for message in (start + other_tokens, start + f"{empty}; {other_tokens}", other_keys,
                    start + lora, start + f"{whole}; {lora}"):  # fmt: skip
        assert not in_profile.search(message), message
    head = "BlockStored(group 1, hashes [0a1b2c3d…])"
    s_empty = "BlockStored(group 0, hashes []) names no block (tokens [3])"
    s_whole = f"{head}: its blocks hold the tokens [5, 6], yet it names the tokens [3, 4, 5, 6]"
    s_parent = f"{head} gives its first block the parent none, not 4e5f6a7b…"
    s_run = f"{head} names blocks that are not one run"
    for part in (s_empty, s_whole, s_parent, s_run):  # each finding of the call is matched alone
        assert in_safety.search(part), part
    stale = (
        "block 3 was handed out blank, yet group 1 hash 0a1b2c3d…, announced for it, was never"
        " removed (a missing BlockRemoved)"
    )
    s_lora = f"{head}: its blocks' LoRA id is 1, not None"
    s_tokens = s_whole.replace("[3, 4, 5, 6]", "[3, 4]")
    short = "request 'r1' group 0 has 1 blocks of 1, for 4 token slots"
    for part in (stale, f"{s_whole}; {stale}", s_lora, s_tokens, short, f"{s_empty}; {short}"):
        assert not in_safety.search(part), part
