"""``pagedkv soak --level request``: the request level's seeded random walk, a scheduler's calls
without Hypothesis, the reference and a target in lockstep (``soak.py`` runs it, shrinks a
divergence and writes its trace).

Each episode draws a configuration (one of the three group layouts, a small pool, caching on or
off, sometimes a ``max_model_len``), then calls shaped like vLLM v1's scheduler's: admission
through ``get_computed_blocks`` and ``allocate_slots`` with the hit (prompts mostly along one
shared template, so that hits happen), chunked prefill, decode steps with draft tokens and
lookahead slots (some drafts accepted, the rest rolled back), preemption by recompute when an
allocation answers ``None``, frees, the engine's readings (events, free count, usage, tables), a
few resets (mostly refused while requests hold blocks; now and then the engine idles first,
every running request finished, and the reset succeeds) and a few calls that must fail.

What is compared. Every call goes through the isomorphic session (``specs/oracle.md`` §1,
"Isomorphic mode, request level"); in exact mode (the optimized manager) the whole state
(``view().comparable()``) is compared as well at every checkpoint, and the reference's own state
is held to the accounting invariants there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.capture import RecordedCall
from pagedkv.model_tests.lockstep.request_isomorphic_session import IsomorphicRequestSession
from pagedkv.model_tests.machines.request_checks import accounting_problems
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle.plain_state import ForeignValue, check_exact
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS, layout_of_groups
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls as calls
from pagedkv.specs.call import Call
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.request_types import (
    AttentionKind,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import ExtraKey, Token

T = TypeVar("T")

TEMPLATE: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3)
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))


def random_request_config(
    rng: random.Random, layouts: Sequence[GroupKind] = LAYOUTS
) -> RequestConfig:
    """A small configuration of one of the group ``layouts`` (all three: the same draws as
    ever, so a seed walks as it did)."""
    block_size = rng.choice([1, 2, 2, 3, 4])
    window = KVGroup(AttentionKind.SLIDING_WINDOW, rng.randint(2, 3 * block_size + 2))
    shapes = [(KVGroup(),), (window,), (KVGroup(), window), (window, KVGroup())]
    groups = rng.choice([shape for shape in shapes if layout_of_groups(shape) in layouts])
    return RequestConfig(
        num_blocks=rng.randint(2, 6 + 4 * len(groups)),
        block_size=block_size,
        groups=groups,
        enable_caching=rng.random() < 0.8,
        max_model_len=rng.choice([None, None, None, 7, 13]),
    )


class RequestLockstep:
    """One episode: the reference and the target, a call at a time."""

    def __init__(self, factory: Any, config: RequestConfig, exact: bool) -> None:
        self.model = ReferenceRequestKVManager(config)
        self.target = factory(config)
        self.exact = exact
        self.session: IsomorphicRequestSession | None = None
        self.calls: list[RecordedCall] = []

    def begin(self) -> None:
        self.session = IsomorphicRequestSession(self.model, self.target)

    def call(self, call: Call[Any, T]) -> T | PagedKVError:
        self.calls.append((call.name, call.args))
        assert self.session is not None
        return self.session.call(call)

    def check_state(self, when: str) -> None:
        view = self.model.view()
        if self.exact:
            theirs = self.target.view().comparable()
            try:  # Python's own values only, else == may answer for itself
                check_exact(theirs)
            except ForeignValue as error:
                raise Divergence(f"{when}: the target's state holds {error}") from None
            if view.comparable() != theirs:
                raise Divergence(
                    f"{when}: the target's state differs from the reference's:\n"
                    f" reference: {view.comparable()!r}\n"
                    f" target:    {theirs!r}"
                )
        problems = accounting_problems(view)
        if problems:
            raise Divergence(f"{when}: the reference's invariants: " + "; ".join(problems))


@dataclass
class Running:
    """A request as the walk's scheduler owns it."""

    request_id: str
    tokens: list[Token]
    num_prompt_tokens: int
    extra_key: ExtraKey
    multimodal: tuple[MultimodalInput, ...]
    computed: int = 0

    def request(self) -> Request:
        return Request(
            self.request_id,
            tuple(self.tokens),
            self.num_prompt_tokens,
            self.computed,
            self.extra_key,
            self.multimodal,
        )


@dataclass
class RequestWalk:
    rng: random.Random
    side: RequestLockstep
    running: list[Running] = field(default_factory=list)
    next_id: int = 0

    @property
    def config(self) -> RequestConfig:
        return self.side.model.config

    def tokens(self, count: int) -> list[Token]:
        if self.rng.random() < 0.75:
            start = self.rng.choice([0, 0, 0, self.config.block_size])
            return [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(count)]
        return [self.rng.randrange(4) for _ in range(count)]

    def step(self) -> None:
        draw = self.rng.random()
        if draw < 0.25 or not self.running:
            self.admit()
        elif draw < 0.70:
            self.advance(self.rng.choice(self.running))
        elif draw < 0.78:
            self.finish(self.rng.choice(self.running))
        elif draw < 0.94:
            self.read()
        elif draw < 0.965:
            self.side.call(calls.reset_prefix_cache())  # mostly refused: requests hold blocks
        elif draw < 0.97:
            self.drain()
        else:
            self.misuse()

    @property
    def longest(self) -> int:
        """The most tokens a request may hold."""
        limit = self.config.max_model_len
        return 3 * self.config.block_size + 6 if limit is None else limit

    def admit(self) -> None:
        self.next_id += 1
        length = self.rng.randint(1, min(3 * self.config.block_size + 2, self.longest))
        prompt = self.tokens(length)
        multimodal: tuple[MultimodalInput, ...] = ()
        if self.rng.random() < 0.15:
            offset = self.rng.randrange(length)
            multimodal = (MultimodalInput(offset, 1, self.rng.choice(["img-a", "img-b"])),)
        running = Running(
            f"r{self.next_id}", prompt, length, self.rng.choice(EXTRA_KEYS), multimodal
        )
        hit = self.side.call(calls.get_computed_blocks(running.request()))
        if isinstance(hit, PagedKVError):
            raise Divergence(f"get_computed_blocks refused a valid request: {hit!r}")
        blocks, num_hit = hit
        chunk = self.rng.randint(1, length - num_hit) if length > num_hit else 1
        lookahead = self.rng.choice([0, 0, 1, 2])
        answer = self.side.call(
            calls.allocate_slots(
                running.request(), chunk, num_hit, blocks if num_hit else None, lookahead
            )
        )
        if isinstance(answer, PagedKVError):
            raise Divergence(f"allocate_slots refused a valid admission: {answer!r}")
        if answer is not None:
            running.computed = num_hit + min(chunk, length - num_hit)
            self.running.append(running)

    def advance(self, running: Running) -> None:
        """A chunk of prefill, or a decode step (a sampled token, drafts and lookahead)."""
        left = len(running.tokens) - running.computed
        drafts: list[Token] = []
        if left > 0:
            new = self.rng.randint(1, left)
        elif len(running.tokens) >= self.longest:
            self.finish(running)
            return
        else:
            running.tokens.append(self.rng.randrange(4))
            room = self.longest - len(running.tokens)
            drafts = [self.rng.randrange(4) for _ in range(min(room, self.rng.choice([0, 1, 2])))]
            new = 1 + len(drafts)
        lookahead = self.rng.choice([0, 0, 1, 2])
        answer = self.side.call(calls.allocate_slots(running.request(), new, 0, None, lookahead))
        if isinstance(answer, PagedKVError):
            raise Divergence(f"allocate_slots refused a valid step: {answer!r}")
        if answer is None:  # preemption by recompute: the last running request goes
            victim = self.running[-1]
            self.finish(victim)
            return
        accepted = self.rng.randint(0, len(drafts))
        running.computed += new - len(drafts) + accepted
        running.tokens += drafts[:accepted]

    def finish(self, running: Running) -> None:
        self.side.call(calls.free(running.request_id))
        self.running.remove(running)

    def drain(self) -> None:
        """The engine goes idle and resets (as after a weight update): every running request
        finishes, in an order drawn, and then the reset, which succeeds with nothing held. The
        only resets that can succeed, since ``step`` admits whenever nothing runs."""
        for running in self.rng.sample(self.running, len(self.running)):
            self.finish(running)
        self.side.call(calls.reset_prefix_cache())

    def read(self) -> None:
        ids = [r.request_id for r in self.running]
        queries: list[Call[Any, Any]] = [
            calls.take_events(),
            calls.num_free_blocks(),
            calls.usage(),
            calls.get_block_ids(self.rng.choice(ids) if ids else "nobody"),
        ]
        self.side.call(self.rng.choice(queries))

    def misuse(self) -> None:
        request = Request("never", (1, 2, 3), 3)
        wrong: list[Call[Any, Any]] = [
            calls.get_block_ids("never"),
            calls.allocate_slots(request, 0),
            calls.allocate_slots(request, 1, 0, None, -1),
            calls.allocate_slots(Request("never", (1,), 1, 2), 1),
        ]
        result = self.side.call(self.rng.choice(wrong))
        if not isinstance(result, PagedKVError):
            raise Divergence(f"a call that must fail succeeded: {self.side.calls[-1]}")
