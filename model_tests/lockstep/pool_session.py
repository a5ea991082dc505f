"""The oracle at the block pool level (vLLM-v0-style allocators): one pool, ids through a
bijection, the target's allowed choices adopted.

Every pool operation allocates at most one block and returns the block the caller holds, so the
target's choice is the id it returns: a block that stands for one of the model's cached blocks
means the target evicted that one, and the reference is asked to evict the same (it checks the
choice is allowed); a block that stands for nothing means a free block, and any free block will
do. Block ids in arguments are the model's, translated for the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.bijection import Bijection, Conflict
from pagedkv.model_tests.lockstep.calls import Divergence, exact_answer, run_call, shared_error
from pagedkv.model_tests.lockstep.manager_session import same_rate
from pagedkv.model_tests.lockstep.pool_event_ledger import SameEvents, events_hook
from pagedkv.model_tests.lockstep.pool_reading import (
    PoolReading,
    changes,
    differences,
    hash_of_call,
    read_pool,
    reread,
)
from pagedkv.model_tests.lockstep.show import free_count_differs, show_call, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.errors import InvalidArgumentError, OutOfBlocksError, PagedKVError
from pagedkv.specs.operations import ALLOCATING_POOL_OPERATIONS as ALLOCATING
from pagedkv.specs.operations import OPERATIONS
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import BlockId

T = TypeVar("T")


@dataclass
class IsomorphicPoolSession:
    model: ReferenceBlockPool
    target: Any
    steps: list[Step] = field(default_factory=list)
    ids: Bijection = field(default_factory=Bijection)
    ended: bool = False
    """A call failed midway under a non-atomic policy (``atomic=false``): what the target holds
    is undefined, and the run stops."""

    def __post_init__(self) -> None:
        self.answers = Answers(self.target, "pool")
        self.events = SameEvents(self.model.take_events, events_hook(self.target))

    def call(self, call: PoolCall[T]) -> T | PagedKVError:
        method, args = call.name, call.args
        shown = show_call(method, args)
        target_call = replace(call, args=self._translate_args(method, args))
        before = self.model.view()
        reading = self._read(method, args, before)
        target_result, target_error = run_call(self.target, target_call)
        target_result = self.answers.take(
            target_call, shown, target_result, target_error is not None
        )
        kwargs: dict[str, Any] = {}
        if method in ALLOCATING and target_error is None:
            kwargs["choice"] = self._choice(target_result)
        model_result, model_error = run_call(self.model, call, **kwargs)
        both_ran_out = isinstance(model_error, OutOfBlocksError)
        if (
            isinstance(target_error, OutOfBlocksError)
            and both_ran_out
            and not self.model.policy.atomic
        ):
            # Both ran out, and the policy lets a call fail midway (vLLM 0.6.3's copy-on-write
            # gives back its source before it takes a new block): what the target holds now is
            # undefined.
            self.ended = True
            self.steps.append(Step(method, args, target_error))
            return target_error
        if isinstance(model_error, InvalidArgumentError) and "choice" in kwargs:
            raise Divergence(
                f"{show_call(method, args)}: the target's choice is not allowed: {model_error}",
                "choice",
            )
        if model_error is not None or target_error is not None:
            model_error = shared_error(
                show_call(method, args),
                (model_result, model_error),
                (target_result, target_error),
            )
            changed = changes(reading, reread(self.target, reading), self._name)
            if changed:
                raise Divergence(
                    f"{show_call(method, args)} raised {type(model_error).__name__} but changed"
                    " the target (a failed call must change nothing): " + "; ".join(changed),
                    "atomicity",
                )
            self.events.check(shown)
            self.steps.append(Step(method, args, model_error))
            return model_error
        self._compare(method, args, model_result, target_result, before)
        differ = differences(self.model.view(), self.target, self.ids.to_target, self._name)
        if differ:
            raise Divergence(
                f"{show_call(method, args)}: afterwards the target reads otherwise than the"
                " model (the model's value -> the target's): " + "; ".join(differ),
                "block",
            )
        self.answers.recheck("after pagedkv read the target's free count and blocks")
        self.events.check(shown)
        self.steps.append(Step(method, args, model_result))
        return cast(T, model_result)

    def _read(self, method: str, args: tuple[Any, ...], before: PoolView) -> PoolReading:
        """What the protocol shows of the target now: the free count, every block that stands
        for one of the model's, and the lookup of every cached hash and of the one the call
        would cache."""
        hashes = set(before.cached)
        size = self.model.config.block_size
        would_cache = hash_of_call(
            method, args, size, lambda b: before.blocks[b].tokens if b in before.blocks else None
        )
        if would_cache is not None:
            hashes.add(would_cache)
        return read_pool(self.target, self.ids.to_model, hashes)

    def _name(self, block: BlockId) -> str:
        """A target block as a report names it: its id, and the model's block it stands for."""
        stands_for = self.ids.to_model.get(block)
        return str(block) if stands_for is None else f"{block} (the model's {stands_for})"

    def _choice(self, target_block: Any) -> BlockId | None:
        stands_for = self.ids.to_model.get(target_block)
        if stands_for is not None and stands_for in self.model.view().evictable:
            return stands_for
        return None

    def _compare(
        self, method: str, args: tuple[Any, ...], mine: Any, theirs: Any, before: PoolView
    ) -> None:
        """Free blocks keep their correspondence until taken again (a pending copy may still
        name one as its source); taking one rebinds it, any other block must match."""
        if method in ALLOCATING and mine in before.free:
            self.ids.rebind(mine, theirs)
        elif method in ALLOCATING:
            try:
                self.ids.bind(mine, theirs)
            except Conflict as conflict:
                raise Divergence(
                    self._wrong_block(method, args, mine, theirs, before, conflict), "result"
                ) from None
        expected = self._translate_result(method, mine)
        if expected != theirs and not (method == "hit_rate" and same_rate(expected, theirs)):
            ids = "" if expected == mine else f" (in target ids {show_value(expected)})"
            raise Divergence(
                f"{show_call(method, args)}: the model returned {show_value(mine)}{ids},"
                f" the target {show_value(theirs)}"
            )
        mine_free = self.model.num_free_blocks()
        their_free = exact_answer(
            "pool", "num_free_blocks", "num_free_blocks()", self.target.num_free_blocks()
        )
        if mine_free != their_free:
            raise Divergence(
                free_count_differs(show_call(method, args), "", mine_free, their_free),
                "count",
            )

    def _wrong_block(
        self,
        method: str,
        args: tuple[Any, ...],
        mine: BlockId,
        theirs: BlockId,
        before: PoolView,
        conflict: Conflict,
    ) -> str:
        """Why the block the target answered cannot be the one the model answered, in words:
        what the model's answer is, and what the target's block already stands for."""
        if mine in before.cached.values():
            what = f"the block already cached for this content (the model's {mine}"
        elif method in ("append_tokens", "cow_if_not_appendable") and args[0] == mine:
            what = f"the block the caller passed, kept since it needed no copy (the model's {mine}"
        else:
            what = f"the model's block {mine} (which it already held"
        counterpart = conflict.target_has
        what += "" if counterpart is None else f", the target's {counterpart}"
        stands = conflict.model_has
        if stands is None:
            theirs_is = "which stands for no block of the model's"
        elif method in ("append_tokens", "cow_if_not_appendable") and args[0] == stands:
            theirs_is = f"the block the caller passed (the model's {stands}), kept"
        else:
            theirs_is = (
                f"which stands for the model's block {stands} (before the call:"
                f" {_contents(before, stands)})"
            )
        why = ""
        if mine in before.cached.values():
            why = (
                ": content already cached is not held twice (a hit, or a dedup when a block"
                " fills; specs/block_pool.md §5, the profile's promotion option)"
            )
        return (
            f"{show_call(method, args)}: the target answered its block {theirs}, {theirs_is};"
            f" the answer must be {what}){why}"
        )

    def _target_id(self, block: Any) -> Any:
        """A bound id maps; a free one maps to a block the target does not use either."""
        if not isinstance(block, int) or block in self.ids.to_target:
            return self.ids.to_target.get(block, block)
        ids = self.model.config.block_ids
        if block not in ids:
            return block
        unused = [b for b in ids if b not in self.ids.to_model]
        return unused[0] if unused else block

    def _translate_args(self, method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Block ids in arguments (by their kind in ``pagedkv.specs.operations``) in target ids;
        values of the wrong shape (deliberate misuse) pass unchanged."""
        operation = OPERATIONS["pool"].get(method)
        if operation is None:
            return args
        out = list(args)
        for index, (param, arg) in enumerate(zip(operation.params, args, strict=False)):
            if param.kind == "block":
                out[index] = self._target_id(arg)
            elif param.kind == "blocks" and isinstance(arg, list):
                out[index] = [self._target_id(b) for b in arg]
            elif param.kind == "chains" and isinstance(arg, list):
                out[index] = [[self._target_id(b) for b in chain] for chain in arg]
        return tuple(out)

    def _translate_result(self, method: str, mine: Any) -> Any:
        to_target = self.ids.target_of
        kind = OPERATIONS["pool"][method].result
        if kind == "block":
            return to_target(mine)
        if kind == "blocks":
            return [to_target(b) for b in mine]
        if kind == "pairs":
            return [(to_target(s), to_target(d)) for s, d in mine]
        return mine

    def problems(self) -> list[str]:
        return []


def _contents(view: PoolView, block: BlockId) -> str:
    """What a block holds, in a few words."""
    found = view.blocks.get(block)
    if found is None:
        return "not a block of the pool"
    if found.ref_count == 0 and found.content_hash is None:
        return "free"
    cached = ", cached" if found.content_hash is not None else ""
    held = f"{found.ref_count} holder{'' if found.ref_count == 1 else 's'}"
    return f"tokens {list(found.tokens)}, {held}{cached}"
