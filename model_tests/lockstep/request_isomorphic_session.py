"""The oracle at the request level (``specs/oracle.md`` §1, "Isomorphic mode, request level"):
the reference and a target driven call for call, block ids compared through a bijection (the
null block stands for itself), the target read only through the protocol.

After every call the target's table of every request the reference knows is read with
``get_block_ids`` and put beside the reference's, position by position, group by group. Which
blank block fills a new position is the target's choice (blank blocks are interchangeable): a
block the reference took blank binds to whatever blank block the target took there. A hit's
block is not a choice: the target must put the counterpart of the reference's cached block. And
taking one of the reference's cached blocks blank (evicting it) while the reference kept it is
a divergence of kind ``choice``: the free queue says which block goes first
(``specs/request_level.md``). Events carry no block ids: the target's ``take_events()`` must
answer the model's events exactly, one for one and in order (a divergence of kind ``events``), for
a router reads their hashes, parents and tokens, not only the keys they fold into. The session
takes both sides' events after every call and compares them there (handing them to the driver's
next ``take_events``), so each call's events are checked beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.bijection import Bijection
from pagedkv.model_tests.lockstep.calls import (
    Divergence,
    exact_answer,
    run_call,
    shared_error,
)
from pagedkv.model_tests.lockstep.manager_session import same_rate
from pagedkv.model_tests.lockstep.request_event_difference import describe_event_difference
from pagedkv.model_tests.lockstep.request_reading import (
    Position,
    RequestReading,
    read_target,
    unchanged_by_failure,
)
from pagedkv.model_tests.lockstep.show import free_count_differs, show_call, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.specs.call import Call
from pagedkv.specs.errors import PagedKVError, UnknownRequestError
from pagedkv.specs.request_types import NULL_BLOCK, KVEvent, Request
from pagedkv.specs.request_view import CachedKey, RequestManagerView
from pagedkv.specs.types import BlockId

T = TypeVar("T")

READ_AGAIN = "after pagedkv read the target's tables and free count"


Pair = tuple[Position, BlockId, BlockId]
"""(where, the model's block there, the target's block there)."""


@dataclass
class IsomorphicRequestSession:
    model: Any
    """The reference (a ``RequestKVManager`` with ``view()``), under the check's profile."""
    target: Any
    steps: list[Step] = field(default_factory=list)
    ids: Bijection = field(default_factory=Bijection)
    ended: bool = False
    """Never set at this level: every request-level call is atomic (``specs/request_level.md``)."""

    def __post_init__(self) -> None:
        self.answers = Answers(self.target, "request")
        self.ids.bind(NULL_BLOCK, NULL_BLOCK)
        self.seen = self._read(self.model.view())
        self.drained: list[KVEvent] = []
        """Events taken from both sides after a call and found equal, for the driver's next
        ``take_events``."""
        self.draining = True

    def _read(self, view: RequestManagerView) -> RequestReading:
        return read_target(self.target, view.requests)

    # --- one call ------------------------------------------------------------------------------

    def call(self, call: Call[Any, T]) -> T | PagedKVError:
        method, args = call.name, call.args
        shown = show_call(method, args)
        before = self.model.view()
        target_call = replace(call, args=self._translate_args(method, args))
        target_result, target_error = run_call(self.target, target_call)
        target_result = self.answers.take(
            target_call, shown, target_result, target_error is not None
        )
        model_result, model_error = run_call(self.model, call)
        if model_error is not None or target_error is not None:
            error = shared_error(shown, (model_result, model_error), (target_result, target_error))
            unchanged_by_failure(shown, error, self.seen, self._read(before))
            self.steps.append(Step(method, args, error))
            return error
        if method == "allocate_slots" and (model_result is None) != (target_result is None):
            raise Divergence(
                f"{shown}: the model returned {show_value(model_result)}, the target"
                f" {show_value(target_result)}"
                + (" (the blocks do not fit)" if model_result is None else "")
            )
        after = self.model.view()
        observed = self._read(after)
        self._align(shown, before, after, observed)
        self._compare_result(method, args, model_result, target_result)
        if method == "take_events":
            model_result = cast(Any, [*self.drained, *cast(list[KVEvent], model_result)])
            self.drained = []
        else:
            self._drain(shown)
        if observed.free != len(after.free_queue):
            raise Divergence(
                free_count_differs(shown, "", len(after.free_queue), observed.free), "count"
            )
        self._unknown_stays_unknown(shown, args, after)
        self.answers.recheck(READ_AGAIN)
        self._forget_free(after)
        self.seen = observed
        self.steps.append(Step(method, args, model_result))
        return cast(T, model_result)

    # --- arguments -----------------------------------------------------------------------------

    def _target_id(self, block: Any) -> Any:
        """A bound id maps; an unbound one maps to a target id that stands for nothing either
        (so a hit naming a block the model holds no content in names none in the target)."""
        if type(block) is not int or block in self.ids.to_target:
            return self.ids.to_target.get(block, block) if type(block) is int else block
        num_blocks = self.model.config.num_blocks
        if not 0 < block < num_blocks:
            return block
        unused = (b for b in range(1, num_blocks) if b not in self.ids.to_model)
        return next(unused, block)

    def _translate_args(self, method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The hit's blocks of ``allocate_slots`` (the model's ids) in the target's ids; values
        of the wrong shape (deliberate misuse) pass unchanged."""
        if method != "allocate_slots" or len(args) < 4 or not isinstance(args[3], list):
            return args
        hit = [
            [self._target_id(b) for b in group] if isinstance(group, list) else group
            for group in args[3]
        ]
        return (*args[:3], hit, *args[4:])

    # --- agreeing on ids -----------------------------------------------------------------------

    def _pairs(self, view: RequestManagerView, observed: RequestReading) -> list[Pair]:
        pairs: list[Pair] = []
        for request_id, table in view.requests.items():
            theirs = observed.tables[request_id]
            if len(theirs) != len(table.blocks):
                raise Divergence(
                    f"request {request_id!r}: the target's table has {len(theirs)} groups, the"
                    f" model's {len(table.blocks)}",
                    "table",
                )
            for group, (mine, their) in enumerate(zip(table.blocks, theirs, strict=True)):
                if len(mine) != len(their):
                    raise Divergence(
                        f"request {request_id!r} group {group}: the model's table has {len(mine)}"
                        f" blocks {list(mine)}, the target's {len(their)} {their}",
                        "table",
                    )
                for index, (m, t) in enumerate(zip(mine, their, strict=True)):
                    pairs.append((Position(request_id, group, index), m, t))
        return pairs

    def _align(
        self,
        shown: str,
        before: RequestManagerView,
        after: RequestManagerView,
        observed: RequestReading,
    ) -> None:
        """Bind the blocks both sides took blank for a new position in this call; every other
        position must keep its pair. Blank blocks are interchangeable, so blocks both sides took
        in one call may pair up otherwise than before (both evicted the same cached blocks in
        another order: their contents are gone on both sides)."""
        model_before = _placed(before)
        target_before = self.seen.placed()
        pairs = self._pairs(after, observed)
        fresh: list[Pair] = []
        for where, mine, theirs in pairs:
            if self.ids.to_target.get(mine) == theirs:
                continue
            if NULL_BLOCK in (mine, theirs):
                raise Divergence(_null_differs(shown, where, mine, theirs), "table")
            new_here = model_before.get(where) != mine
            if not new_here or target_before.get(where) == theirs:
                raise Divergence(self._misplaced(shown, where, mine, theirs, after), "table")
            old_key = _key(before, mine)
            if old_key is not None and _key(after, mine) == old_key:
                raise Divergence(self._not_the_hit(shown, where, mine, theirs), "table")
            fresh.append((where, mine, theirs))
        taken = {mine for _, mine, _ in fresh}
        taken_by_target = {theirs for _, _, theirs in fresh}
        held_after = {mine for _, mine, _ in pairs}
        for where, mine, theirs in fresh:
            evicted = _key(before, mine)
            counterpart = self.ids.to_target.get(mine)
            if (
                evicted is not None
                and counterpart is not None
                and counterpart not in taken_by_target
            ):
                raise Divergence(
                    f"{shown}: at {where} the model evicted its cached block {mine}"
                    f" ({_show_key(evicted)}: no blank block was left), the target took its block"
                    f" {theirs} and kept that content in its block {counterpart}: it holds a blank"
                    " block the model does not (a key it dropped or never cached)",
                    "choice",
                )
            stands_for = self.ids.to_model.get(theirs)
            if stands_for is None or stands_for in taken:
                continue
            if self._blank(stands_for, before, after, held_after):
                continue
            kept = _key(after, stands_for)
            if kept is not None and kept == _key(before, stands_for):
                raise Divergence(
                    f"{shown}: at {where} the target took its block {theirs}, which holds the"
                    f" model's cached block {stands_for} ({_show_key(kept)}), where the model"
                    f" took block {mine}: the model keeps that block cached (the free queue"
                    " hands out blank blocks before cached ones, and cached ones in the order"
                    " they were given back; specs/request_level.md)",
                    "choice",
                )
            raise Divergence(self._misplaced(shown, where, mine, theirs, after), "table")
        for _, mine, theirs in fresh:
            self.ids.unbind_model(mine)
            stale = self.ids.to_model.get(theirs)
            if stale is not None:
                self.ids.unbind_model(stale)
        for where, mine, theirs in fresh:
            if (
                self.ids.to_target.get(mine, theirs) != theirs
                or self.ids.to_model.get(theirs, mine) != mine
            ):
                raise Divergence(self._misplaced(shown, where, mine, theirs, after), "table")
            self.ids.bind(mine, theirs)
        for where, mine, theirs in pairs:
            if self.ids.to_target.get(mine) != theirs:
                raise Divergence(self._misplaced(shown, where, mine, theirs, after), "table")

    def _blank(
        self,
        block: BlockId,
        before: RequestManagerView,
        after: RequestManagerView,
        held_after: set[BlockId],
    ) -> bool:
        """Whether the model's ``block`` holds nothing anyone can still ask for: not in a table,
        and uncached (or its key gone in this call)."""
        if block in held_after:
            return False
        key = _key(after, block)
        return key is None or key != _key(before, block)

    def _misplaced(
        self, shown: str, where: Position, mine: BlockId, theirs: BlockId, view: RequestManagerView
    ) -> str:
        counterpart = self.ids.to_target.get(mine)
        stands_for = self.ids.to_model.get(theirs)
        has = "" if counterpart is None else f" (which stands for the target's {counterpart})"
        what = (
            "which stands for no block of the model's"
            if stands_for is None
            else f"which stands for the model's block {stands_for}"
            + (f", cached as {_show_key(_key(view, stands_for))}" if _key(view, stands_for) else "")
        )
        return (
            f"{shown}: at {where} the model has block {mine}{has}, the target its block"
            f" {theirs}, {what}"
        )

    def _not_the_hit(self, shown: str, where: Position, mine: BlockId, theirs: BlockId) -> str:
        counterpart = self.ids.to_target.get(mine)
        return (
            f"{shown}: at {where} the model placed its cached block {mine} (a hit: the"
            f" target's {counterpart}), the target its block {theirs}: a hit's block is the"
            " cached one the caller was given, not a choice"
        )

    def _forget_free(self, after: RequestManagerView) -> None:
        """Blank free blocks are interchangeable: their correspondence ends there. A cached one
        keeps it (a later hit must name its counterpart)."""
        for block in after.free_queue:
            if _key(after, block) is None:
                self.ids.unbind_model(block)

    def _unknown_stays_unknown(
        self, shown: str, args: tuple[Any, ...], after: RequestManagerView
    ) -> None:
        """A request the model does not know after the call (a ``None`` for a new one, a
        ``free``) is unknown to the target too: it holds no table there."""
        request = args[0] if args else None
        request_id = request.request_id if isinstance(request, Request) else request
        if not isinstance(request_id, str) or request_id in after.requests:
            return
        result, error = run_call(self.target, _get_block_ids(request_id))
        if error is None:
            table = exact_answer(
                "request", "get_block_ids", f"get_block_ids({request_id!r})", result
            )
            raise Divergence(
                f"{shown}: afterwards the model holds no table for request {request_id!r}, but"
                f" the target answers get_block_ids({request_id!r}) with {table}",
                "table",
            )
        if not isinstance(error, UnknownRequestError):
            shared_error(
                f"get_block_ids({request_id!r}) after {shown}",
                (None, UnknownRequestError(request_id)),
                (None, error),
            )

    # --- agreeing on results -------------------------------------------------------------------

    def _in_target(self, blocks: Sequence[Sequence[BlockId]]) -> list[list[BlockId]]:
        return [[self.ids.target_of(b) for b in group] for group in blocks]

    def _compare_result(self, method: str, args: tuple[Any, ...], mine: Any, theirs: Any) -> None:
        shown = show_call(method, args)
        if method == "take_events":
            self._compare_events(shown, mine, theirs)
            return
        if method == "usage" and same_rate(mine, theirs):
            return
        expected: Any = mine
        if method == "get_computed_blocks":
            expected = (self._in_target(mine[0]), mine[1])
            if isinstance(theirs, tuple) and theirs[1] != mine[1]:
                raise Divergence(
                    f"{shown}: the model finds a hit of {mine[1]} tokens, the target"
                    f" {theirs[1]} (the target's answer {show_value(theirs)})"
                )
        elif method in ("allocate_slots", "get_block_ids") and mine is not None:
            expected = self._in_target(mine)
        if expected != theirs:
            ids = "" if expected == mine else f" (in target ids {show_value(expected)})"
            raise Divergence(
                f"{shown}: the model returned {show_value(mine)}{ids}, the target"
                f" {show_value(theirs)}"
            )

    def _compare_events(self, shown: str, mine: list[KVEvent], theirs: list[KVEvent]) -> None:
        """Events carry no block ids, only pagedkv's own values (hashes, parents, tokens): under
        a profile they are the model's, one for one and in order (``specs/request_level.md``
        §4.7, §9). A router reads their contents, so folding into the same keys is not enough."""
        if list(theirs) != list(mine):
            raise Divergence(f"{shown}: {describe_event_difference(mine, theirs)}", "events")

    def _drain(self, shown: str) -> None:
        """Take both sides' events after every call and compare them there, so that a call's
        events are checked even if the driver takes them late or never (the answer a driver
        that took them after every call would get)."""
        if not self.draining:
            return
        mine, _ = run_call(self.model, _take_events())
        theirs, _ = run_call(self.target, _take_events())
        if not isinstance(mine, list) or not isinstance(theirs, list):
            self.draining = False  # the driver's own take_events meets whatever this was
            return
        self._compare_events(f"{shown}, then take_events()", mine, theirs)
        self.drained += cast(list[KVEvent], mine)

    def problems(self) -> list[str]:
        return []


def _take_events() -> Call[Any, Any]:
    return Call("take_events", (), lambda side: side.take_events)


def _get_block_ids(request_id: str) -> Call[Any, Any]:
    return Call("get_block_ids", (request_id,), lambda side: side.get_block_ids)


def _placed(view: RequestManagerView) -> dict[Position, BlockId]:
    return {
        Position(request_id, group, index): block
        for request_id, table in view.requests.items()
        for group, blocks in enumerate(table.blocks)
        for index, block in enumerate(blocks)
    }


def _key(view: RequestManagerView, block: BlockId) -> CachedKey | None:
    found = view.blocks.get(block)
    return None if found is None else found.cached


def _show_key(key: CachedKey | None) -> str:
    if key is None:
        return "uncached"
    return f"group {key.group} hash {key.block_hash.hex()[:8]}…"


def _null_differs(shown: str, where: Position, mine: BlockId, theirs: BlockId) -> str:
    if mine == NULL_BLOCK:
        return (
            f"{shown}: at {where} the model's table points at the null block (a block that left"
            f" the sliding window), the target's at its block {theirs}"
        )
    return (
        f"{shown}: at {where} the target's table points at the null block, the model's at its"
        f" block {mine} (a window releases only blocks wholly before it)"
    )
