"""What the protocol lets a driver see of a target, without any view of its state: every live
sequence's block table, every live group's cross-attention table, and the free counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from pagedkv.model_tests.lockstep.calls import Divergence, exact_answer
from pagedkv.model_tests.lockstep.show import show_call, show_error
from pagedkv.specs import wire
from pagedkv.specs.types import BlockId, Device


class Observation(NamedTuple):
    """A named tuple: every call makes one (a frozen dataclass took twice as long to make)."""

    tables: dict[int, list[BlockId]]
    cross: dict[int, list[BlockId]]
    free: dict[Device, int]


def observe(target: Any, seq_ids: Iterable[int], group_ids: Iterable[int]) -> Observation:
    """Read the target through the protocol, each answer as its exact value at once (a table
    read later could be another one by then); a target that cannot answer for a live sequence
    or group diverges.

    A target that offers ``_read_at_once`` (the oracle's guard, ``oracle/guard.py``) runs all
    the reads as one of its calls, under one deadline, instead of one call per read: every
    call reads every table, and the guard's own work once per read was about 2 % of a check.
    ``_read_at_once(describe, reader, *args)`` is ``reader(unwrapped target, *args)``, with
    ``describe()`` naming the read under way where a message needs it (a hang, a crash)."""
    at_once = getattr(target, "_read_at_once", None)
    reading: list[Any] = ["get_block_table", None]  # the read under way: its operation, argument
    try:
        if at_once is None:
            return _observe(target, seq_ids, group_ids, reading)
        observed: Observation = at_once(
            lambda: show_call(reading[0], () if reading[1] is None else (reading[1],)),
            _observe,
            seq_ids,
            group_ids,
            reading,
        )
        return observed
    except Divergence:
        raise
    except Exception as error:
        raise Divergence(
            f"the target cannot show its tables and free counts: {show_error(error)}", "table"
        ) from error


def _observe(
    target: Any,
    seq_ids: Iterable[int],
    group_ids: Iterable[int],
    reading: list[Any],
) -> Observation:
    """``observe``'s reads, each noted in ``reading`` as it is made."""
    tables: dict[int, list[BlockId]] = {}
    cross: dict[int, list[BlockId]] = {}
    table_of, exact_table = target.get_block_table, _READERS["get_block_table"]
    for seq_id in seq_ids:  # every call reads every table: _read, written out
        reading[1] = seq_id
        answer = table_of(seq_id)
        try:
            tables[seq_id] = exact_table(answer)
        except wire.NotExact:
            tables[seq_id] = exact_answer(
                "manager", "get_block_table", show_call("get_block_table", (seq_id,)), answer
            )
    for group_id in group_ids:
        cross[group_id] = _read(
            reading, "get_cross_block_table", target.get_cross_block_table, group_id
        )
    free = {
        Device.GPU: _read(reading, "get_num_free_gpu_blocks", target.get_num_free_gpu_blocks),
        Device.CPU: _read(reading, "get_num_free_cpu_blocks", target.get_num_free_cpu_blocks),
    }
    return Observation(tables, cross, free)


_READERS = {
    operation: wire.exact_reader("manager", operation)
    for operation in (
        "get_block_table",
        "get_cross_block_table",
        "get_num_free_gpu_blocks",
        "get_num_free_cpu_blocks",
    )
}
"""``wire.exact_result`` of each operation read here, its kind looked up once."""


def _read(reading: list[Any], operation: str, method: Any, arg: Any = None) -> Any:
    """``method(arg)`` (``method()`` without one)'s answer as the exact value of ``operation``'s
    result (``calls.exact_answer``; the call is written out only for a divergence)."""
    reading[0], reading[1] = operation, arg
    args = () if arg is None else (arg,)
    answer = method(*args)
    try:
        return _READERS[operation](answer)
    except wire.NotExact:
        return exact_answer("manager", operation, show_call(operation, args), answer)


def differences(before: Observation, after: Observation) -> list[str]:
    """What changed between two observations, in words (a failed call must change nothing)."""
    found = []
    for what, old, new in (
        ("sequence", before.tables, after.tables),
        ("group (cross table)", before.cross, after.cross),
    ):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                found.append(f"{what} {key}'s table {old.get(key)} -> {new.get(key)}")
    for device in Device:
        if before.free[device] != after.free[device]:
            found.append(
                f"free {device.value} blocks {before.free[device]} -> {after.free[device]}"
            )
    return found
