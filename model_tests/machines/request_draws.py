"""What the request machine draws: the pool and its groups (full attention only, sliding window
only, or a hybrid of both), prompts (a shared system prompt, a turn that extends a finished
request, a repeat, fresh tokens), extra keys, multimodal inputs, and the features a run leaves
out."""

from __future__ import annotations

from typing import Literal

from hypothesis import strategies as st

from pagedkv.model_tests.machines.draws import integers, sampled
from pagedkv.specs.request_types import AttentionKind, KVGroup, MultimodalInput, RequestConfig
from pagedkv.specs.request_validation import cdiv
from pagedkv.specs.types import ExtraKey, Token

GroupKind = Literal["full", "window", "hybrid"]
GROUP_KINDS: tuple[GroupKind, ...] = ("full", "window", "hybrid")

SYSTEM_PROMPT: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
"""The prompt many requests start with: their shared prefix is what hits."""

EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))
IDENTIFIERS = ("img-a", "img-b")

MAX_SPECULATION = 2
"""At most this many draft tokens, and as many lookahead slots, per step."""

SWARM = ("spec decode", "lookahead", "extra keys", "multimodal", "chunked prefill", "events")
"""Features a run may leave out (swarm testing), as the manager machine does."""

swarms = st.one_of(st.just(frozenset[str]()), st.frozensets(st.sampled_from(SWARM)))


def window_group(block_size: int) -> st.SearchStrategy[KVGroup]:
    """A window of 2 tokens (the least vLLM allows) up to a little over two blocks."""
    return st.builds(
        KVGroup,
        kind=st.just(AttentionKind.SLIDING_WINDOW),
        sliding_window=integers(2, 2 * block_size + 2),
    )


def groups_of(kind: GroupKind, block_size: int) -> st.SearchStrategy[tuple[KVGroup, ...]]:
    if kind == "full":
        return st.just((KVGroup(),))
    window = window_group(block_size)
    if kind == "window":
        return window.map(lambda group: (group,))
    return st.one_of(
        window.map(lambda group: (KVGroup(), group)),
        window.map(lambda group: (group, KVGroup())),
    )


BLOCK_SIZES = (1, 2, 2, 3, 4)
"""Small blocks, so that a few tokens fill one (a block of 2 drawn twice as often)."""


@st.composite
def request_configs(
    draw: st.DrawFn, kind: GroupKind, block_sizes: tuple[int, ...] = BLOCK_SIZES
) -> RequestConfig:
    """Small pools, so that pressure, preemption and eviction happen within a run."""
    block_size = draw(sampled(block_sizes), label="block size")
    groups = draw(groups_of(kind, block_size), label="groups")
    per_group = draw(integers(1, 6), label="blocks per group")
    return RequestConfig(
        num_blocks=1 + per_group * len(groups) + draw(integers(0, 2), label="spare blocks"),
        block_size=block_size,
        groups=groups,
        enable_caching=draw(sampled((True, True, True, False)), label="caching"),
        max_model_len=draw(sampled((None, None, None, 6, 13)), label="max model len"),
    )


def capacity(config: RequestConfig) -> int:
    """The tokens one request may grow to and still fit the pool alone with a little room for
    drafts and lookahead (a request that cannot is dropped by the scheduler). A window group
    holds only the blocks its window reads (and the next ones'), the full groups the rest."""
    size = config.block_size
    windows = [g.sliding_window for g in config.groups if g.sliding_window is not None]
    spare = config.num_blocks - 1 - sum(cdiv(w - 1, size) + 2 for w in windows)
    full = len(config.groups) - len(windows)
    room = (spare // full) * size - MAX_SPECULATION if full else 3 * config.num_blocks * size
    if config.max_model_len is not None:
        room = min(room, config.max_model_len)
    return max(room, 2)


def prompt_capacity(config: RequestConfig) -> int:
    """The longest prompt the pool holds whole before anything is computed (a window releases
    nothing until then): what an unchunked prefill needs."""
    per_group = (config.num_blocks - 1) // len(config.groups)
    return max(min(per_group * config.block_size - MAX_SPECULATION, capacity(config)), 2)


def multimodal_inputs(
    data: st.DataObject, length: int, *, disjoint: bool = False
) -> tuple[MultimodalInput, ...]:
    """Up to two placeholders inside a prompt of ``length`` tokens, named by one of two
    identifiers (an image's content hash, opaque here). Drawn piece by piece from strategies
    built once (``draws.py``). ``disjoint``: an input overlapping one drawn before it is left
    out (an engine's input processor never makes two placeholders share a token); the draws
    are the same either way."""
    inputs: list[MultimodalInput] = []
    for _ in range(data.draw(sampled((0, 0, 0, 1, 2)), label="images")):
        offset = data.draw(integers(0, length - 1), label="image offset")
        size = data.draw(integers(1, length - offset), label="image length")
        name = data.draw(sampled(IDENTIFIERS), label="image identifier")
        drawn = MultimodalInput(offset, size, name)
        if not disjoint or not any(overlap(drawn, earlier) for earlier in inputs):
            inputs.append(drawn)
    return tuple(inputs)


def overlap(a: MultimodalInput, b: MultimodalInput) -> bool:
    """Whether two placeholders share a token."""
    return a.offset < b.offset + b.length and b.offset < a.offset + a.length
