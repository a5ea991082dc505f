"""What a factory builds, when it is not a target of the level it was checked at: a pool factory
checked without ``--level pool`` raises ``ConfigurationError: expected a PoolConfig`` from its
first call, and the user is better served by the option to pass than by that line alone.

The factory is tried with a sample configuration of every other level (and a defragmenter's,
which ``pagedkv check`` does not take); the first it builds a whole target from names the level.
An ``exec:`` program is not tried: it is started for one level and told so.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from pagedkv.model_tests.lockstep.calls import TargetStopped
from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.exec_target import ExecFactory, close_target
from pagedkv.model_tests.oracle.guard import GuardedFactory
from pagedkv.specs.operations import required
from pagedkv.specs.types import DefragConfig

DEFRAGMENTER_OPS = ("update_state", "defragment", "resolve")
"""What a defragmenter has (``specs.interface.Defragmenter``)."""
DEFRAG_SAMPLE = DefragConfig(num_blocks=8)


def level_hint(
    factory: Callable[[Any], Any],
    level: codec.Level,
    samples: Mapping[codec.Level, Any],
    offered: Collection[codec.Level],
) -> str:
    """``; it builds pool targets (from a PoolConfig): pass --level pool``, or ``""`` where
    the factory builds nothing whole from any other sample. ``offered``: the levels the
    command takes (a level it does not take is named, not advised)."""
    if isinstance(factory, ExecFactory) or (
        isinstance(factory, GuardedFactory) and factory.hung is not None
    ):
        return ""
    for other, config in samples.items():
        if other != level and _builds(factory, config, required(other)):
            made = f"it builds {other} targets (from a {type(config).__name__})"
            if other in offered:
                return f"; {made}: pass --level {other}"
            return f"; {made}, not {level} ones"
    if _builds(factory, DEFRAG_SAMPLE, DEFRAGMENTER_OPS):
        return (
            "; it builds a defragmenter (from a DefragConfig), which pagedkv checks only in its"
            " own machines: --target takes a block manager, a pool or a request manager"
        )
    return ""


def _builds(factory: Callable[[Any], Any], config: Any, operations: Collection[str]) -> bool:
    """Whether ``factory(config)`` is a target with every one of ``operations``."""
    try:
        target = factory(config)
    except (Exception, TargetStopped):  # not this one; a hung factory is asked no more
        return False
    try:
        return all(callable(getattr(target, op, None)) for op in operations)
    finally:
        close_target(target)
