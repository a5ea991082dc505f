"""A request machine's run as a Python program that replays it on any manager: what a failure
prints beside Hypothesis's shrunk steps, so that the failing calls can be read and run alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pagedkv.model_tests.lockstep.show import show_value
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.request_calls import REQUEST_CALLS
from pagedkv.specs.request_types import KVGroup, RequestConfig

RecordedCall = tuple[str, tuple[Any, ...]]


def show_group(group: KVGroup) -> str:
    if group.sliding_window is None:
        return "KVGroup()"
    return f"KVGroup(AttentionKind.SLIDING_WINDOW, {group.sliding_window})"


def show_config(config: RequestConfig) -> str:
    groups = ", ".join(show_group(g) for g in config.groups)
    return (
        f"RequestConfig(num_blocks={config.num_blocks}, block_size={config.block_size},"
        f" groups=({groups},), enable_caching={config.enable_caching},"
        f" max_model_len={config.max_model_len})"
    )


def shorter(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def replay_program(
    config: RequestConfig, calls: Sequence[RecordedCall], outcomes: Sequence[object] = ()
) -> str:
    """Python source that builds ``config`` and makes ``calls`` on ``manager``, numbered, each
    with the outcome the machine saw (``outcomes``, as far as they go; a call that raised is
    wrapped so that the program runs on); ``replay_calls`` runs the same list."""
    lines = [
        "from pagedkv.specs.errors import *  # the typed errors",
        "from pagedkv.specs.request_types import *  # Request, KVGroup, AttentionKind, ...",
        "from pagedkv.specs.types import ExtraKey",
        f"config = {show_config(config)}",
        "manager = make_manager(config)",
    ]
    for number, (name, args) in enumerate(calls, 1):
        line = f"manager.{name}({', '.join(repr(arg) for arg in args)})"
        outcome = outcomes[number - 1] if number <= len(outcomes) else None
        if isinstance(outcome, PagedKVError):
            error = type(outcome).__name__
            lines += [
                f"try:  # {number}: raises {error}",
                f"    {line}",
                f"except {error}:",
                "    pass",
            ]
        elif number <= len(outcomes):
            lines.append(f"{line}  # {number}: {shorter(show_value(outcome))}")
        else:
            lines.append(f"{line}  # {number}: the failing call")
    return "\n".join(lines)


def replay_calls(
    make: Callable[[RequestConfig], RequestKVManager],
    config: RequestConfig,
    calls: Sequence[RecordedCall],
) -> list[object]:
    """Each call's outcome on a fresh manager: its answer or the typed error it raised."""
    manager = make(config)
    outcomes: list[object] = []
    for name, args in calls:
        try:
            outcomes.append(REQUEST_CALLS[name](*args).method(manager)(*args))
        except PagedKVError as error:
            outcomes.append(error)
    return outcomes
