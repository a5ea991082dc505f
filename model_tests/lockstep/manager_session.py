"""Sessions: one model, one target, and the rule that says whether they agree after each call.

``ExactManagerSession`` demands the same ids and the same full state (``optimized/``).
``IsomorphicManagerSession`` is the oracle's mode for other engines: it reads the target only
through the protocol (block tables, mappings, counts, errors), compares block ids through a
bijection per device, and where the spec leaves a choice (which free block, which of equally
ranked evictable blocks) makes the model take the target's choice, after the reference has
checked that the choice was allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.bijection import Bijection
from pagedkv.model_tests.lockstep.calls import (
    Divergence,
    call_both,
    comparable,
    run_call,
    shared_error,
)
from pagedkv.model_tests.lockstep.ledger import Ledger
from pagedkv.model_tests.lockstep.observation import Observation, differences, observe
from pagedkv.model_tests.lockstep.places import Place, Slot, cannot_serve, misplaced, not_a_hit
from pagedkv.model_tests.lockstep.show import free_count_differs, show_call, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.reference.allocation import EVICTION_ORDER, Picker, allowed_choices
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.manager_state import lowest_ids, to_manager_view
from pagedkv.reference.pool_state import PoolState, to_view
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.manager_view import ManagerView, SeqView
from pagedkv.specs.operations import OPERATIONS
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import NO_EXTRA_KEY, BlockHash, BlockId, CopyPair, Device, ExtraKey

T = TypeVar("T")
DEVICES = tuple(Device)
"""The devices, as a tuple: every call walks them several times, and iterating an enum class
costs several times as much as iterating a tuple."""


class ManagerSession(Protocol):
    target: Any
    steps: list[Step]
    ledger: Ledger
    ended: bool
    """A failed call left the target in a state nothing defines (a non-atomic policy): the run
    stops."""

    def call(self, call: ManagerCall[T]) -> T | PagedKVError: ...

    def problems(self) -> list[str]: ...


@dataclass
class ExactManagerSession:
    model: ReferenceBlockSpaceManager
    target: Any
    steps: list[Step] = field(default_factory=list)
    ended: bool = False

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.model.config)

    def call(self, call: ManagerCall[T]) -> T | PagedKVError:
        outcome = call_both(self.model, self.target, call, "manager")
        if not isinstance(outcome, PagedKVError):
            self.ledger.record(call.name, call.args)
        self.steps.append(Step(call.name, call.args, outcome))
        return outcome

    def problems(self) -> list[str]:
        if comparable(self.model) != comparable(self.target):
            return ["the target's state differs from the model's (exact mode)"]
        return []


MAX_ATTEMPTS = 6
KEPT_POOL_VIEWS = 4
"""Pool views kept (``_pool_view``): both pools of the state before a call and after it."""
READ_AGAIN = "after pagedkv read the target's tables and free counts"
RATE_TOLERANCE = 1e-9
"""Hit rates are compared within this (relative and absolute) tolerance: an engine may compute
``hits / queries`` another way (vLLM 0.6.3 in buckets of 1000 queries) and land an ulp away."""


@dataclass
class IsomorphicManagerSession:
    model: ReferenceBlockSpaceManager
    target: Any
    steps: list[Step] = field(default_factory=list)
    maps: dict[Device, Bijection] = field(
        default_factory=lambda: {Device.GPU: Bijection(), Device.CPU: Bijection()}
    )
    ended: bool = False

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.model.config)
        self.answers = Answers(self.target, "manager")
        hook = getattr(self.target, "get_null_block", None)  # optional (specs/oracle.md §2)
        self.their_null_block = hook if callable(hook) else None
        self._pool_views: list[tuple[PoolState, PoolView]] = []
        """The last pool states drawn, newest first, each with its view."""
        self._viewed: tuple[object, ManagerView] = (self.model.state, self.model.view())
        self.seen = self.observe(self.model_view())
        self._placed: tuple[object, Observation | None, list[Slot], BlockId | None] = (
            None,
            None,
            [],
            None,
        )
        """The model's state, the observation and the slots the last call ended with, and the
        target's null block as read then (None if not read)."""
        self._null_read: BlockId | None = None
        """The target's null block as ``_positions`` last read it (None if it did not)."""
        self._sequence_places: dict[int, list[Place]] = {}
        """Each sequence's places, made once: every call places every block of both sides'
        tables (a ``Place`` is a value; the same one serves every call)."""
        self._sequence_slots: dict[int, tuple[SeqView, Device, list[BlockId], list[Slot]]] = {}
        """Each sequence's slots as last placed, with the model's sequence (a frozen value) and
        device and the target's table they were placed from: the same three place the same."""

    def model_view(self) -> ManagerView:
        """The model's view, drawn once per state: the reference's states are frozen, so a
        state seen before (the one before this call is the one after the last) has the view
        drawn then."""
        state = self.model.state
        if state is not self._viewed[0]:
            self._viewed = (state, to_manager_view(state, self._pool_view))
        return self._viewed[1]

    def _pool_view(self, pool: PoolState) -> PoolView:
        """A pool's view, drawn once per pool state (a call changes one pool, or none: the
        other pool's state is the same frozen value, and so is its view)."""
        for drawn, view in self._pool_views:
            if drawn is pool:
                return view
        view = to_view(pool)
        self._pool_views = [(pool, view), *self._pool_views[: KEPT_POOL_VIEWS - 1]]
        return view

    # --- looking at the target -----------------------------------------------------------------

    def observe(self, view: ManagerView) -> Observation:
        return observe(self.target, view.seqs, view.groups)

    # --- one call ------------------------------------------------------------------------------

    def call(self, call: ManagerCall[T]) -> T | PagedKVError:
        method, args = call.name, call.args

        def shown() -> str:  # written out only for a message
            return show_call(method, args)

        saved = self.model.state
        before = self.model_view()
        target_result, target_error = run_call(self.target, call)
        target_result = self.answers.take(call, shown, target_result, target_error is not None)
        prefer: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        previous = self._placed_before(before)
        for _ in range(MAX_ATTEMPTS):
            self.model.state = saved
            self.model.pick = self._picker(prefer)
            try:
                # the reference changes no argument, and the target had its own copy
                model_result, model_error = run_call(self.model, call, detach=False)
            finally:
                self.model.pick = lowest_ids
            if model_error is not None or target_error is not None:
                return self._failed(
                    method, args, shown, (model_result, model_error), (target_result, target_error)
                )
            after = self.model_view()
            observed = self.observe(after)
            placed_state, placed_seen, placed_slots, placed_null = self._placed
            released: dict[Device, set[BlockId]]
            if (
                placed_state is self.model.state
                and observed == placed_seen
                and self._read_null(after) == placed_null
            ):
                # neither side changed since the last call ended (most queries): the places are
                # the ones it left (``_positions`` would place them again), and none was
                # released or evicted
                slots, released = placed_slots, {Device.GPU: set(), Device.CPU: set()}
            else:
                slots = self._positions(after, observed)
                released = self._released(previous, after, slots)
                for device, evicted in self._evicted_by_both(before, after, slots).items():
                    released[device] |= evicted
            agreed = self._agreed(slots, released)
            if agreed:
                break  # most calls: nothing to bind, nothing the target evicted otherwise
            wanted = self._align(before, slots, previous, released, bind=False)
            if all(wanted[d] <= prefer[d] for d in DEVICES):
                break
            for device in DEVICES:
                prefer[device] |= wanted[device]
        if not agreed:
            self._align(before, slots, previous, released, bind=True)
        self._compare_result(method, args, before, model_result, target_result)
        self._compare_counts(method, args, after, observed)
        self.answers.recheck(READ_AGAIN)
        self._forget_freed(after)
        self.seen = observed
        self._placed = (self.model.state, observed, slots, self._null_read)
        self.ledger.record(method, args)
        self.steps.append(Step(method, args, model_result))
        return cast(T, model_result)

    def _picker(self, prefer: dict[Device, set[BlockId]]) -> Any:
        def for_device(device: Device) -> Picker:
            def pick(pool: PoolState) -> BlockId | None:
                if not prefer[device]:  # the first attempt: nothing to prefer
                    return None
                chosen = allowed_choices(pool) & prefer[device]
                return min(chosen) if chosen else None

            return pick

        return for_device

    def _failed(
        self,
        method: str,
        args: tuple[Any, ...],
        shown: Callable[[], str],
        model: tuple[Any, BaseException | None],
        target: tuple[Any, BaseException | None],
    ) -> PagedKVError:
        """A call one side or both refused (``shown``: writes the call out, as ``show_call``)."""
        if not self.model.policy.atomic and isinstance(target[1], OutOfBlocksError):
            # The policy lets a call fail midway: the target ran out of blocks (before any check
            # the reference makes first, perhaps), and what is left, seen or not, is undefined.
            self.ended = True
            self.steps.append(Step(method, args, target[1]))
            return target[1]
        try:
            model_error = shared_error(shown, model, target)
        except Divergence as divergence:
            reused = self._reused_across(method, args, model[1], target[1])
            if not reused:
                raise
            raise Divergence(f"{divergence}; {reused}", divergence.kind) from None
        now = self.observe(self.model_view())
        if now != self.seen:
            if self.model.policy.atomic:
                raise Divergence(
                    f"{shown()} raised {model_error!r} but changed the target"
                    " (a failed call must change nothing): "
                    + "; ".join(differences(self.seen, now)),
                    "atomicity",
                )
            self.ended = True  # the policy lets a call fail midway: what is left is undefined
        self.steps.append(Step(method, args, model_error))
        return model_error

    def _reused_across(
        self,
        method: str,
        args: tuple[Any, ...],
        model_error: BaseException | None,
        target_error: BaseException | None,
    ) -> str:
        """When the reference ran out of blocks for an ``allocate`` the target made: the cached
        blocks of the reference's that the target's new tables reuse where they cannot serve as
        a hit (what let it need fewer blocks), in words; ``""`` if none."""
        if method != "allocate" or target_error is not None:
            return ""
        if not isinstance(model_error, OutOfBlocksError) or len(args) < 3:
            return ""
        seq_ids, prompt = args[1], args[2]
        key = args[3] if len(args) > 3 and isinstance(args[3], ExtraKey) else NO_EXTRA_KEY
        view, size = self.model_view(), self.model_view().config.block_size
        try:
            tables = observe(self.target, seq_ids, ()).tables
        except Divergence:
            return ""
        for seq_id in seq_ids:
            for index, block in enumerate(tables.get(seq_id, [])):
                stands_for = self.maps[Device.GPU].to_model.get(block)
                if stands_for is None:
                    continue
                here = prompt[index * size : (index + 1) * size]
                why = cannot_serve(view.gpu.blocks.get(stands_for), key, here, index * size)
                if why:
                    return (
                        f"the target gave sequence {seq_id} block {index} its block {block}, the"
                        f" reference's cached block {stands_for}, but {why}"
                    )
        return ""

    # --- agreeing on ids -----------------------------------------------------------------------

    def _placed_before(self, before: ManagerView) -> list[Slot]:
        """The slots of the model's state and the target's tables as last seen: those the last
        call ended with when neither has changed since (the model's states are frozen, and an
        observation is replaced, never changed), else placed again."""
        state, seen, slots, _ = self._placed
        if state is self.model.state and seen is self.seen:
            return slots
        return self._positions(before, self.seen)

    def _read_null(self, view: ManagerView) -> BlockId | None:
        """The target's null block, read where the model has one and the target shows its own
        (``get_null_block``, optional); None otherwise. Noted as ``_null_read``."""
        hook = self.their_null_block
        self._null_read = hook() if view.null_block is not None and hook else None
        return self._null_read

    def _positions(self, view: ManagerView, observed: Observation) -> list[Slot]:
        """Every (where, device, model id, target id) the two sides' tables put side by side."""
        out: list[Slot] = []
        placed = self._sequence_slots
        for seq_id, seq in view.seqs.items():
            device = view.groups[seq.group_id].device
            theirs = observed.tables[seq_id]
            kept = placed.get(seq_id)
            if kept is not None and kept[0] is seq and kept[1] is device and kept[2] == theirs:
                out += kept[3]  # most sequences, most calls: neither table changed
                continue
            if len(theirs) != len(seq.blocks):
                raise Divergence(
                    f"sequence {seq_id}: the model's table has {len(seq.blocks)} blocks,"
                    f" the target's {len(theirs)} ({theirs})",
                    "table",
                )
            places = self._sequence_places.get(seq_id, [])
            if len(places) < len(theirs):
                places = [Place("sequence", seq_id, i) for i in range(2 * len(theirs))]
                self._sequence_places[seq_id] = places
            # the places may run longer; the two tables' lengths are checked equal above
            slots = [
                (where, device, mine, their)
                for where, mine, their in zip(places, seq.blocks, theirs, strict=False)
            ]
            placed[seq_id] = (seq, device, theirs, slots)
            out += slots
        mine_null = view.null_block
        theirs_null = self._read_null(view)
        if mine_null is not None and theirs_null is not None:  # taking it is a choice as well
            out.append((Place("null", 0, 0), Device.GPU, mine_null, theirs_null))
        for group_id, group in view.groups.items():
            theirs = observed.cross[group_id]
            if len(theirs) != len(group.cross_blocks):
                raise Divergence(
                    f"group {group_id}: cross-attention tables differ in length", "table"
                )
            for index, (mine, their) in enumerate(zip(group.cross_blocks, theirs, strict=True)):
                where = Place("group", group_id, index)
                out.append((where, group.cross_device, mine, their))
        return out

    def _align(
        self,
        before: ManagerView,
        slots: list[Slot],
        previous: list[Slot],
        released: dict[Device, set[BlockId]],
        *,
        bind: bool,
    ) -> dict[Device, set[BlockId]]:
        """Bind new blocks position by position. A target block that stands for an evictable
        model block, at a position where the model put another block, means the target evicted
        it: the model is asked to evict the same one (``wanted``)."""
        wanted: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        maps = {d: Bijection(dict(m.to_target), dict(m.to_model)) for d, m in self.maps.items()}
        for device, blocks in released.items():
            for block in blocks:
                maps[device].unbind_model(block)
        for where, device, mine, theirs in slots:
            ids = maps[device]
            if ids.to_target.get(mine) == theirs:
                continue
            stands_for = ids.to_model.get(theirs)
            if mine not in ids.to_target and stands_for is None:
                if bind:
                    ids.bind(mine, theirs)
                    self.maps[device].rebind(mine, theirs)  # released pairs stay until then
                continue
            if stands_for is not None and stands_for in before.pool(device).evictable:
                wanted[device].add(stands_for)
                if not bind:
                    continue
                hit = not_a_hit(before, self.model_view(), where, device, stands_for)
                raise Divergence(
                    f"{where}: the target took its block {theirs} (the model's cached block"
                    f" {stands_for}) where the model has {mine}: the spec does not allow taking"
                    " that block there (free blocks first, then the evictable ones,"
                    f" {EVICTION_ORDER}; specs/block_pool.md §4)"
                    + (f"; nor can it serve there as a cache hit: {hit}" if hit else ""),
                    "choice",
                )
            if bind:
                raise Divergence(
                    misplaced(self.model_view(), slots, previous, where, ids, mine, theirs), "table"
                )
        return wanted

    def _agreed(self, slots: list[Slot], released: dict[Device, set[BlockId]]) -> bool:
        """Whether every position already holds a bound pair and no pair was released: then
        ``_align`` would bind nothing and want nothing evicted (most calls)."""
        if released[Device.GPU] or released[Device.CPU]:
            return False
        maps = self.maps
        return all(maps[d].to_target.get(mine) == theirs for _, d, mine, theirs in slots)

    @staticmethod
    def _holders(slots: list[Slot]) -> dict[tuple[Device, BlockId, int], set[Place]]:
        """Where each block sits: (device, block, 0 for the model's or 1 for the target's)."""
        held: dict[tuple[Device, BlockId, int], set[Place]] = {}
        for where, device, mine, theirs in slots:
            held.setdefault((device, mine, 0), set()).add(where)
            held.setdefault((device, theirs, 1), set()).add(where)
        return held

    def _released(
        self, previous: list[Slot], after: ManagerView, slots: list[Slot]
    ) -> dict[Device, set[BlockId]]:
        """Pairs both sides released during this call: the model block and its target block each
        left every position it held, and the model block is not kept cached. Within one call a
        released block may be taken again (a window release then an append, a dedup then the
        next block), and which free block is taken is a free choice: their correspondence ends
        here, as it would have at the end of the call.

        Only a model block that left one of its places (``previous``) can have left them all:
        most calls move no block, and are done after one pass over the places."""
        released: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        if previous == slots:  # every place as it was (the queries, most appends): none left
            return released
        now = {where: (mine, theirs) for where, _, mine, theirs in slots}
        nowhere = (None, None)
        left = {
            (device, mine)
            for where, device, mine, _ in previous
            if now.get(where, nowhere)[0] != mine
        }
        if not left:
            return released
        held = self._holders(previous)
        for device, mine in left:
            theirs = self.maps[device].to_target.get(mine)
            if theirs is None or mine in after.pool(device).evictable:
                continue
            was_mine = held[(device, mine, 0)]
            was_theirs = held.get((device, theirs, 1), set())
            if not was_theirs:
                continue
            if any(now.get(w, nowhere)[0] == mine for w in was_mine):
                continue
            if any(now.get(w, nowhere)[1] == theirs for w in was_theirs):
                continue
            released[device].add(mine)
        return released

    def _evicted_by_both(
        self, before: ManagerView, after: ManagerView, slots: list[Slot]
    ) -> dict[Device, set[BlockId]]:
        """Cached blocks both sides evicted during this call: the model block lost its content,
        and its target block sits where no block of that content does. Which position each
        block evicted in the call then serves is not observable (both sides evicted the same
        blocks, their old contents gone on both): their correspondence ends here, as a released
        pair's does. A swap-in evicting two tied blocks in the other order than the reference is
        no divergence; a block only one side evicted still is."""
        evicted: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        for device in DEVICES:
            old, new = before.pool(device), after.pool(device)
            if not old.evictable:
                continue  # nothing cached to evict: most calls (this runs on every one)
            gone = [  # not kept, nor revived as a hit: most calls, none
                (block, content)
                for block in old.evictable
                if block not in new.evictable
                and _content(new, block) != (content := _content(old, block))
            ]
            if not gone:
                continue
            serving: dict[BlockId, set[object]] = {}  # the contents each target block sits at
            for _, where_device, mine, theirs in slots:
                if where_device is device:
                    serving.setdefault(theirs, set()).add(_content(new, mine))
            for block, content in gone:
                counterpart = self.maps[device].to_target.get(block)
                if counterpart in serving and content not in serving[counterpart]:
                    evicted[device].add(block)
        return evicted

    def _forget_freed(self, after: ManagerView) -> None:
        """Free blocks are interchangeable: their correspondence ends when they are freed."""
        for device in DEVICES:
            ids = self.maps[device]
            for block in after.pool(device).free & ids.to_target.keys():
                ids.unbind_model(block)

    # --- agreeing on results -------------------------------------------------------------------

    def _compare_result(
        self, method: str, args: tuple[Any, ...], before: ManagerView, mine: Any, theirs: Any
    ) -> None:
        expected = self._translate(method, args, before, mine, theirs)
        if same_rate(expected, theirs):
            return
        if expected != theirs:
            ids = "" if expected == mine else f" (in target ids {show_value(expected)})"
            raise Divergence(
                f"{show_call(method, args)}: the model returned {show_value(mine)}{ids},"
                f" the target {show_value(theirs)}"
            )

    def _translate(
        self, method: str, args: tuple[Any, ...], before: ManagerView, mine: Any, theirs: Any
    ) -> Any:
        view = self.model_view()
        devices = OPERATIONS["manager"][method].pair_devices
        if devices is not None:
            their_pairs = theirs if isinstance(theirs, list) else []
            padded = [*their_pairs, *[None] * (len(mine) - len(their_pairs))]
            return [self._pair(p, t, *devices) for p, t in zip(mine, padded, strict=False)]
        if method == "get_block_table":
            device = view.groups[view.seqs[args[0]].group_id].device
            return [self.maps[device].target_of(b) for b in mine]
        if method == "get_cross_block_table":
            device = view.groups[args[0]].device
            return [self.maps[device].target_of(b) for b in mine]
        if method == "get_common_computed_block_ids":
            return [self.maps[Device.GPU].target_of(b) for b in mine]
        return mine

    def _pair(self, pair: CopyPair, theirs: Any, source: Device, destination: Device) -> CopyPair:
        """A pair in the target's ids. A block already free again on both sides (a copy
        recorded into a block the call gave back, ``cow_pairs=as_recorded``) stands for any
        free block: the target's id at that place is taken as its counterpart."""
        their = theirs if isinstance(theirs, tuple | list) and len(theirs) == 2 else (None, None)
        return (
            self._block_in_target(pair[0], their[0], source),
            self._block_in_target(pair[1], their[1], destination),
        )

    def _block_in_target(self, block: BlockId, theirs: Any, device: Device) -> BlockId:
        ids = self.maps[device]
        free_now = block in self.model_view().pool(device).free
        if block not in ids.to_target and free_now and theirs not in ids.to_model:
            return theirs  # type: ignore[no-any-return]
        return ids.target_of(block)

    def _compare_counts(
        self, method: str, args: tuple[Any, ...], after: ManagerView, observed: Observation
    ) -> None:
        for device in DEVICES:
            pool = after.pool(device)
            mine = len(pool.free) + len(pool.evictable)
            if observed.free[device] != mine:
                theirs = observed.free[device]
                raise Divergence(
                    free_count_differs(show_call(method, args), device.value, mine, theirs),
                    "count",
                )

    def problems(self) -> list[str]:
        return []


def same_rate(mine: Any, theirs: Any) -> bool:
    """Hit rates agree within ``RATE_TOLERANCE``: an engine may average in buckets (vLLM)."""
    both = isinstance(mine, float) and isinstance(theirs, float)
    return both and math.isclose(mine, theirs, rel_tol=RATE_TOLERANCE, abs_tol=RATE_TOLERANCE)


def _content(pool: PoolView, block: BlockId) -> BlockHash | None:
    """What ``block`` holds as the cache knows it (None for the null block and free ones)."""
    view = pool.blocks.get(block)
    return None if view is None else view.content_hash
