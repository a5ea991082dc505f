"""The requests of a serving workload, drawn from a seed: who arrives, with which prompt, wanting
how many tokens.

The shape follows what makes a block manager work in production: most prompts open with one of a
few shared system prompts (prefix-cache hits), some are the next turn of an earlier conversation
(its whole history is the new prompt's prefix), prompt lengths are lognormal and outputs
long-tailed, some requests sample two sequences in parallel (fork, then copy-on-write) and some
decode speculatively (several tokens per step, with lookahead slots), and a few carry a LoRA
adapter or a cache salt (caches kept apart).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from pagedkv.specs.types import ExtraKey, Token

VOCABULARY = range(100, 32_000)


@dataclass(frozen=True)
class RequestShape:
    """The distributions requests are drawn from."""

    num_requests: int = 300
    num_system_prompts: int = 8
    shared_fraction: float = 0.7
    system_prompt_tokens: tuple[int, int] = (64, 384)
    prompt_median: int = 500
    prompt_sigma: float = 0.6
    prompt_tokens: tuple[int, int] = (16, 4096)
    output_median: int = 200
    output_sigma: float = 0.8
    output_tokens: tuple[int, int] = (50, 500)
    parallel_fraction: float = 0.1
    """Requests that sample two sequences: the second is forked after the prefill."""
    speculative_fraction: float = 0.2
    lookahead: int = 3
    """Lookahead slots of a speculative request; it accepts 1 .. lookahead + 1 tokens a step."""
    follow_up_fraction: float = 0.25
    """Requests that are the next turn of an earlier request's conversation."""
    follow_up_tokens: tuple[int, int] = (16, 128)
    think_steps: tuple[int, int] = (1, 20)
    lora_fraction: float = 0.05
    salt_fraction: float = 0.05
    arrival_steps: int = 20
    """Requests that open a conversation arrive over the first this many steps."""


@dataclass
class Request:
    """One request. ``outputs`` holds the tokens each sequence will sample, drawn up front, so
    that a later turn's prompt (this prompt, the first sequence's output, a new user message)
    is known before the run."""

    request_id: int
    prompt: tuple[Token, ...]
    outputs: list[list[Token]]
    extra_key: ExtraKey
    lookahead: int
    arrival_step: int
    follow_up: Request | None = None
    think_steps: int = 0
    accepted: list[int] = field(default_factory=list)
    """For a speculative request: tokens accepted at each decode step, cycled."""

    @property
    def num_seqs(self) -> int:
        return len(self.outputs)


def _lognormal(rng: random.Random, median: int, sigma: float, bounds: tuple[int, int]) -> int:
    value = int(rng.lognormvariate(math.log(median), sigma))
    return max(bounds[0], min(bounds[1], value))


def _tokens(rng: random.Random, count: int) -> list[Token]:
    return [rng.choice(VOCABULARY) for _ in range(count)]


def generate(shape: RequestShape, seed: int) -> list[Request]:
    """The opening requests, by arrival step; follow-ups hang off their predecessor and arrive
    once it has finished (``think_steps`` later)."""
    rng = random.Random(seed)
    systems = [
        tuple(_tokens(rng, rng.randint(*shape.system_prompt_tokens)))
        for _ in range(shape.num_system_prompts)
    ]
    openers: list[Request] = []
    latest: list[Request] = []
    for request_id in range(shape.num_requests):
        extra_key = _extra_key(rng, shape)
        outputs_len = _lognormal(rng, shape.output_median, shape.output_sigma, shape.output_tokens)
        num_seqs = 2 if rng.random() < shape.parallel_fraction else 1
        outputs = [_tokens(rng, outputs_len) for _ in range(num_seqs)]
        speculative = rng.random() < shape.speculative_fraction
        lookahead = shape.lookahead if speculative else 0
        accepted = [rng.randint(1, lookahead + 1) for _ in range(16)] if speculative else []
        if latest and rng.random() < shape.follow_up_fraction:
            previous = rng.choice(latest)
            while previous.follow_up is not None:
                previous = previous.follow_up
            history = (*previous.prompt, *previous.outputs[0])
            turn = _tokens(rng, rng.randint(*shape.follow_up_tokens))
            prompt = (*history, *turn)[: shape.prompt_tokens[1]]
            request = Request(
                request_id,
                prompt,
                outputs,
                previous.extra_key,
                lookahead,
                arrival_step=-1,
                think_steps=rng.randint(*shape.think_steps),
                accepted=accepted,
            )
            previous.follow_up = request
            continue
        length = _lognormal(rng, shape.prompt_median, shape.prompt_sigma, shape.prompt_tokens)
        if rng.random() < shape.shared_fraction:
            system = rng.choice(systems)
            prompt = (*system, *_tokens(rng, max(shape.prompt_tokens[0], length - len(system))))
        else:
            prompt = tuple(_tokens(rng, length))
        request = Request(
            request_id,
            prompt,
            outputs,
            extra_key,
            lookahead,
            arrival_step=rng.randrange(shape.arrival_steps),
            accepted=accepted,
        )
        openers.append(request)
        latest.append(request)
    openers.sort(key=lambda r: (r.arrival_step, r.request_id))
    return openers


def _extra_key(rng: random.Random, shape: RequestShape) -> ExtraKey:
    draw = rng.random()
    if draw < shape.lora_fraction:
        return ExtraKey(lora_id=rng.randint(1, 2))
    if draw < shape.lora_fraction + shape.salt_fraction:
        return ExtraKey(cache_salt=f"tenant-{rng.randint(1, 3)}")
    return ExtraKey()
