"""A defragmenter's mapping read through its protocol alone: ``resolve`` of every logical id and
``unresolve`` of every physical id (``specs/defragmenter.md`` §3), after every call of the defrag
level's sessions. Reading changes nothing, by the spec; what a target answers here is held to
the protocol's exact values like any answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.lockstep.calls import Divergence, exact_answer, run_call
from pagedkv.model_tests.lockstep.show import show_call, show_error
from pagedkv.specs import defrag_calls as calls
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.types import BlockId, DefragConfig, TableKey


@dataclass(frozen=True)
class DefragReading:
    forward: tuple[BlockId, ...]
    """``resolve(b)`` for every logical id ``b``."""
    backward: tuple[BlockId, ...]
    """``unresolve(p)`` for every physical id ``p``."""

    def differences(self, other: DefragReading, mine: str, theirs: str) -> list[str]:
        """Where ``other`` maps an id otherwise, in words (``mine`` and ``theirs`` name the
        two: "the reference" and "the target", "before" and "after")."""
        return [
            f"resolve({b}) is {a} {mine}, {z} {theirs}"
            for b, (a, z) in enumerate(zip(self.forward, other.forward, strict=True))
            if a != z
        ] + [
            f"unresolve({p}) is {a} {mine}, {z} {theirs}"
            for p, (a, z) in enumerate(zip(self.backward, other.backward, strict=True))
            if a != z
        ]


def _read(target: Any, call: calls.DefragCall[BlockId], when: str) -> BlockId:
    shown = show_call(call.name, call.args)
    result, error = run_call(target, call)
    if error is not None:
        raise Divergence(
            f"{shown}, read {when}, raised {show_error(error)}: every id in range resolves",
            "untyped" if not isinstance(error, Exception) else "error",
        )
    value: BlockId = exact_answer("defrag", call.name, f"{shown} (read {when})", result)
    return value


def read_mapping(target: Any, config: DefragConfig, when: str) -> DefragReading:
    """The target's forward and backward tables as its ``resolve`` and ``unresolve`` answer
    them (``when``: the moment, for a report)."""
    ids = range(config.num_blocks)
    return DefragReading(
        forward=tuple(_read(target, calls.resolve(b), when) for b in ids),
        backward=tuple(_read(target, calls.unresolve(p), when) for p in ids),
    )


def protocol_view(
    config: DefragConfig,
    reading: DefragReading,
    tables: Mapping[TableKey, Sequence[BlockId]],
) -> DefragmenterView:
    """What the protocol shows of a defragmenter, as its view: the tables the caller told it
    of, and each physical id's references as those tables count them through ``forward``."""
    counts = Counter(reading.forward[b] for table in tables.values() for b in table)
    return DefragmenterView(
        config=config,
        forward=reading.forward,
        backward=reading.backward,
        ref_counts=dict(counts),
        tables={key: tuple(table) for key, table in tables.items()},
    )
