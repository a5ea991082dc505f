"""The optimized request-level manager (``optimized/request_manager.py``) and its parts.

- The free queue against a plain list: every operation, in any order, leaves the same order.
- The cache map against a list of (key, block) pairs: the earliest still cached is found.
- The kept block hashes against ``specs.request_hashes.request_block_hashes``: growing,
  changed and multimodal requests.
- The manager against the reference, call for call, under random call sequences (exact mode:
  every answer, every error type, and ``view().comparable()`` after every call).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.model_tests.bench import requests_level as bench
from pagedkv.model_tests.tests import test_request_reference as worked
from pagedkv.optimized.block_hash_map import BlockHashMap
from pagedkv.optimized.free_queue import FreeQueue
from pagedkv.optimized.incremental_hashes import IncrementalBlockHashes
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls as calls
from pagedkv.specs.errors import InvalidArgumentError, PagedKVError
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.policy import PAGEDKV
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    AttentionKind,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import BlockId, ExtraKey

CAPACITY = 8

_queue_operations = st.lists(
    st.one_of(
        st.tuples(st.just("popleft"), st.just(0)),
        st.tuples(st.just("popleft_n"), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, CAPACITY - 1)),
        st.tuples(st.just("append"), st.integers(0, CAPACITY - 1)),
        st.tuples(st.just("append_n"), st.lists(st.integers(0, CAPACITY - 1), max_size=3)),
        st.tuples(st.just("prepend_n"), st.lists(st.integers(0, CAPACITY - 1), max_size=3)),
    ),
    max_size=40,
)


@given(
    initial=st.permutations(range(CAPACITY)), size=st.integers(0, CAPACITY), steps=_queue_operations
)
def test_the_free_queue_keeps_a_plain_lists_order(
    initial: list[int], size: int, steps: list[tuple[str, object]]
) -> None:
    model = list(initial[:size])
    queue = FreeQueue(CAPACITY, model)
    for name, argument in steps:
        if name == "popleft" and model:
            assert queue.popleft() == model.pop(0)
        elif name == "popleft_n" and isinstance(argument, int) and argument <= len(model):
            assert queue.popleft_n(argument) == model[:argument]
            del model[:argument]
        elif name == "remove" and argument in model:
            assert isinstance(argument, int)
            queue.remove(argument)
            model.remove(argument)
        elif name == "append" and isinstance(argument, int) and argument not in model:
            queue.append(argument)
            model.append(argument)
        elif name in ("append_n", "prepend_n") and isinstance(argument, list):
            run = [block for block in dict.fromkeys(argument) if block not in model]
            if name == "append_n":
                queue.append_n(run)
                model.extend(run)
            else:
                queue.prepend_n(run)
                model[:0] = run
        assert list(queue) == model
        assert len(queue) == len(model)
        assert [block for block in range(CAPACITY) if block in queue] == sorted(model)


@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.sampled_from([b"a", b"b"]), st.integers(1, 5)), max_size=30
    )
)
def test_the_cache_map_answers_the_earliest_block_still_cached(
    steps: list[tuple[bool, bytes, int]],
) -> None:
    model: list[tuple[bytes, int]] = []
    cache = BlockHashMap()
    for insert, key, block in steps:
        if insert and (key, block) not in model:
            cache.insert(key, block)
            model.append((key, block))
        elif not insert and (key, block) in model:
            cache.remove(key, block)
            model.remove((key, block))
        for probe in (b"a", b"b"):
            held = [b for k, b in model if k == probe]
            assert cache.first(probe) == (held[0] if held else None)
            assert all(cache.holds(probe, b) == (b in held) for b in range(1, 6))
        assert len(cache) == len({k for k, _ in model})
    cache.clear()
    assert len(cache) == 0 and cache.first(b"a") is None


_IMAGE = (MultimodalInput(3, 4, "img"),)


@given(
    lengths=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    rewrite_at=st.none() | st.integers(0, 19),
    salts=st.lists(st.sampled_from([None, "s"]), min_size=6, max_size=6),
    images=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_kept_hashes_equal_hashing_the_whole_request(
    lengths: list[int], rewrite_at: int | None, salts: list[str | None], images: list[bool]
) -> None:
    tokens: tuple[int, ...] = ()
    kept: IncrementalBlockHashes | None = None
    for step, length in enumerate(sorted(lengths)):
        tokens = tokens + tuple(range(len(tokens), length))
        if rewrite_at is not None and step == 2 and rewrite_at < len(tokens):
            tokens = (*tokens[:rewrite_at], 999, *tokens[rewrite_at + 1 :])
        request = Request(
            "r",
            tokens,
            len(tokens),
            extra_key=ExtraKey(cache_salt=salts[step]),
            multimodal=_IMAGE if images[step] and len(tokens) >= 7 else (),
        )
        if kept is None:
            kept = IncrementalBlockHashes(request, 4)
        else:
            unchanged = kept.unchanged(request)
            assert tokens[:unchanged] == request.tokens[:unchanged]
            kept.update(request, unchanged)
        assert kept.hashes == request_block_hashes(request, 4)


class _Token(int):
    """A token id of an int subclass: a valid token (``check_tokens``), not an exact int."""


@pytest.mark.parametrize(
    ("replace_first", "unchanged"),
    [
        (lambda t: t, 8),  # the very objects: one memory comparison
        (lambda t: int(str(t)), 8),  # equal exact ints made anew
        (lambda t: float(t), 0),  # equal in value, refused by the check
        (lambda t: _Token(t), 0),  # valid, but checked again
    ],
    ids=["same objects", "equal ints anew", "a float", "an int subclass"],
)
def test_tokens_unchanged_only_when_they_are_the_ints_seen(
    replace_first: Callable[[int], object], unchanged: int
) -> None:
    seen = tuple(range(1000, 1008))
    kept = IncrementalBlockHashes(Request("r", seen, 8), 4)
    later = (replace_first(seen[0]), *seen[1:], 2000)
    assert kept.unchanged(Request("r", later, 8)) == unchanged  # type: ignore[arg-type]


@pytest.mark.parametrize("earlier", [100.0, True], ids=["a float", "a bool"])
def test_an_earlier_token_equal_in_value_but_not_an_int_is_refused_as_by_the_reference(
    earlier: object,
) -> None:
    """The optimized manager skips checking the tokens it has seen, so it must know they are the
    same: ``100.0 == 100`` and ``True == 1``, yet the reference refuses both."""
    first = 1 if earlier is True else 100
    config = RequestConfig(num_blocks=8, block_size=4, enable_caching=True)
    for manager in (RequestManager(config), ReferenceRequestKVManager(config)):
        tokens = (first, *range(101, 110))
        assert manager.allocate_slots(Request("a", tokens, 10), 10) is not None
        later = Request("a", (earlier, *tokens[1:], 7), 10, num_computed_tokens=10)  # type: ignore[arg-type]
        before = manager.view()
        with pytest.raises(InvalidArgumentError, match="token"):
            manager.allocate_slots(later, 1)
        assert manager.view() == before


# --- the manager against the reference ------------------------------------------------------


_PROMPTS = ((7, 7, 1, 2, 3, 4, 5, 6, 8, 9), (7, 7, 1, 2, 11, 12), (20, 21, 22, 23, 24, 25, 26))
"""System prompts the requests start with, so that hits, shared blocks and duplicates occur."""

_CONFIGS = {
    "full": (KVGroup(),),
    "window": (KVGroup(AttentionKind.SLIDING_WINDOW, 5),),
    "hybrid": (KVGroup(), KVGroup(AttentionKind.SLIDING_WINDOW, 6)),
    "two windows": (
        KVGroup(AttentionKind.SLIDING_WINDOW, 3),
        KVGroup(AttentionKind.SLIDING_WINDOW, 9),
    ),
}


_REFUSED = object()
"""What ``_Differential.call`` answers when both managers raised the same error."""


@dataclass
class _Client:
    """The scheduler's side of one request: its tokens and how many have KV."""

    request: Request
    running: bool = False


class _Differential:
    """Drives both managers with one random, scheduler-like call sequence, comparing every
    answer (or raised error), then the views, after every call."""

    optimized_kind: type[RequestManager] = RequestManager

    def __init__(self, rng: random.Random, config: RequestConfig) -> None:
        self.rng = rng
        self.config = config
        self.reference = ReferenceRequestKVManager(config)
        self.optimized = self.optimized_kind(config)
        self.clients: dict[str, _Client] = {}
        self.next_id = 0
        self.calls = 0

    def call(self, call: RequestCall[Any]) -> Any:
        outcomes = []
        for side in (self.reference, self.optimized):
            try:
                answer = call.method(side)(*call.args)
                outcomes.append(("ok", answer))
            except PagedKVError as error:
                outcomes.append((type(error).__name__, str(error)))
        assert outcomes[0] == outcomes[1], (self.calls, call)
        assert self.reference.view().comparable() == self.optimized.view().comparable(), (
            self.calls,
            call,
        )
        self.calls += 1
        return outcomes[0][1] if outcomes[0][0] == "ok" else _REFUSED

    def drop(self, client: _Client) -> None:
        """A request the managers refused (longer than ``max_model_len``, say) is aborted."""
        self.call(calls.free(client.request.request_id))
        del self.clients[client.request.request_id]

    def new_request(self) -> None:
        rng = self.rng
        prompt = rng.choice(_PROMPTS)[: rng.randint(1, 10)] + tuple(
            rng.randrange(40) for _ in range(rng.randint(0, 8))
        )
        extra = ExtraKey(rng.choice([None, None, 3]), rng.choice([None, None, "salt"]))
        multimodal = (MultimodalInput(1, 2, rng.choice("xy")),) if rng.random() < 0.15 else ()
        if multimodal and len(prompt) < 3:
            multimodal = ()
        request_id = f"r{self.next_id}"
        self.next_id += 1
        self.clients[request_id] = _Client(
            Request(request_id, prompt, len(prompt), 0, extra, multimodal)
        )

    def admit(self, client: _Client) -> None:
        request = replace(client.request, num_computed_tokens=0)
        answer = self.call(calls.get_computed_blocks(request))
        if answer is _REFUSED:
            self.drop(client)
            return
        assert isinstance(answer, tuple)
        hit, length = answer
        if self.rng.random() < 0.1:
            hit, length = [[] for _ in hit], 0  # a scheduler may ignore the hit
        chunk = self.rng.randint(1, request.num_tokens - length + 1)
        lookahead = self.rng.choice([0, 0, 1, 3])
        blocks = self.call(calls.allocate_slots(request, chunk, length, hit, lookahead))
        if blocks is _REFUSED:
            self.drop(client)
        elif blocks is not None:
            client.running = True
            self.advance(client, length + chunk)

    def advance(self, client: _Client, computed: int) -> None:
        """The model ran up to ``computed`` tokens; once every token has KV, one is sampled."""
        request = client.request
        computed = min(computed, request.num_tokens)
        tokens = request.tokens
        if computed == request.num_tokens:
            accepted = self.rng.choice([1, 1, 1, 2, 3])  # speculative: drafts accepted too
            tokens = tokens + tuple(self.rng.randrange(40) for _ in range(accepted))
            computed = len(tokens) - 1
        client.request = replace(request, tokens=tokens, num_computed_tokens=computed)

    def step(self, client: _Client) -> None:
        request = client.request
        remaining = request.num_tokens - request.num_computed_tokens
        new = self.rng.randint(1, remaining) + self.rng.choice([0, 0, 0, 2])  # drafts
        lookahead = self.rng.choice([0, 0, 0, 1, 2])
        roll = self.rng.random()
        if roll < 0.05:  # the same id with other tokens (say, a caller's bug)
            tokens = (99, *request.tokens[1:])
            client.request = request = replace(request, tokens=tokens)
        if roll > 0.95:  # tokens as a list, which a caller may change in place later
            request = replace(request, tokens=list(request.tokens))  # type: ignore[arg-type]
        blocks = self.call(calls.allocate_slots(request, new, 0, None, lookahead))
        if blocks is _REFUSED:
            self.drop(client)
        elif blocks is not None:
            self.advance(client, request.num_computed_tokens + min(new, remaining))

    def bad_call(self) -> None:
        rng = self.rng
        known = [c for c in self.clients.values() if c.running]
        request = (
            rng.choice(list(self.clients.values())).request
            if self.clients
            else Request("z", (1,), 1)
        )
        choice = rng.randrange(9)
        if choice == 0:
            self.call(calls.allocate_slots(request, 0))
        elif choice == 1:
            self.call(calls.allocate_slots(request, -1))
        elif choice == 2:
            self.call(calls.allocate_slots(replace(request, tokens=(-1, *request.tokens[1:])), 1))
        elif choice == 3:
            too_many = replace(request, num_computed_tokens=request.num_tokens + 1)
            self.call(calls.allocate_slots(too_many, 1))
        elif choice == 4 and known:
            hit = [[1]] * len(self.config.groups)
            self.call(calls.allocate_slots(known[0].request, 1, self.config.block_size, hit))
        elif choice == 5:
            fresh = replace(request, request_id="fresh", num_computed_tokens=0)
            size = self.config.block_size
            hit = [[rng.randrange(self.config.num_blocks)] for _ in self.config.groups]
            self.call(calls.allocate_slots(fresh, 1, size, hit))
            self.call(calls.free("fresh"))
        elif choice == 6:
            self.call(calls.get_block_ids("nobody"))
        elif choice == 7:
            self.call(calls.free(7))  # type: ignore[arg-type]
        else:
            self.call(calls.get_computed_blocks("not a request"))  # type: ignore[arg-type]

    def run(self, steps: int) -> None:
        rng = self.rng
        for _ in range(steps):
            roll = rng.random()
            waiting = [c for c in self.clients.values() if not c.running]
            running = [c for c in self.clients.values() if c.running]
            if roll < 0.15 or not self.clients:
                self.new_request()
            elif roll < 0.35 and waiting:
                self.admit(rng.choice(waiting))
            elif roll < 0.7 and running:
                self.step(rng.choice(running))
            elif roll < 0.76 and running:  # preempted: recomputed from the start later
                client = rng.choice(running)
                self.call(calls.free(client.request.request_id))
                client.running = False
                client.request = replace(client.request, num_computed_tokens=0)
            elif roll < 0.84 and self.clients:  # finished (or aborted before it ran)
                client = rng.choice(list(self.clients.values()))
                self.call(calls.free(client.request.request_id))
                del self.clients[client.request.request_id]
            elif roll < 0.88:
                self.call(calls.reset_prefix_cache())
            elif roll < 0.92:
                self.bad_call()
            else:
                query = rng.choice([calls.take_events, calls.num_free_blocks, calls.usage])
                self.call(query())
                if running:
                    request = rng.choice(running).request
                    self.call(calls.get_block_ids(request.request_id))
                    self.call(calls.get_computed_blocks(request))
        self.call(calls.take_events())


@pytest.mark.parametrize("groups", list(_CONFIGS), ids=list(_CONFIGS))
@pytest.mark.parametrize("caching", [True, False], ids=["caching", "no-caching"])
def test_the_optimized_manager_answers_as_the_reference(groups: str, caching: bool) -> None:
    for seed in range(12):
        rng = random.Random(seed)
        config = RequestConfig(
            num_blocks=rng.randint(8, 30),
            block_size=rng.choice([2, 3, 4]),
            groups=_CONFIGS[groups],
            enable_caching=caching,
            max_model_len=rng.choice([None, None, 24]),
        )
        _Differential(rng, config).run(150)


class _CachedBlocksReusedFirst(RequestManager):
    """A wrong manager: blocks given back go to the front of the queue even when cached."""

    def _give_back(self, blocks: Iterable[BlockId]) -> None:
        held = [block for block in blocks if block]
        for block in held:
            self._ref_counts[block] -= 1
        self._queue.prepend_n(block for block in held if self._ref_counts[block] == 0)


def test_the_differential_check_catches_a_wrong_free_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check above must be able to fail: a manager that reuses cached blocks first is
    caught within the first seeds."""
    monkeypatch.setattr(_Differential, "optimized_kind", _CachedBlocksReusedFirst)
    rng = random.Random(0)
    config = RequestConfig(num_blocks=12, block_size=2, groups=_CONFIGS["hybrid"])
    with pytest.raises(AssertionError):
        _Differential(rng, config).run(150)


# --- the reference's worked examples, on the optimized manager -------------------------------


_reference_manager = worked.manager


def _optimized_or_policy_reference(*args: Any, **keys: Any) -> RequestKVManager:
    """``worked.manager``, building the optimized manager for pagedkv's policy (the only one it
    implements; the examples of other policies keep the reference)."""
    reference = _reference_manager(*args, **keys)
    return RequestManager(reference.config) if reference.policy == PAGEDKV else reference


_EXAMPLES = {
    name: example
    for name, example in vars(worked).items()
    if name.startswith("test_") and callable(example) and not inspect.signature(example).parameters
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_the_reference_worked_examples_hold_for_the_optimized_manager(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worked, "manager", _optimized_or_policy_reference)
    _EXAMPLES[name]()


@pytest.mark.parametrize(
    ("what", "call", "error", "named"), worked.BAD_CALLS, ids=[c[0] for c in worked.BAD_CALLS]
)
def test_a_bad_call_to_the_optimized_manager_raises_as_the_reference_and_changes_nothing(
    what: str,
    call: Callable[[RequestKVManager], object],
    error: type[PagedKVError],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worked, "manager", _optimized_or_policy_reference)
    m = worked._prepared()
    assert isinstance(m, RequestManager) and m.atomic is True
    m.take_events()
    before = m.view()
    with pytest.raises(error) as raised:
        call(m)
    assert type(raised.value) is error, what
    assert named in str(raised.value), (what, str(raised.value))
    assert m.view() == before and m.take_events() == []


@pytest.mark.parametrize("groups", sorted(bench.GROUPS))
def test_the_bench_stream_is_answered_alike_by_both_managers(groups: str) -> None:
    """The benchmark's serving stream, small: admissions with hits, chunked prefill, speculative
    decode, a window sliding past long prompts, frees."""
    config, recorded = bench.record(groups, seed=1, num_requests=4, decode_steps=6)
    assert any(call.name == "get_computed_blocks" for call in recorded)
    bench.check(config, recorded)
