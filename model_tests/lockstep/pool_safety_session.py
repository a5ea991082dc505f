"""The safety tier at the pool level: a target pool held to what every correct pool guarantees,
read through the pool protocol alone (``specs/safety.md``).

The session keeps, per block, what each holder put in it: the prefix it named and its tokens,
learnt from the calls themselves (an allocation, an append, a fork, a copy-on-write, a free).
After every call:

- S1 no aliasing: every holder of a block names the same prefix and extra key and agrees on the
  tokens both hold; a freshly allocated block had no holder; nothing is appended in place into a
  block somebody else holds (that is what copy-on-write is for);
- S2 accounting: the free count is the total minus the distinct blocks held (and the pool's own
  null block, where the target names it with ``get_null_block()``);
- S4 copy-on-write pairs: no block receives two different sources, and a copy lands only where
  what it carries agrees with what the block's holders now hold (a copy into a block nobody holds
  is harmless; one into a block handed out blank since, and written, would overwrite data);
- the KV events, where the target publishes them (``take_events``): folded into a router's view
  and held to the calls and the target's ``lookup`` (``pool_event_ledger.py``);
- S6 typed errors; after a failed call an atomic target (``atomic = True``) shows the same free
  count, and where it offers ``block()`` and ``lookup`` the same held blocks and cached hashes
  (``pool_reading.py``); a target that is not may have changed anything, so the run ends there.

KV data is checked at the manager level, where a step's copies and writes are defined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import (
    Divergence,
    DivergenceKind,
    exact_answer,
    run_call,
)
from pagedkv.model_tests.lockstep.pool_event_ledger import (
    PoolEventLedger,
    events_hook,
    fresh_block,
    show_events,
)
from pagedkv.model_tests.lockstep.pool_reading import (
    PoolReading,
    block_of_call,
    changes,
    hash_of_call,
    read_pool,
    reread,
)
from pagedkv.model_tests.lockstep.show import show_call, show_error
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.operations import OPERATIONS
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.types import BlockId, CopyPair, PoolConfig, Token

T = TypeVar("T")


@dataclass(frozen=True)
class Holding:
    """What one holder has put in a block: the prefix it named (None before its first append
    to a mutable block) and its tokens."""

    prefix: Prefix | None
    tokens: tuple[Token, ...]

    def conflict(self, other: Holding) -> str:
        mine, theirs = self.prefix, other.prefix
        if mine is not None and theirs is not None:
            if (mine.hash, mine.num_tokens) != (theirs.hash, theirs.num_tokens):
                return "after different prefixes"
            if mine.extra_key != theirs.extra_key:
                return "under different extra keys"
        both = min(len(self.tokens), len(other.tokens))
        if self.tokens[:both] != other.tokens[:both]:
            return f"with different tokens ({list(self.tokens)} and {list(other.tokens)})"
        return ""


@dataclass
class PoolSafetySession:
    target: Any
    config: PoolConfig
    steps: list[Step] = field(default_factory=list)
    ended: bool = False

    def __post_init__(self) -> None:
        self.atomic = bool(getattr(self.target, "atomic", False))
        self.holders: dict[BlockId, list[Holding]] = {}
        self.carried: dict[BlockId, Holding] = {}
        """What a copy into each block carries, for the blocks a holder moved into since the last
        ``clear_copy_on_writes`` (the holder's contents just before the move)."""
        self.answers = Answers(self.target, "pool")
        self.take_events = events_hook(self.target)
        self.ledger = PoolEventLedger(self.config.block_size)

    def null_block(self) -> BlockId | None:
        get = getattr(self.target, "get_null_block", None)
        return get() if callable(get) else None

    def call(self, call: PoolCall[T]) -> T | PagedKVError:
        method, args = call.name, call.args
        shown = show_call(method, args)
        reading = self._read(method, args)
        held_before = set(self.holders)
        filled = block_of_call(method, args, self.config.block_size, self._tokens_of)
        result, error = run_call(self.target, call)
        result = self.answers.take(call, shown, result, error is not None)
        events = [] if self.take_events is None else self.take_events()
        if error is not None and events and self.atomic:
            raise Divergence(
                f"{shown} raised {type(error).__name__}, yet published the KV events"
                f" {show_events(events)} (a failed call changes nothing)",
                "events",
            )
        if error is not None:
            if not isinstance(error, PagedKVError):
                raise Divergence(
                    f"{show_call(method, args)}: the target raised an untyped {show_error(error)}",
                    "untyped",
                )
            if not self.atomic and isinstance(error, OutOfBlocksError):
                self.ended = True
            elif changed := changes(reading, reread(self.target, reading)):
                if self.atomic:
                    raise Divergence(
                        f"{show_call(method, args)} raised {type(error).__name__}, but the"
                        " target, which declares itself atomic, changed: " + "; ".join(changed),
                        "atomicity",
                    )
                self.ended = True
            self.steps.append(Step(method, args, error))
            return error
        self._learn(method, result, args)
        findings = self.findings()
        if self.take_events is not None:
            findings += self._event_findings(method, result, events, held_before, filled)
        if findings:
            shown = show_call(method, args)
            raise Divergence(
                f"{shown}: " + "; ".join(message for _, message in findings),
                parts=[(kind, f"{shown}: {message}") for kind, message in findings],
            )
        self.answers.recheck("after pagedkv read the target's free count")
        self.steps.append(Step(method, args, result))
        return cast(T, result)

    def _read(self, method: str, args: tuple[Any, ...]) -> PoolReading:
        """The free count; for a target that declares itself atomic, also every held block and
        the lookup of every full block's hash and of the one the call would cache."""
        if not self.atomic:
            return read_pool(self.target, (), ())
        size = self.config.block_size
        hashes = {
            holding.prefix.child_hash(holding.tokens)
            for holdings in self.holders.values()
            for holding in holdings[:1]
            if holding.prefix is not None and len(holding.tokens) == size
        }
        would_cache = hash_of_call(method, args, size, self._tokens_of)
        if would_cache is not None:
            hashes.add(would_cache)
        return read_pool(self.target, self.holders, hashes)

    def _tokens_of(self, block: BlockId) -> tuple[Token, ...] | None:
        holdings = self.holders.get(block)
        return holdings[0].tokens if holdings else None

    # --- what each call does to the holdings -----------------------------------------------------

    def _learn(self, method: str, result: Any, args: tuple[Any, ...]) -> None:
        """What a call that succeeded did to the holdings (the queries change nothing)."""
        if method == "allocate_mutable":
            self._allocate_mutable(result)
        elif method == "allocate_immutable":
            self._allocate_immutable(result, *args)
        elif method == "append_tokens":
            self._append_tokens(result, *args)
        elif method == "free":
            self._take(args[0])
        elif method == "fork":
            self._fork(args[0])
        elif method == "cow_if_not_appendable":
            self._cow_if_not_appendable(result, *args)
        elif method == "clear_copy_on_writes":
            self._clear_copy_on_writes(result)

    def _take(self, block: BlockId) -> Holding:
        """One holding of ``block`` leaves it (they are all alike, or a problem was reported)."""
        found = self.holders.get(block)
        if not found:
            raise Divergence(f"the target's block {block} is used, but nobody holds it", "aliasing")
        holding = found.pop()
        if not found:
            del self.holders[block]
        return holding

    def _moved(self, block: BlockId, old: BlockId, holding: Holding) -> None:
        """A holder moved to a block nobody held: a fresh copy of what it had (or a cached block
        that starts with it), so a copy into ``block`` may carry ``holding``."""
        if block != old and not self.holders.get(block):
            self.carried[block] = holding

    def _give(self, block: BlockId, holding: Holding) -> None:
        self.holders.setdefault(block, []).append(holding)

    def _allocate_mutable(self, block: BlockId) -> None:
        if self.holders.get(block):
            raise Divergence(
                f"allocate_mutable() gave block {block}, which {len(self.holders[block])} holder(s)"
                " still hold: a new block must be one nobody holds",
                "aliasing",
            )
        self._give(block, Holding(None, ()))

    def _allocate_immutable(self, block: BlockId, prefix: Prefix, tokens: Sequence[Token]) -> None:
        self._give(block, Holding(prefix, tuple(tokens)))

    def _append_tokens(
        self, block: BlockId, old: BlockId, prefix: Prefix, tokens: Sequence[Token]
    ) -> None:
        others = len(self.holders.get(old, ())) - 1
        if block == old and others > 0:
            raise Divergence(
                f"append_tokens({old}, ...) wrote into block {old} in place while {others} other"
                " holder(s) hold it: a shared block must be copied before it is written",
                "aliasing",
            )
        holding = self._take(old)
        self._moved(block, old, holding)
        self._give(block, replace(holding, prefix=prefix, tokens=(*holding.tokens, *tokens)))

    def _fork(self, chain: Sequence[BlockId]) -> None:
        for block in chain:
            found = self.holders.get(block)
            if not found:
                raise Divergence(f"fork shared block {block}, which nobody holds", "aliasing")
            self._give(block, found[0])

    def _cow_if_not_appendable(self, block: BlockId, old: BlockId) -> None:
        holding = self._take(old)
        self._moved(block, old, holding)
        self._give(block, holding)

    def _clear_copy_on_writes(self, pairs: list[CopyPair]) -> None:
        sources_of: dict[BlockId, set[BlockId]] = {}
        for source, destination in pairs:
            sources_of.setdefault(destination, set()).add(source)
        twice = {d: sorted(s) for d, s in sources_of.items() if len(s) > 1}
        if twice:
            raise Divergence(
                f"clear_copy_on_writes(): blocks receive two sources: {twice}", "pairs"
            )
        clobbered = [d for d in sources_of if self._clobbers(d)]
        if clobbered:
            raise Divergence(
                f"clear_copy_on_writes(): copies into {clobbered}, whose holders now hold other"
                " data than those copies carry: the copies would overwrite it",
                "pairs",
            )
        self.carried.clear()

    def _clobbers(self, block: BlockId) -> bool:
        holders = self.holders.get(block, [])
        carried = self.carried.get(block)
        if carried is None:
            return bool(holders)
        return any(carried.conflict(holding) for holding in holders)

    # --- the checks ----------------------------------------------------------------------------

    def _event_findings(
        self,
        method: str,
        result: Any,
        events: list[Any],
        held_before: set[BlockId],
        filled: tuple[Prefix, tuple[Token, ...]] | None,
    ) -> list[tuple[DivergenceKind, str]]:
        """The call's events folded into the router's view, and the view against the cache."""
        committed = None if filled is None else self.ledger.commit(*filled)
        answers_block = OPERATIONS["pool"][method].result == "block"
        block = result if answers_block else None
        problems = self.ledger.read(events, block, fresh_block(block, held_before), committed)
        lookup = getattr(self.target, "lookup", None)
        if callable(lookup):
            reset = method == "reset_prefix_cache" and result is True
            problems += self.ledger.agrees(lookup, reset)
        return [("events", problem) for problem in problems]

    def problems(self) -> list[str]:
        return [message for _, message in self.findings()]

    def findings(self) -> list[tuple[DivergenceKind, str]]:
        """S1 and S2 as they stand now, each finding with its kind."""
        found: list[tuple[DivergenceKind, str]] = []
        for block, holdings in self.holders.items():
            for other in holdings[1:]:
                why = holdings[0].conflict(other)
                if why:
                    found.append(("aliasing", f"block {block} is held twice {why}"))
        null = self.null_block()
        held = len(self.holders) + (1 if null is not None and null not in self.holders else 0)
        expected = self.config.num_blocks - held
        free = exact_answer(
            "pool", "num_free_blocks", "num_free_blocks()", self.target.num_free_blocks()
        )
        if free != expected:
            what = "a block is leaked" if free < expected else "a held block is counted free"
            found.append(
                (
                    "accounting",
                    f"the target reports {free} free blocks, but {held} of"
                    f" {self.config.num_blocks} are held, which leaves {expected}: {what}",
                )
            )
        return found
