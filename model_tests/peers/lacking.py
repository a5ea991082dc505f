"""The lockstep machine for a target that lacks some protocol operations altogether.

A real engine may have no counterpart for an operation (vLLM 0.6.3 has no
``get_num_cached_tokens``; nano-vllm has no swap): its adapter raises ``UnsupportedError``, and a
plain run would stop at the first such call, hiding everything behind it. ``without`` derives a
machine that never makes such a call: neither side runs it, it is not recorded (so the shrunk
trace replays on the target unchanged), and the rule that wanted it gets an ``UnsupportedError``
back, which every rule already treats as a refused call (a swap rule stops after a refused
``can_swap_out``, a query's answer is only looked at, ...); the one rule that cannot take a
refusal (the pool's ``common_computed_prefix``, which measures its answer) is taken out of the
machine instead. What is left out is named in the
report of ``make peers``; the operations stay part of the protocol.

A manager target may also serve only some configurations (nano-vllm has no sliding window):
``serves`` narrows the configurations the machine draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hypothesis.stateful import initialize

from model_tests.machines.manager_machine import manager_configs
from specs.errors import UnsupportedError
from specs.operations import OPERATIONS
from specs.types import ManagerConfig

RULES_THAT_NEED = {"common_computed_prefix": "common_computed_prefix"}
"""Operation → the rule that exists to drive it and cannot take a refusal."""


def _not_a_rule(self: Any, *args: Any, **kwargs: Any) -> None:
    """A rule taken out (Hypothesis finds rules by their marker; this has none)."""


def without(
    case: type[Any],
    lacks: Iterable[str],
    serves: Callable[[ManagerConfig], bool] | None = None,
) -> type[Any]:
    """``case`` (a lockstep machine class) for a target lacking the operations ``lacks`` and, at
    the manager level, serving only the configurations ``serves`` accepts."""
    lacked = frozenset(lacks)
    known = {name for level in OPERATIONS.values() for name in level}
    if not lacked <= known:
        raise ValueError(f"not protocol operations: {sorted(lacked - known)}")
    namespace: dict[str, Any] = {"lacks": lacked}
    for op in lacked & RULES_THAT_NEED.keys():
        namespace[RULES_THAT_NEED[op]] = _not_a_rule
    if serves is not None:

        @initialize(config=manager_configs.filter(serves))
        def create_managers(self: Any, config: ManagerConfig) -> None:
            case.create_managers(self, config)

        namespace["create_managers"] = create_managers

    def both(self: Any, method: str, *args: Any) -> Any:
        if method in lacked:
            return UnsupportedError(f"{method}: the target's engine has no such operation")
        return case.both(self, method, *args)

    namespace["both"] = both
    return type(f"{case.__name__}_without", (case,), namespace)
