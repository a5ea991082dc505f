"""The safety tier at the request level: hold a target to what every correct request-level
manager guarantees, whatever its policy, reading it through the protocol alone
(``specs/safety.md``, "The request level").

No reference runs beside the target. After every call the session checks what it can see:

- S1 no aliasing: a block two table entries hold sits in one group at one index, and both
  requests' committed tokens fill that block alike (same chained hash: tokens, keys and
  everything before);
- S2 accounting: the free count is the pool less the null block less the distinct blocks the
  tables hold, ``usage()`` is what that count makes it, and ``reset_prefix_cache`` never
  succeeds while a table holds a block;
- S3 placement: every id is in the pool, no block in two groups, the null block only in a
  sliding-window group and only where the window no longer reads; after ``allocate_slots`` a
  slot for every token asked for, a hit's blocks at their places, and a ``None`` that changed
  nothing but window entries turned null (and left a new request unknown);
- S5 KV data: the session plays the model runner: it writes each computed committed token's KV
  into its slot (in the target's ids), clears the blocks an allocation hands out, and reads every
  hit back: a hit whose blocks hold other tokens, keys or positions (or nothing: a block cached
  with draft tokens in it) is caught there;
- S6 typed errors, and a failed call changes nothing (every request-level call is atomic);
- the KV events, what a router relies on (``request_event_ledger.py``): each ``BlockStored``
  names exactly committed blocks, the announced keys cover every hit and drop a block before it
  is handed out blank. The session takes the events after every call to read them beside it and
  hands them to the driver's ``take_events`` in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import Divergence, DivergenceKind, run_call
from pagedkv.model_tests.lockstep.request_event_ledger import Allocation, EventLedger
from pagedkv.model_tests.lockstep.request_reading import (
    RequestReading,
    read_target,
    unchanged_by_failure,
)
from pagedkv.model_tests.lockstep.show import show_call, show_error
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.specs.call import Call
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.request_hashes import block_identifiers, request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AttentionKind,
    KVEvent,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import BlockId, ExtraKey, Token

T = TypeVar("T")

Finding = tuple[DivergenceKind, str]
SlotContent = tuple[int, tuple[Token, ...], ExtraKey, tuple[str, ...]]
"""What a token's KV depends on: its position, every token up to it, the request's keys and
the multimodal identifiers of its block."""


def slot_content(request: Request, position: int, block_size: int) -> SlotContent:
    start = position - position % block_size
    identifiers = block_identifiers(request.multimodal, start, start + block_size)
    return (position, tuple(request.tokens[: position + 1]), request.extra_key, identifiers)


@dataclass
class RequestSafetySession:
    target: Any
    config: RequestConfig
    steps: list[Step] = field(default_factory=list)
    ended: bool = False
    """Never set: every request-level call is atomic."""

    def __post_init__(self) -> None:
        self.answers = Answers(self.target, "request")
        self.requests: dict[str, Request] = {}
        """The requests the target holds tables for, as last passed."""
        self.kv: dict[tuple[BlockId, int], SlotContent] = {}
        self.written: dict[str, int] = {}
        """Per request the session holds, the end of the positions it has written."""
        self.ledger = EventLedger(self.config.block_size)
        self.drained: list[KVEvent] = []
        """Events the session took after a call (``request_event_ledger.py``), not yet handed
        to the driver."""
        self.draining = True
        self.seen = read_target(self.target, ())

    @property
    def block_size(self) -> int:
        return self.config.block_size

    # --- one call ------------------------------------------------------------------------------

    def call(self, call: Call[Any, T]) -> T | PagedKVError:
        method, args = call.name, call.args
        shown = show_call(method, args)
        result, error = run_call(self.target, call)
        result = self.answers.take(call, shown, result, error is not None)
        if error is not None:
            return self._failed(method, args, shown, error)
        findings: list[Finding] = []
        request = args[0] if args and type(args[0]) is Request else None
        if request is not None and method == "allocate_slots":
            self.ledger.learn(request)
        if method == "get_computed_blocks" and request is not None:
            findings += self._hit(request, result[0], result[1], "the hit it answers")
            findings += [("events", p) for p in self.ledger.hit_problems(request, result[0])]
        if method == "allocate_slots" and request is not None:
            findings += self._allocated(request, args, result)
        if method in ("free", "preempt") and isinstance(args[0], str):
            self.requests.pop(args[0], None)
            self.written.pop(args[0], None)
        known_before = request is not None and request.request_id in self.requests
        if method == "allocate_slots" and request is not None and (known_before or result):
            self.requests[request.request_id] = request
        now = read_target(self.target, self.requests)
        if method == "allocate_slots" and request is not None:
            findings += self._placed(request, args, result, now)
        if method == "reset_prefix_cache" and result and _held(now):
            findings.append(
                ("accounting", "reset_prefix_cache() succeeded while tables hold blocks")
            )
        if method == "take_events":
            findings += self.ledger.read(result, None)
            result = cast(T, [*self.drained, *result])
            self.drained = []
        else:
            findings += self._drain(self._allocation(request, args, result, now))
        if method == "usage":
            findings += self._usage(cast(float, result), now.free)
        findings += self._tables(now)
        if findings:
            raise Divergence(f"{shown}: " + "; ".join(text for _, text in findings), parts=findings)
        self.answers.recheck("after pagedkv read the target's tables and free count")
        self.seen = now
        self.steps.append(Step(method, args, result))
        return cast(T, result)

    def _failed(
        self, method: str, args: tuple[Any, ...], shown: str, error: BaseException
    ) -> PagedKVError:
        if not isinstance(error, PagedKVError):
            raise Divergence(
                f"{shown} raised {show_error(error)}, not an error of pagedkv.specs.errors",
                "untyped",
            )
        unchanged_by_failure(shown, error, self.seen, read_target(self.target, self.requests))
        self.steps.append(Step(method, args, error))
        return error

    # --- hits and allocations ------------------------------------------------------------------

    def _window(self, group: int) -> int | None:
        kv_group = self.config.groups[group]
        return kv_group.sliding_window if kv_group.kind is AttentionKind.SLIDING_WINDOW else None

    def _may_be_null(self, group: int, index: int, computed: int) -> bool:
        """Whether block ``index`` of ``group`` may be the null block once ``computed`` tokens
        are computed: no later token's window reads any of its tokens."""
        window = self._window(group)
        return window is not None and (index + 1) * self.block_size <= computed - window + 1

    def _hit(
        self, request: Request, blocks: list[list[BlockId]], num_tokens: int, what: str
    ) -> list[Finding]:
        """A hit's shape and data: whole blocks, no more tokens than the request has, the null
        block only where the window no longer reads, and every other block holding exactly the
        request's tokens."""
        size = self.block_size
        findings: list[Finding] = []
        if num_tokens % size or num_tokens > request.num_tokens:
            findings.append(
                (
                    "placement",
                    f"{what} is {num_tokens} tokens: not whole blocks of {size} within the"
                    f" request's {request.num_tokens} tokens",
                )
            )
            return findings
        if len(blocks) != len(self.config.groups):
            return [
                (
                    "placement",
                    f"{what} has {len(blocks)} groups, the config {len(self.config.groups)}",
                )
            ]
        for group, ids in enumerate(blocks):
            if len(ids) != num_tokens // size:
                findings.append(
                    (
                        "placement",
                        f"{what} has {len(ids)} blocks in group {group} for {num_tokens} tokens",
                    )
                )
                continue
            for index, block in enumerate(ids):
                if block == NULL_BLOCK:
                    if not self._may_be_null(group, index, num_tokens):
                        findings.append(
                            (
                                "placement",
                                f"{what} has the null block at group {group} block {index},"
                                " where attention still reads",
                            )
                        )
                    continue
                findings += self._reads_back(request, group, index, block, what)
        return findings

    def _reads_back(
        self, request: Request, group: int, index: int, block: BlockId, what: str
    ) -> list[Finding]:
        size = self.block_size
        for position in range(index * size, (index + 1) * size):
            held = self.kv.get((block, position % size))
            if held != slot_content(request, position, size):
                found = "nothing" if held is None else _show_content(held)
                return [
                    (
                        "kv",
                        f"{what}: group {group} block {index} is block {block}, whose slot"
                        f" {position % size} holds {found}, not request"
                        f" {request.request_id!r}'s token at position {position}"
                        f" ({_show_content(slot_content(request, position, size))})",
                    )
                ]
        return []

    def _allocated(self, request: Request, args: tuple[Any, ...], result: Any) -> list[Finding]:
        """Before the tables are read again: a hit handed in must hold the request's data."""
        hit = args[3] if len(args) > 3 else None
        computed = args[2] if len(args) > 2 else 0
        if not isinstance(hit, list) or not hit or type(computed) is not int:
            return []
        return self._hit(request, hit, computed, "the hit allocate_slots was given")

    def _placed(
        self, request: Request, args: tuple[Any, ...], result: Any, now: RequestReading
    ) -> list[Finding]:
        """After ``allocate_slots``: the tables hold what was asked, or (``None``) nothing
        changed but window entries turned null; then the model runner writes the computed
        tokens."""
        request_id = request.request_id
        before = self.seen.tables.get(request_id)
        new_computed = args[2] if len(args) > 2 and type(args[2]) is int else 0
        total = request.num_computed_tokens + new_computed
        if result is None:
            return self._nothing_but_release(request_id, before, now.tables.get(request_id), total)
        table = now.tables[request_id]
        findings: list[Finding] = []
        for group, ids in enumerate(result):
            if group < len(table) and table[group][len(table[group]) - len(ids) :] != ids:
                findings.append(
                    (
                        "placement",
                        f"group {group}'s new blocks {ids} are not the end of request"
                        f" {request_id!r}'s table {table[group]}",
                    )
                )
            for block in ids:
                for slot in range(self.block_size):
                    self.kv.pop((block, slot), None)
        hit = args[3] if len(args) > 3 and isinstance(args[3], list) else []
        findings += self._hit_in_table(request_id, hit, table, total)
        findings += self._nulls_read(request_id, table, total)
        lookahead = args[4] if len(args) > 4 and type(args[4]) is int else 0
        need = total + args[1] + lookahead
        if self.config.max_model_len is not None:
            need = min(need, self.config.max_model_len)
        for group, ids in enumerate(table):
            if len(ids) * self.block_size < need:
                findings.append(
                    (
                        "placement",
                        f"request {request_id!r} group {group} has {len(ids)} blocks of"
                        f" {self.block_size}, for {need} token slots",
                    )
                )
        if findings:
            return findings
        return self._run_model(request, table, total, args[1])

    def _nulls_read(self, request_id: str, table: list[list[BlockId]], total: int) -> list[Finding]:
        """The null block only where no later token's window reads (``total`` tokens computed
        before this call: a running request's count never falls below it)."""
        findings: list[Finding] = []
        for group, ids in enumerate(table):
            read = [
                index
                for index, block in enumerate(ids)
                if block == NULL_BLOCK and not self._may_be_null(group, index, total)
            ]
            if read:
                findings.append(
                    (
                        "placement",
                        f"request {request_id!r} group {group} has the null block at"
                        f" {read} with {total} tokens computed: attention still reads there",
                    )
                )
        return findings

    def _hit_in_table(
        self, request_id: str, hit: list[Any], table: list[list[BlockId]], total: int
    ) -> list[Finding]:
        findings: list[Finding] = []
        for group, ids in enumerate(hit):
            if not isinstance(ids, list) or group >= len(table):
                continue
            for index, block in enumerate(ids):
                placed = table[group][index] if index < len(table[group]) else None
                null_ok = placed == NULL_BLOCK and self._may_be_null(group, index, total)
                if placed != block and not null_ok:
                    findings.append(
                        (
                            "placement",
                            f"request {request_id!r} group {group} block {index} is {placed},"
                            f" not the hit's block {block}",
                        )
                    )
        return findings

    def _run_model(
        self, request: Request, table: list[list[BlockId]], total: int, num_new: Any
    ) -> list[Finding]:
        """Write the KV of the committed tokens this step computes (drafts are never known).
        First those the request says are computed but this session never wrote: the scheduler
        computed them in steps the session did not see (a minimized trace drops such steps), and
        a correct manager caches their blocks on its word."""
        request_id = request.request_id
        end = min(total + num_new, request.num_tokens) if type(num_new) is int else total
        written = self.written.get(request_id, 0)
        unseen = range(written, min(request.num_computed_tokens, total))
        findings = self._write(request, table, unseen, computed_now=False)
        findings += self._write(request, table, range(total, end), computed_now=True)
        self.written[request_id] = max(written, end)
        return findings

    def _write(
        self, request: Request, table: list[list[BlockId]], positions: range, computed_now: bool
    ) -> list[Finding]:
        """Write ``positions`` into every group's table; one this step computes must not be in
        the null block (an earlier one may be, once its window has moved on: S3 checks where)."""
        findings: list[Finding] = []
        size = self.block_size
        for position in positions:
            content = slot_content(request, position, size)
            for group, ids in enumerate(table):
                block = ids[position // size]
                if block == NULL_BLOCK:
                    if computed_now:
                        findings.append(
                            (
                                "placement",
                                f"request {request.request_id!r} group {group}: position"
                                f" {position}, which this step computes, is in the null block",
                            )
                        )
                    continue
                held = self.kv.get((block, position % size))
                if held is not None and held != content and self._shared(block, request):
                    findings.append(
                        (
                            "kv",
                            f"request {request.request_id!r} writes position {position} into"
                            f" block {block} slot {position % size}, which another table holds"
                            f" with {_show_content(held)}",
                        )
                    )
                self.kv[(block, position % size)] = content
        return findings

    def _shared(self, block: BlockId, request: Request) -> bool:
        return any(
            block in ids
            for request_id, groups in self.seen.tables.items()
            if request_id != request.request_id
            for ids in groups
        )

    def _nothing_but_release(
        self,
        request_id: str,
        before: list[list[BlockId]] | None,
        now: list[list[BlockId]] | None,
        total: int,
    ) -> list[Finding]:
        if before is None:
            result, error = run_call(self.target, _get_block_ids(request_id))
            if error is None:
                return [
                    (
                        "placement",
                        f"allocate_slots answered None for the new request {request_id!r},"
                        f" yet the target holds a table for it: {result!r}",
                    )
                ]
            return []
        findings: list[Finding] = []
        for group, (old, new) in enumerate(zip(before, now or [], strict=False)):
            changed = [
                index
                for index, (a, b) in enumerate(zip(old, new, strict=False))
                if a != b and not (b == NULL_BLOCK and self._may_be_null(group, index, total))
            ]
            if len(old) != len(new) or changed:
                findings.append(
                    (
                        "placement",
                        f"allocate_slots answered None but changed request {request_id!r}'s"
                        f" group {group} table {old} -> {new} (only blocks that left the window"
                        " may go)",
                    )
                )
        return findings

    def _allocation(
        self, request: Request | None, args: tuple[Any, ...], result: Any, now: RequestReading
    ) -> Allocation | None:
        """The allocation whose events are read next (None for any other call)."""
        if request is None or not isinstance(result, list) or type(args[1]) is not int:
            return None
        table = now.tables.get(request.request_id)
        if table is None:
            return None
        new_computed = args[2] if len(args) > 2 and type(args[2]) is int else 0
        total = request.num_computed_tokens + new_computed
        computed = min(total + args[1], request.num_tokens)
        blank = frozenset(b for ids in result if isinstance(ids, list) for b in ids)
        return Allocation(request, table, blank, computed)

    def _drain(self, allocation: Allocation | None) -> list[Finding]:
        """Take the events this call caused and read them beside it; kept for the driver."""
        if not self.draining:
            return []
        events, error = run_call(self.target, _take_events())
        if error is not None or not isinstance(events, list):
            self.draining = False  # the driver's own take_events meets whatever this was
            return []
        self.drained += events
        return self.ledger.read(events, allocation)

    # --- after every call ----------------------------------------------------------------------

    def _usage(self, usage: float, free: int) -> list[Finding]:
        usable = self.config.num_blocks - 1
        expected = 0.0 if usable == 0 else 1.0 - free / usable
        if not math.isclose(usage, expected, rel_tol=1e-9, abs_tol=1e-9):
            return [("accounting", f"usage() is {usage!r} with {free} of {usable} blocks free")]
        return []

    def _tables(self, now: RequestReading) -> list[Finding]:
        findings: list[Finding] = []
        holders: dict[BlockId, list[tuple[str, int, int]]] = {}
        for request_id, groups in now.tables.items():
            for group, ids in enumerate(groups):
                for index, block in enumerate(ids):
                    if type(block) is not int or not 0 <= block < self.config.num_blocks:
                        findings.append(
                            ("placement", f"request {request_id!r} holds block {block!r}")
                        )
                    elif block != NULL_BLOCK:
                        holders.setdefault(block, []).append((request_id, group, index))
        held = len(holders)
        expected = self.config.num_blocks - 1 - held
        if now.free != expected:
            findings.append(
                (
                    "accounting",
                    f"num_free_blocks() is {now.free}, but the tables hold {held} of the"
                    f" {self.config.num_blocks - 1} blocks",
                )
            )
        for block, places in holders.items():
            findings += self._aliasing(block, places)
        return findings

    def _aliasing(self, block: BlockId, places: list[tuple[str, int, int]]) -> list[Finding]:
        if len(places) == 1:
            return []
        groups = {group for _, group, _ in places}
        indexes = {index for _, _, index in places}
        if len(groups) > 1 or len(indexes) > 1:
            return [("aliasing", f"block {block} is held at {_show_places(places)}")]
        index = indexes.pop()
        hashes = set()
        for request_id, _, _ in places:
            request = self.requests.get(request_id)
            chain = [] if request is None else request_block_hashes(request, self.block_size)
            if len(chain) <= index:
                return [
                    (
                        "aliasing",
                        f"block {block} is shared at {_show_places(places)}, but request"
                        f" {request_id!r} has no full block of committed tokens there",
                    )
                ]
            hashes.add(chain[index])
        if len(hashes) > 1:
            return [
                (
                    "aliasing",
                    f"block {block} is shared at {_show_places(places)} by requests whose"
                    " tokens there differ (or their keys, or what comes before)",
                )
            ]
        return []

    def problems(self) -> list[str]:
        return []


def _held(reading: RequestReading) -> bool:
    return any(
        block != NULL_BLOCK for groups in reading.tables.values() for ids in groups for block in ids
    )


def _take_events() -> Call[Any, Any]:
    return Call("take_events", (), lambda side: side.take_events)


def _get_block_ids(request_id: str) -> Call[Any, Any]:
    return Call("get_block_ids", (request_id,), lambda side: side.get_block_ids)


def _show_places(places: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"request {r!r} group {g} block {i}" for r, g, i in places)


def _show_content(content: SlotContent) -> str:
    position, tokens, key, identifiers = content
    tail = list(tokens[-4:])
    more = "…, " if len(tokens) > 4 else ""
    extra = "" if key == ExtraKey() else f", {key}"
    images = f", {list(identifiers)}" if identifiers else ""
    return f"position {position} after [{more}{', '.join(map(str, tail))}]{extra}{images}"
