"""Loading a target: ``package.module:factory`` (a Python callable taking a ManagerConfig, a
PoolConfig, a RequestConfig or a DefragConfig) or ``exec:./program [args]`` (a program speaking
the JSON-lines protocol of ``exec_target``). Every failure is a ``TargetError`` with a one-line
message."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Collection
from typing import Any

from pagedkv.model_tests.lockstep.calls import TargetStopped
from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.exec_target import (
    ExecSetupError,
    ExecTarget,
    close_target,
    exec_factory,
)
from pagedkv.model_tests.oracle.guard import guard, unguarded
from pagedkv.model_tests.oracle.level_hint import level_hint
from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.operations import required
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.request_types import AttentionKind, KVGroup, RequestConfig
from pagedkv.specs.types import DefragConfig, ManagerConfig, PoolConfig

Factory = Callable[[Any], Any]

SAMPLE_CONFIGS: dict[Level, ManagerConfig | PoolConfig | RequestConfig | DefragConfig] = {
    "manager": ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4),
    "pool": PoolConfig(num_blocks=4, block_size=2),
    "request": RequestConfig(
        num_blocks=8,
        block_size=2,
        groups=(KVGroup(), KVGroup(AttentionKind.SLIDING_WINDOW, 4)),
    ),
    "defrag": DefragConfig(num_blocks=8, threshold=1, pad_sizes=(2, 4)),
}
"""The valid configuration a target is first built with, to find a broken factory early."""

ALIASES = {
    "reference": {
        "manager": "pagedkv.reference.manager_adapter:ReferenceBlockSpaceManager",
        "pool": "pagedkv.reference.pool_adapter:ReferenceBlockPool",
        "request": "pagedkv.reference.request_adapter:ReferenceRequestKVManager",
        "defrag": "pagedkv.reference.defrag_adapter:ReferenceDefragmenter",
    },
    "optimized": {
        "manager": "pagedkv.optimized.block_manager:OptimizedBlockSpaceManager",
        "pool": "pagedkv.optimized.block_pool:OptimizedBlockPool",
        "request": "pagedkv.optimized.request_manager:RequestManager",
        "defrag": "pagedkv.optimized.defragmenter:OptimizedDefragmenter",
    },
    "independent": {
        "manager": "pagedkv.model_tests.independent.manager:IndependentManager",
        "request": "pagedkv.model_tests.independent.request_manager:IndependentRequestManager",
        "defrag": "pagedkv.model_tests.independent.defragmenter:IndependentDefragmenter",
    },
}
"""Short names for the targets pagedkv ships."""

FOLLOWS_THE_PROFILE = {"manager", "pool", "request"}
"""The levels where ``reference`` is built under the profile's policy, so that
``--target reference --profile vllm-v0`` checks the spec as that profile reads it (the
defragmenter has no policy)."""


class TargetError(Exception):
    """A target that cannot be loaded or built."""


def load(
    spec: str, level: Level, timeout: float | None = None, policy: Policy = PAGEDKV
) -> Factory:
    """The factory ``spec`` names. The current directory is importable, as with ``python -m``.
    ``timeout`` is an ``exec:`` program's (None: the environment's); ``policy`` is the one the
    alias ``reference`` is built under (the profile's: ``FOLLOWS_THE_PROFILE``)."""
    if spec.startswith("exec:"):
        try:
            return exec_factory(spec.removeprefix("exec:").strip(), level, timeout)
        except ExecSetupError as error:
            raise TargetError(f"target {spec}: {error}") from None
    if spec in ALIASES:
        if level not in ALIASES[spec]:
            raise TargetError(f"target {spec} has no {level} level")
        if spec == "reference" and level in FOLLOWS_THE_PROFILE and policy != PAGEDKV:
            under_pagedkv: Callable[..., Any] = load(ALIASES[spec][level], level)
            return functools.partial(under_pagedkv, policy=policy)
        spec = ALIASES[spec][level]
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise TargetError(
            f"target {spec!r}: expected package.module:factory or exec:./program [args]"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise TargetError(f"target {spec}: cannot import {module_name}: {error}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # sys.exit() in a module is a bad target, not our exit
        raise TargetError(
            f"target {spec}: importing {module_name} raised {_one_line(error)}"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TargetError(f"target {spec}: module {module_name} has no attribute {attribute}")
        found = getattr(found, part)
    if not callable(found):
        raise TargetError(
            f"target {spec}: {attribute} is {type(found).__name__!r}, not a callable factory"
        )
    factory: Factory = found
    return factory


def build(
    factory: Factory,
    level: Level,
    spec: str = "target",
    config: Any = None,
    offered: Collection[Level] = codec.LEVELS,
) -> Any:
    """Build one target (for ``config``, or a sample valid configuration) and check that it has
    every operation of ``level``; a TargetError otherwise, naming the level the factory builds
    targets of where it is another (``--level`` among the ``offered`` levels)."""
    config = SAMPLE_CONFIGS[level] if config is None else config
    try:
        target = factory(config)
        missing = [op for op in required(level) if not callable(getattr(target, op, None))]
    except UnsupportedError:
        return None  # it declines this configuration (a declared limit): others may do
    except TargetStopped as error:
        raise TargetError(f"target {spec}: {error}") from None
    except Exception as error:
        hint = level_hint(factory, level, SAMPLE_CONFIGS, offered)
        raise TargetError(f"target {spec}: the factory raised {_one_line(error)}{hint}") from None
    if missing:
        close_target(target)
        hint = level_hint(factory, level, SAMPLE_CONFIGS, offered)
        raise TargetError(
            f"target {spec}: {type(unguarded(target)).__name__} lacks the {level} operation(s)"
            f" {', '.join(missing)}{hint}"
        )
    return target


def check(
    spec: str,
    level: Level,
    timeout: float | None = None,
    offered: Collection[Level] = codec.LEVELS,
    policy: Policy = PAGEDKV,
) -> Factory:
    """Load ``spec`` and build one target with a valid configuration (then let it go); every
    call into the factory's targets then has ``timeout`` (None: the environment's). A factory
    of another level is named with the ``--level`` among ``offered`` to pass; ``policy`` is the
    profile's, for the alias ``reference``."""
    factory = guard(load(spec, level, timeout, policy), timeout)
    target = build(factory, level, spec, offered=offered)
    if isinstance(target, ExecTarget):
        target.close()
    return factory


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
