"""The independent request-level manager (``model_tests/independent/request_manager.py``) agrees
exactly with the reference and the optimized manager on seeded scheduler runs, and each of its
broken variants (``request_broken.py``) differs from it on some run.

A plain differential loop, no oracle: a v1-style scheduler (admission through a hit, chunked
prefill under a token budget, decode with draft tokens and lookahead, rejections, preemption by
recompute, finishing, resets, shared prompts, salts, LoRA ids and images) drives a variant and
the independent manager with the same calls, and compares every answer, raised error, event and
the whole view after every call. It shows that each variant is wrong somewhere the scheduler
reaches; whether the oracle catches it is ``specs/corpus.md``'s table. The same loop against the
reference and the optimized manager (same ids: all three take the free queue's front) is
evidence that the independent manager, written without reading them, is right.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import pytest

from pagedkv.model_tests.independent import request_broken
from pagedkv.model_tests.independent.request_manager import IndependentRequestManager
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import RequestKVManager, RequestPreemption
from pagedkv.specs.request_types import (
    AttentionKind,
    GroupBlocks,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import ExtraKey

Factory = Callable[[RequestConfig], RequestKVManager]

VARIANTS: list[type[IndependentRequestManager]] = [
    cls
    for _, cls in inspect.getmembers(request_broken, inspect.isclass)
    if issubclass(cls, IndependentRequestManager) and cls is not IndependentRequestManager
]
PROMPTS = ((7, 7, 1, 2, 3, 4, 5, 6, 8, 9), (3, 1, 4, 1, 5, 9, 2, 6))
KEYS = (ExtraKey(), ExtraKey(), ExtraKey(cache_salt="s"), ExtraKey(lora_id=1))
IMAGES = ("cat", "dog")


@dataclass
class _Req:
    rid: str
    tokens: list[int]
    prompt: int
    key: ExtraKey
    images: tuple[MultimodalInput, ...]
    computed: int = 0
    running: bool = False

    def value(self, computed: int | None = None) -> Request:
        done = self.computed if computed is None else computed
        return Request(self.rid, tuple(self.tokens), self.prompt, done, self.key, self.images)


@dataclass
class _Scheduler:
    """A small v1 scheduler over two managers given the same calls."""

    rng: random.Random
    a: RequestKVManager
    b: RequestKVManager
    budget: int
    reqs: dict[str, _Req] = field(default_factory=dict)
    made: int = 0

    def call(self, what: str, op: Callable[[RequestKVManager], object]) -> object:
        answers = []
        for manager in (self.a, self.b):
            try:
                answers.append(op(manager))
            except PagedKVError as error:
                answers.append(type(error).__name__)
            except Exception as crash:  # a variant may crash where the manager answers
                raise _Differs(f"{what}: {crash!r}") from crash
        if answers[0] != answers[1]:
            raise _Differs(f"{what}: {answers[0]!r} != {answers[1]!r}")
        if self.a.view().comparable() != self.b.view().comparable():
            raise _Differs(f"{what}: the views differ")
        return answers[0]

    def new_request(self) -> None:
        rng = self.rng
        self.made += 1
        tokens = list(rng.choice(PROMPTS))[: rng.randrange(1, 11)]
        tokens += [rng.randrange(20) for _ in range(rng.randrange(0, 8))]
        images: tuple[MultimodalInput, ...] = ()
        if rng.random() < 0.2 and len(tokens) > 2:
            offset = rng.randrange(len(tokens) - 1)
            length = rng.randrange(1, len(tokens) - offset + 1)
            tokens[offset : offset + length] = [0] * length
            images = (MultimodalInput(offset, length, rng.choice(IMAGES)),)
        rid = f"r{self.made}"
        self.reqs[rid] = _Req(rid, tokens, len(tokens), rng.choice(KEYS), images)

    def admit(self, req: _Req) -> None:
        found = self.call(
            f"get_computed_blocks({req.rid})", lambda m: m.get_computed_blocks(req.value(0))
        )
        if not isinstance(found, tuple):
            return
        blocks: GroupBlocks = found[0]
        hit: int = found[1]
        chunk = min(self.budget, len(req.tokens) - hit)
        answer = self.call(
            f"allocate_slots({req.rid}, {chunk}, {hit}, hit)",
            lambda m: m.allocate_slots(req.value(0), chunk, hit, blocks),
        )
        if answer is not None and not isinstance(answer, str):
            req.running, req.computed = True, hit + chunk
            self.sample(req, 0)

    def sample(self, req: _Req, accepted: int) -> None:
        if req.computed >= len(req.tokens):
            req.tokens += [self.rng.randrange(20) for _ in range(accepted + 1)]

    def step(self, req: _Req) -> None:
        rng = self.rng
        left = len(req.tokens) - req.computed
        drafts = rng.randrange(4) if left == 1 else 0
        new = min(self.budget, left) + drafts
        lookahead = rng.choice((0, 0, 1, 2))
        answer = self.call(
            f"allocate_slots({req.rid}, {new}, lookahead {lookahead})",
            lambda m: m.allocate_slots(req.value(), new, 0, None, lookahead),
        )
        if answer is None:
            self.free(req, preempt=True)
        elif not isinstance(answer, str):
            accepted = rng.randrange(drafts + 1)
            req.computed += new - drafts + accepted
            self.sample(req, accepted)

    def free(self, req: _Req, *, preempt: bool) -> None:
        if preempt:
            self.call(f"preempt({req.rid})", lambda m: cast(RequestPreemption, m).preempt(req.rid))
        else:
            self.call(f"free({req.rid})", lambda m: m.free(req.rid))
        req.running, req.computed = False, 0
        if not preempt:
            del self.reqs[req.rid]

    def random_call(self) -> None:
        rng = self.rng
        waiting = [r for r in self.reqs.values() if not r.running]
        running = [r for r in self.reqs.values() if r.running]
        roll = rng.random()
        if roll < 0.15 or not self.reqs:
            self.new_request()
        elif roll < 0.4 and waiting:
            self.admit(rng.choice(waiting))
        elif roll < 0.75 and running:
            self.step(rng.choice(running))
        elif roll < 0.85 and self.reqs:
            req = rng.choice(list(self.reqs.values()))
            self.free(req, preempt=rng.random() < 0.5)
        else:
            rid = rng.choice([*self.reqs, "nobody"])
            queries: dict[str, Callable[[RequestKVManager], object]] = {
                "take_events": lambda m: m.take_events(),
                "usage": lambda m: m.usage(),
                "num_free_blocks": lambda m: m.num_free_blocks(),
                "reset_prefix_cache": lambda m: m.reset_prefix_cache(),
                f"get_block_ids({rid})": lambda m: m.get_block_ids(rid),
                "free(nobody)": lambda m: m.free("nobody"),
            }
            name = rng.choice(list(queries))
            self.call(name, queries[name])


class _Differs(Exception):
    pass


def random_config(rng: random.Random) -> RequestConfig:
    block_size = rng.choice((2, 3, 4))
    window = KVGroup(AttentionKind.SLIDING_WINDOW, rng.randrange(2, 3 * block_size + 2))
    groups = rng.choice(((KVGroup(),), (window,), (KVGroup(), window)))
    return RequestConfig(
        num_blocks=rng.randrange(4, 24),
        block_size=block_size,
        groups=groups,
        enable_caching=rng.random() < 0.9,
        max_model_len=rng.choice((None, None, rng.randrange(8, 40))),
    )


def first_difference(variant: Factory, seed: int, steps: int = 60) -> str | None:
    """Run one seeded scheduler over ``variant`` and the independent manager; the first call
    where they differ, or None."""
    rng = random.Random(seed)
    config = random_config(rng)
    scheduler = _Scheduler(
        rng, variant(config), IndependentRequestManager(config), rng.randrange(1, 13)
    )
    try:
        for _ in range(steps):
            scheduler.random_call()
    except _Differs as difference:
        return f"seed {seed}, {config}: {difference}"
    return None


@pytest.mark.parametrize("other", [IndependentRequestManager, ReferenceRequestKVManager,
                                   RequestManager])  # fmt: skip
def test_the_independent_manager_agrees(other: Factory) -> None:
    differences = [d for d in map(lambda s: first_difference(other, s), range(300)) if d]
    assert not differences, differences[0]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda cls: cls.__name__)
def test_each_variant_differs_somewhere(variant: Factory) -> None:
    found = next((d for d in map(lambda s: first_difference(variant, s), range(2000)) if d), None)
    assert found is not None, f"{variant} behaves like the independent manager on 2000 runs"
