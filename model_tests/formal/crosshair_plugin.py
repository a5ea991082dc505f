"""A CrossHair plugin (``crosshair --extra_plugin``): symbolic ``immutables.Map`` values, a
``Policy`` that is any of the named profiles' policies, and small consistent ``PoolState``s.

CrossHair does not know the C type ``immutables.Map``: given a ``Map[int, BlockView]`` parameter
it builds a map whose values are not ``BlockView``s. This builds a symbolic ``dict`` of the right
key and value types and freezes its items into a ``Map`` (which fixes the map's size on each path,
not its contents). A ``PoolState`` built field by field that way almost never meets the
preconditions of the pool's functions (the block ids of its config, a hash index that agrees
with the blocks): ``take_block`` was "unable to meet precondition" on every run. So a state is
built the way the pool keeps one: a pool of one to ``MAX_BLOCKS`` blocks, each free (exactly
``BLANK``), held once, or cached (held or evictable, with a symbolic access time and number of
hashed tokens), the hash index derived from the cached blocks, under any profile's policy.
CrossHair runs a plugin file on its own: what a creator needs comes in as default arguments or
imports made when it runs (the module's globals are gone by then).
"""

from __future__ import annotations

from typing import Any

import immutables
from crosshair import SymbolicFactory, register_type

from pagedkv.reference.pool_state import PoolState
from pagedkv.specs.content_hash import ROOT, Prefix
from pagedkv.specs.policy import PROFILES, Policy
from pagedkv.specs.pool_view import BLANK, BlockView
from pagedkv.specs.types import NEVER_ACCESSED, BlockHash, PoolConfig

MAX_BLOCKS = 3
"""The largest pool a symbolic ``PoolState`` has: every path stays short."""


def symbolic_map(factory: SymbolicFactory, key_type: Any = object, value_type: Any = object) -> Any:
    import immutables
    from crosshair import ResumedTracing

    contents = factory(dict[key_type, value_type])
    with ResumedTracing():  # type: ignore[no-untyped-call]
        # built while tracing: the Map compares keys whose hashes collide (``hash(-1) ==
        # hash(-2)``), and a symbolic int compared outside tracing crashes CrossHair
        # ("Numeric operation on symbolic while not tracing")
        return immutables.Map(list(contents.items()))


def symbolic_policy(
    factory: SymbolicFactory, policies: tuple[Policy, ...] = tuple(PROFILES.values())
) -> Any:
    """One of the profiles' policies (CrossHair cannot build a dataclass of ``Literal`` fields
    by itself): a contract must hold under each engine's choices. (The profiles come in as a
    default argument: the module's globals are gone when this runs.)"""
    from crosshair import ResumedTracing

    index = factory(int)
    with ResumedTracing():  # type: ignore[no-untyped-call]
        for position, policy in enumerate(policies[:-1]):
            if index == position:
                return policy
    return policies[-1]


def symbolic_pool_state(
    factory: SymbolicFactory,
    most: int = MAX_BLOCKS,
    blank: BlockView = BLANK,
    root: BlockHash = ROOT,
    never_accessed: float = NEVER_ACCESSED,
    kinds: tuple[type[PoolState], type[PoolConfig], type[BlockView], type[Prefix], type[Policy]] = (
        PoolState,
        PoolConfig,
        BlockView,
        Prefix,
        Policy,
    ),
) -> Any:
    """A pool as ``block_pool`` keeps one (the invariants of ``specs/invariants.md`` I1-I3):
    block ids ``first_id ..`` of its config, free blocks exactly ``BLANK``, the hash index
    naming each cached block under its own hash, release times for the evictable blocks. (The
    project's names come in as default arguments: the module's globals are gone when this runs.)"""
    from dataclasses import replace

    import immutables
    from crosshair import IgnoreAttempt, ResumedTracing

    state_type, config_type, view_type, prefix_type, policy_type = kinds

    def one_of(name: str, choices: range) -> int:
        """A concrete int among ``choices``, one path per value (a Map needs concrete keys)."""
        value = factory(int, name)
        with ResumedTracing():  # type: ignore[no-untyped-call]
            for choice in choices:
                if value == choice:
                    return choice
        raise IgnoreAttempt

    # The search varies the choices made last most often: the policy first, then each block's
    # state, and the pool's size (which of those blocks it has) last.
    policy = factory(policy_type, "_policy")
    views: list[BlockView] = []
    release_times: list[int] = []
    for block in range(most):
        held = factory(bool, f"_held_{block}")
        hashed = factory(bool, f"_hashed_{block}")
        release_times.append(factory(int, f"_released_{block}"))
        with ResumedTracing():  # type: ignore[no-untyped-call]
            if not hashed:
                views.append(replace(blank, ref_count=1) if held else blank)
                continue
        # only a cached block's access time and length rank it; a path whose values are out
        # of range is dropped, so the fewer such values, the fewer paths wasted
        last_accessed = factory(float, f"_last_accessed_{block}")
        num_tokens = factory(int, f"_prefix_tokens_{block}")
        with ResumedTracing():  # type: ignore[no-untyped-call]
            if not (never_accessed <= last_accessed < float("inf") and num_tokens >= 0):
                raise IgnoreAttempt
            views.append(
                view_type(
                    ref_count=1 if held else 0,
                    content_hash=bytes([block + 1]) * 32,
                    prefix=prefix_type(root, num_tokens),
                    computed=factory(bool, f"_computed_{block}"),
                    last_accessed=last_accessed,
                )
            )
    with ResumedTracing():  # type: ignore[no-untyped-call]
        num_blocks = 1 + sum(1 for n in range(1, most) if factory(bool, f"_more_than_{n}"))
    config = config_type(num_blocks, one_of("_block_size", range(1, 3)), factory(bool, "_caching"))
    blocks = dict(enumerate(views[:num_blocks]))
    cached = {view.content_hash: b for b, view in blocks.items() if view.content_hash is not None}
    evictable = [b for b, view in blocks.items() if view.content_hash and not view.ref_count]
    return state_type(
        config,
        immutables.Map(blocks),
        immutables.Map(cached),
        hits=factory(int, "_hits"),
        queries=factory(int, "_queries"),
        policy=policy,
        released=immutables.Map({b: release_times[b] for b in evictable}),
    )


register_type(immutables.Map, symbolic_map)
register_type(Policy, symbolic_policy)
register_type(PoolState, symbolic_pool_state)
