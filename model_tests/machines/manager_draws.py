"""What the manager machine draws: configurations, prompts' template, extra keys, the swarm
of features a run leaves out, and the defragmenter a run may put under the GPU ids."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import strategies as st

from pagedkv.model_tests.machines.draws import BOOLEANS, integers, sampled
from pagedkv.specs.types import DEFRAG_PAD_SIZES, DefragConfig, ExtraKey, ManagerConfig, Token

T = TypeVar("T")

TEMPLATE: tuple[Token, ...] = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=2), ExtraKey(cache_salt="s"))
FILLER_TOKEN = 100
"""The first token of ``fill_pool``'s requests: no other step writes tokens this large."""

manager_configs = st.builds(
    ManagerConfig,
    block_size=sampled((1, 2, 2, 3, 4)),
    num_gpu_blocks=integers(2, 12),
    num_cpu_blocks=integers(1, 8),
    watermark=sampled((0.0, 0.1, 0.2, 0.3)),
    sliding_window=sampled((None, None, 1, 2, 3, 5)),
    enable_caching=BOOLEANS,
)

SWARM = ("lookahead", "encoder", "parallel sampling", "extra keys", "marks at once")
"""Features a run may leave out (swarm testing, Groce et al. 2012): without some of them, others
get whole runs to build on, and rare combinations come up. The rules are swarmed by Hypothesis
itself: each run of a ``RuleBasedStateMachine`` switches a random share of its rules off
(``FeatureFlags``); leaving rules out here as well halved the runs that make two given calls,
and with them the rate at which lost swap pairs and leaked copy sources were found."""

swarms = st.one_of(st.just(frozenset[str]()), st.frozensets(st.sampled_from(SWARM)))


def defrag_configs(num_gpu_blocks: int) -> st.SearchStrategy[DefragConfig | None]:
    """No defragmenter (a quarter of runs), or one with small thresholds and caps (the pools here
    are small, so the seed's cap of 512 pairs would never bind), or the seed's buckets."""
    small = st.builds(
        DefragConfig,
        num_blocks=st.just(num_gpu_blocks),
        threshold=sampled((0, 0, 0, 1, 2)),
        pad_sizes=sampled(((1,), (1, 2), (2, 4), (1, 2, 3, 4, 5, 6))),
        reserved=sampled((frozenset({0}), frozenset({0}), frozenset(), frozenset({0, 1}))),
    )
    seeds = st.just(DefragConfig(num_gpu_blocks, 0, DEFRAG_PAD_SIZES))
    return st.one_of(st.none(), small, small, seeds)
