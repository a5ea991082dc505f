"""What the protocol lets a driver see of a request-level target, without any view of its state:
the table of every request it should know (``get_block_ids``), its free count, and the cached
keys its events fold into."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.lockstep.calls import Divergence, exact_answer
from pagedkv.model_tests.lockstep.show import show_error
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockId


@dataclass(frozen=True, order=True)
class Position:
    """Block ``index`` of group ``group`` of a request's table."""

    request_id: str
    group: int
    index: int

    def __str__(self) -> str:
        return f"request {self.request_id!r} group {self.group} block {self.index}"


@dataclass(frozen=True)
class RequestReading:
    tables: dict[str, list[list[BlockId]]]
    """Per request id, its blocks per group."""
    free: int

    def placed(self) -> dict[Position, BlockId]:
        """Every table entry's block."""
        return {
            Position(request_id, group, index): block
            for request_id, groups in self.tables.items()
            for group, blocks in enumerate(groups)
            for index, block in enumerate(blocks)
        }


def read_target(target: Any, request_ids: Iterable[str]) -> RequestReading:
    """Each answer read as its exact value at once; a target that cannot answer for a request
    it should know diverges."""
    tables: dict[str, list[list[BlockId]]] = {}
    try:
        for request_id in request_ids:
            shown = f"get_block_ids({request_id!r})"
            tables[request_id] = exact_answer(
                "request", "get_block_ids", shown, target.get_block_ids(request_id)
            )
        free = exact_answer(
            "request", "num_free_blocks", "num_free_blocks()", target.num_free_blocks()
        )
    except Divergence:
        raise
    except Exception as error:
        raise Divergence(
            f"the target cannot show its tables and free count: {show_error(error)}", "table"
        ) from error
    return RequestReading(tables, free)


def unchanged_by_failure(
    shown: str, error: BaseException, before: RequestReading, after: RequestReading
) -> None:
    """A call that raised ``error`` left the target as ``before`` showed it, or a divergence of
    kind ``atomicity`` that lists what changed."""
    changed = reading_changes(before, after)
    if changed:
        raise Divergence(
            f"{shown} raised {type(error).__name__} but changed the target (a failed call must"
            " change nothing): " + "; ".join(changed),
            "atomicity",
        )


def reading_changes(before: RequestReading, after: RequestReading) -> list[str]:
    """What changed between two readings, in words (a failed call must change nothing)."""
    found = [
        f"request {request_id!r}'s table {before.tables.get(request_id)} ->"
        f" {after.tables.get(request_id)}"
        for request_id in sorted(set(before.tables) | set(after.tables))
        if before.tables.get(request_id) != after.tables.get(request_id)
    ]
    if before.free != after.free:
        found.append(f"free blocks {before.free} -> {after.free}")
    return found


def fold_events(keys: Counter[CachedKey], events: Iterable[KVEvent]) -> list[str]:
    """Fold ``events`` into the multiset of cached keys (a key cached by two blocks counts
    twice); what cannot be folded (a block removed that was never stored), in words."""
    problems = []
    for event in events:
        if isinstance(event, AllBlocksCleared):
            keys.clear()
        elif isinstance(event, BlockStored):
            keys.update(CachedKey(event.group, digest) for digest in event.block_hashes)
        elif isinstance(event, BlockRemoved):
            for digest in event.block_hashes:
                key = CachedKey(event.group, digest)
                if keys[key] <= 0:
                    problems.append(
                        f"BlockRemoved of group {event.group} hash {digest.hex()[:8]}…, which no"
                        " event stored"
                    )
                    continue
                keys[key] -= 1
                if not keys[key]:
                    del keys[key]
    return problems


def show_event(event: KVEvent) -> str:
    """An event in a divergence's words: hashes shortened, tokens as they are."""
    if isinstance(event, BlockStored):
        parent = "none" if event.parent_hash is None else event.parent_hash.hex()[:8] + "…"
        return (
            f"BlockStored(group {event.group}, hashes {_short(event.block_hashes)}, parent"
            f" {parent}, tokens {list(event.token_ids)}, block size {event.block_size}, lora id"
            f" {event.lora_id})"
        )
    if isinstance(event, BlockRemoved):
        return f"BlockRemoved(group {event.group}, hashes {_short(event.block_hashes)})"
    return repr(event)


def _short(hashes: Iterable[bytes]) -> str:
    return "[" + ", ".join(h.hex()[:8] + "…" for h in hashes) + "]"
