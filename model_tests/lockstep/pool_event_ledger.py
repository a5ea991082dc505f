"""A pool's KV events, held to what a router relies on (``specs/block_pool.md`` §9).

Both tiers drain the target's optional ``take_events`` after every call. Against the reference
(exact and isomorphic modes) the events must be the reference's, in order: event streams name
hashes, never block ids, so no translation is needed. The safety tier has no reference: it folds
the stream into a router's view, as a router would, and holds it to the calls and to the
target's own ``lookup``:

- every ``BlockStored`` names a full block some call committed (``allocate_immutable``, or an
  ``append_tokens`` that filled its block), with its parent (``None`` at a sequence's start), its
  tokens, the block size and its LoRA id; a parent committed to the pool since the last clear
  was stored before it (the caller names a prefix: a parent it never committed here is not the
  pool's to announce);
- a block handed out blank carries no announced hash: that hash needed a ``BlockRemoved``;
- after every call the view is the cache: every hash announced is found by ``lookup``, and
  every hash a call committed that ``lookup`` finds is announced;
- a reset that succeeds leaves nothing announced (``AllBlocksCleared``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import cast

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.request_event_ledger import CommittedBlock
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.interface import PoolEvents
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import BlockHash, BlockId, Token

TakeEvents = Callable[[], list[KVEvent]]


def events_hook(target: object) -> TakeEvents | None:
    """The target's ``take_events``, the one optional member of the pool protocol
    (``PoolEvents`` in ``specs/interface.py``); a target without it is checked as before."""
    hook = getattr(target, "take_events", None)
    if not callable(hook):
        return None
    return cast(PoolEvents, target).take_events


@dataclass
class SameEvents:
    """The exact and isomorphic modes: the target publishes what the reference does."""

    model: TakeEvents
    target: TakeEvents | None

    def check(self, shown: str) -> None:
        """Drain both after ``shown``; a difference is a divergence of kind ``events``."""
        mine = self.model()
        if self.target is None:
            return
        theirs = self.target()
        if list(theirs) != mine:
            raise Divergence(
                f"{shown}: the model published the KV events {show_events(mine)}, the target"
                f" {show_events(theirs)}",
                "events",
            )


@dataclass
class PoolEventLedger:
    """The safety tier's router: the hashes the events so far announce, and for each block
    the hash last announced for it."""

    block_size: int
    committed: dict[BlockHash, CommittedBlock] = field(default_factory=dict)
    announced: Counter[BlockHash] = field(default_factory=Counter)
    stored_since_clear: set[BlockHash] = field(default_factory=set)
    committed_since_clear: set[BlockHash] = field(default_factory=set)
    """A parent the caller never committed to this pool is the caller's to answer for: only
    one it did must be stored before its children."""
    announced_for: dict[BlockId, BlockHash] = field(default_factory=dict)

    def commit(self, prefix: Prefix, tokens: Sequence[Token]) -> BlockHash:
        """Remember a full block a call was passed; its hash."""
        digest = prefix.child_hash(tokens)
        parent = None if prefix.num_tokens == 0 else prefix.hash
        self.committed[digest] = CommittedBlock(tuple(tokens), parent, prefix.extra_key.lora_id)
        self.committed_since_clear.add(digest)
        return digest

    def read(
        self,
        events: Sequence[KVEvent],
        block: BlockId | None,
        fresh: bool,
        cached_hash: BlockHash | None,
    ) -> list[str]:
        """Fold the events of one call that answered ``block`` (``fresh``: nobody held it
        before; ``cached_hash``: the hash the call committed, if any); what misleads a router."""
        problems: list[str] = []
        for item in events:
            if isinstance(item, AllBlocksCleared):
                self.announced.clear()
                self.announced_for.clear()
                self.stored_since_clear.clear()
                self.committed_since_clear.clear()
            elif isinstance(item, BlockRemoved):
                problems += self._removed(item, block)
            elif isinstance(item, BlockStored):
                problems += self._stored(item, block)
            else:
                problems.append(f"take_events answered {item!r}, not a KV event")
        stale = self.announced_for.get(block) if fresh and block is not None else None
        if stale is not None and stale != cached_hash:
            problems.append(
                f"block {block} was handed out blank, yet hash {show_hash(stale)}, announced"
                " for it, was never removed (a missing BlockRemoved)"
            )
        return problems

    def agrees(self, lookup: Callable[[BlockHash], object], reset: bool) -> list[str]:
        """The view is the cache: what ``lookup`` finds, among the hashes announced or
        committed (``reset``: a reset has just succeeded)."""
        announced = [h for h, count in self.announced.items() if count > 0]
        if reset and announced:
            return [
                f"the reset succeeded, yet {len(announced)} hash(es) are still announced (a"
                " missing AllBlocksCleared)"
            ]
        problems = [
            f"hash {show_hash(h)} is announced, but the target no longer caches it (a missing"
            " BlockRemoved)"
            for h in announced
            if lookup(h) is None
        ]
        problems += [
            f"the target caches hash {show_hash(h)} (tokens {list(block.tokens)}), which no"
            " event announces (a missing BlockStored)"
            for h, block in self.committed.items()
            if self.announced[h] <= 0 and lookup(h) is not None
        ]
        return problems

    def _removed(self, item: BlockRemoved, block: BlockId | None) -> list[str]:
        problems = []
        for digest in item.block_hashes:
            if self.announced[digest] <= 0:
                problems.append(
                    f"BlockRemoved of hash {show_hash(digest)}, which no event announces"
                )
                continue
            self.announced[digest] -= 1
            holders = [b for b, h in self.announced_for.items() if h == digest]
            gone = block if block in holders else (holders[0] if holders else None)
            if gone is not None:
                del self.announced_for[gone]
        return problems

    def _stored(self, item: BlockStored, block: BlockId | None) -> list[str]:
        problems = self._misnamed(item)
        previous = self.announced_for.get(block) if block is not None else None
        for digest in item.block_hashes:
            if previous is not None and previous != digest:
                problems.append(
                    f"{show_stored(item)} announces block {block}, still announced under hash"
                    f" {show_hash(previous)} (a missing BlockRemoved)"
                )
            self.announced[digest] += 1
            self.stored_since_clear.add(digest)
            if block is not None:
                self.announced_for[block] = digest
        return problems

    def _misnamed(self, item: BlockStored) -> list[str]:
        """One run of full committed blocks, the parent of the first stored before it, exactly
        their tokens, block size and LoRA id."""
        head = show_stored(item)
        if not item.block_hashes:
            return [f"{head} names no block"]
        if item.block_size != self.block_size:
            return [f"{head} is in blocks of {item.block_size}, not {self.block_size}"]
        unknown = [h for h in item.block_hashes if h not in self.committed]
        if unknown:
            short = len(item.token_ids) < self.block_size * len(item.block_hashes)
            why = " (stored before the block was full?)" if short else ""
            return [
                f"{head} (tokens {list(item.token_ids)}) names hash {show_hash(unknown[0])}: no"
                f" call committed a full block that hashes so{why}"
            ]
        blocks = [self.committed[h] for h in item.block_hashes]
        problems = []
        if any(blocks[j].parent != item.block_hashes[j - 1] for j in range(1, len(blocks))):
            problems.append(f"{head} names blocks that are not one run")
        if item.parent_hash != blocks[0].parent:
            problems.append(
                f"{head} gives its block the parent {show_hash(item.parent_hash)}, not"
                f" {show_hash(blocks[0].parent)}"
            )
        elif (
            item.parent_hash in self.committed_since_clear
            and item.parent_hash not in self.stored_since_clear
        ):
            problems.append(
                f"{head} comes before its parent {show_hash(item.parent_hash)}, committed to"
                " this pool, was stored (parents before children)"
            )
        tokens = [token for block in blocks for token in block.tokens]
        if list(item.token_ids) != tokens:
            problems.append(f"{head} names the tokens {list(item.token_ids)}, not {tokens}")
        if item.lora_id != blocks[0].lora_id:
            problems.append(f"{head} names LoRA id {item.lora_id}, not {blocks[0].lora_id}")
        return problems


def fresh_block(block: object, held_before: Collection[BlockId]) -> bool:
    """Whether a call's answer is a block nobody held before it."""
    return isinstance(block, int) and block not in held_before


def show_hash(digest: BlockHash | None) -> str:
    return "none" if digest is None else digest.hex()[:8] + "…"


def show_stored(item: BlockStored) -> str:
    hashes = ", ".join(show_hash(h) for h in item.block_hashes)
    return f"BlockStored([{hashes}], parent {show_hash(item.parent_hash)})"


def show_events(events: Sequence[KVEvent]) -> str:
    """Events in a few words each."""
    shown = []
    for item in events:
        if isinstance(item, BlockStored):
            shown.append(f"{show_stored(item)} tokens {list(item.token_ids)}")
        elif isinstance(item, BlockRemoved):
            shown.append(f"BlockRemoved([{', '.join(show_hash(h) for h in item.block_hashes)}])")
        else:
            shown.append(repr(item))
    return "[" + "; ".join(shown) + "]" if shown else "[] (none)"
