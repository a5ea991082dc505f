"""What a router relies on in a request-level manager's KV events, checked under the safety tier
(``specs/safety.md``, "The request level"; ``specs/request_level.md`` §4.7, §9) from the calls
alone.

A router keeps the keys the events announce and sends a request where its prefix is cached; it
reads each ``BlockStored``'s hashes, parent and tokens. So, whatever the policy:

- every ``BlockStored`` names a run of blocks some request committed, with exactly their
  hashes, the parent of the first and their tokens (recomputed here from the requests seen);
- the announced keys never claim a key the target cannot hit: a block handed out blank while a
  key it was announced for is still announced means a ``BlockRemoved`` is missing, and a block
  announced before its tokens were computed claims data it does not hold;
- they never hide one it can: every block of a hit is cached under a key announced and not
  removed since.

The session drains ``take_events()`` after every call, so that each event is read beside the
call that caused it (an allocation's stored blocks are the ones its table holds at their
indices); the events drained are handed back, in order, when the driver takes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pagedkv.model_tests.lockstep.calls import DivergenceKind
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    Request,
)
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import BlockHash, BlockId, Token

Finding = tuple[DivergenceKind, str]


@dataclass(frozen=True)
class CommittedBlock:
    """A full block of committed tokens some request was passed with."""

    tokens: tuple[Token, ...]
    parent: BlockHash | None
    """The hash of the block before it, ``None`` at a request's start."""
    lora_id: int | None


@dataclass(frozen=True)
class Allocation:
    """The ``allocate_slots`` call whose events are being read: its request, the request's
    table afterwards, the blocks it handed out blank, and how many tokens are computed once the
    step runs."""

    request: Request
    table: Sequence[Sequence[BlockId]]
    new_blocks: frozenset[BlockId]
    computed: int


@dataclass
class EventLedger:
    block_size: int
    committed: dict[BlockHash, CommittedBlock] = field(default_factory=dict)
    announced: Counter[CachedKey] = field(default_factory=Counter)
    """The keys the events so far add up to (a key two blocks cache counts twice)."""
    holders: dict[CachedKey, list[BlockId | None]] = field(default_factory=dict)
    """For each announced key, the blocks it was announced for (``None``: not known)."""

    def learn(self, request: Request) -> None:
        """Remember every full block of committed tokens of ``request``."""
        size = self.block_size
        chain = request_block_hashes(request, size)
        for index, digest in enumerate(chain):
            self.committed[digest] = CommittedBlock(
                tuple(request.tokens[index * size : (index + 1) * size]),
                chain[index - 1] if index else None,
                request.extra_key.lora_id,
            )

    def read(self, events: Sequence[KVEvent], allocation: Allocation | None) -> list[Finding]:
        """Fold the events one call caused (each stored key announced, right or wrong, as a
        router would); what a router would be misled by, in words (kind ``kv`` for a block
        cached that holds no committed tokens, else ``events``)."""
        problems: list[Finding] = []
        stored_now: set[tuple[CachedKey, BlockId]] = set()
        for item in events:
            if isinstance(item, AllBlocksCleared):
                self.announced.clear()
                self.holders.clear()
            elif isinstance(item, BlockRemoved):
                problems += _events(self._removed(item, allocation))
            elif isinstance(item, BlockStored):
                uncommitted = [h for h in item.block_hashes if h not in self.committed]
                if uncommitted:
                    problems.append(("kv", self._uncommitted(item, uncommitted[0])))
                else:
                    problems += _events(self._misnamed(item))
                problems += _events(self._stored(item, allocation, stored_now))
            else:
                problems.append(("events", f"take_events answered {item!r}, not a KV event"))
        if allocation is not None:
            problems += _events(self._stale(allocation, stored_now))
        return problems

    def _uncommitted(self, item: BlockStored, digest: BlockHash) -> str:
        return (
            f"{_show_stored(item)} names hash {digest.hex()[:8]}…: no request was passed a full"
            " block of committed tokens that hashes so (a draft or lookahead token cached?)"
        )

    def _misnamed(self, item: BlockStored) -> list[str]:
        """§4.7: one run of consecutive blocks (all committed: ``read`` checked), the parent of
        the first, exactly their tokens."""
        head = _show_stored(item)
        if not item.block_hashes:
            return [f"{head} names no block (tokens {list(item.token_ids)})"]
        if item.block_size != self.block_size:
            return [f"{head} is in blocks of {item.block_size}, not {self.block_size}"]
        blocks = [self.committed[digest] for digest in item.block_hashes]
        problems = []
        if any(
            blocks[j].parent != item.block_hashes[j - 1] for j in range(1, len(item.block_hashes))
        ):
            problems.append(f"{head} names blocks that are not one run")
        if item.parent_hash != blocks[0].parent:
            problems.append(
                f"{head} gives its first block the parent {_show_hash(item.parent_hash)}, not"
                f" {_show_hash(blocks[0].parent)}"
            )
        tokens = [token for block in blocks for token in block.tokens]
        if list(item.token_ids) != tokens:
            problems.append(
                f"{head}: its blocks hold the tokens {tokens}, yet it names the tokens"
                f" {list(item.token_ids)}"
            )
        if item.lora_id != blocks[0].lora_id:
            problems.append(
                f"{head}: its blocks' LoRA id is {blocks[0].lora_id}, not {item.lora_id}"
            )
        return problems

    def hit_problems(self, request: Request, blocks: Sequence[Sequence[BlockId]]) -> list[str]:
        """Every block of a hit is cached under a key the events announce (and did not
        remove since): a router would not have sent the request here."""
        chain = request_block_hashes(request, self.block_size)
        problems = []
        for group, ids in enumerate(blocks):
            for index, block in enumerate(ids):
                if block == NULL_BLOCK or index >= len(chain):
                    continue
                key = CachedKey(group, chain[index])
                if self.announced[key] <= 0:
                    problems.append(
                        f"the hit's group {group} block {index} (block {block}) is cached under"
                        f" {_show_key(key)}, which no event announces (never stored, or"
                        " removed since)"
                    )
        return problems

    def _removed(self, item: BlockRemoved, allocation: Allocation | None) -> list[str]:
        problems = []
        blank = allocation.new_blocks if allocation is not None else frozenset()
        for digest in item.block_hashes:
            key = CachedKey(item.group, digest)
            if self.announced[key] <= 0:
                problems.append(f"BlockRemoved of {_show_key(key)}, which no event announces")
                continue
            self.announced[key] -= 1
            holders = self.holders.get(key, [])
            gone = next((b for b in holders if b in blank), None)
            if gone is None:
                gone = next((b for b in holders if b is None), holders[0] if holders else None)
            if gone in holders:
                holders.remove(gone)
            if not self.announced[key]:
                del self.announced[key]
                self.holders.pop(key, None)
        return problems

    def _stored(
        self,
        item: BlockStored,
        allocation: Allocation | None,
        stored_now: set[tuple[CachedKey, BlockId]],
    ) -> list[str]:
        problems = []
        chain = (
            [] if allocation is None else request_block_hashes(allocation.request, self.block_size)
        )
        for digest in item.block_hashes:
            key = CachedKey(item.group, digest)
            self.announced[key] += 1
            holder: BlockId | None = None
            if allocation is not None and digest in chain:
                index = chain.index(digest)
                ids = allocation.table[item.group] if item.group < len(allocation.table) else []
                holder = ids[index] if index < len(ids) else None
                if holder is None or holder == NULL_BLOCK:
                    problems.append(
                        f"{_show_stored(item)} announces {_show_key(key)}, block {index} of"
                        f" request {allocation.request.request_id!r}, which its table does not"
                        " hold"
                    )
                    holder = None
                elif (index + 1) * self.block_size > allocation.computed:
                    problems.append(
                        f"{_show_stored(item)} announces {_show_key(key)}, block {index} of"
                        f" request {allocation.request.request_id!r}, before its tokens are"
                        f" computed ({allocation.computed} are)"
                    )
                else:
                    stored_now.add((key, holder))
            self.holders.setdefault(key, []).append(holder)
        return problems

    def _stale(
        self, allocation: Allocation, stored_now: set[tuple[CachedKey, BlockId]]
    ) -> list[str]:
        """A block handed out blank holds no cached data: a key still announced for it is a
        missing ``BlockRemoved``."""
        problems = []
        for key, holders in self.holders.items():
            for block in holders:
                if block in allocation.new_blocks and (key, block) not in stored_now:
                    problems.append(
                        f"block {block} was handed out blank, yet {_show_key(key)}, announced"
                        " for it, was never removed (a missing BlockRemoved)"
                    )
        return problems


def _events(problems: list[str]) -> list[Finding]:
    return [("events", problem) for problem in problems]


def _show_hash(digest: BlockHash | None) -> str:
    return "none" if digest is None else digest.hex()[:8] + "…"


def _show_key(key: CachedKey) -> str:
    return f"group {key.group} hash {key.block_hash.hex()[:8]}…"


def _show_stored(item: BlockStored) -> str:
    hashes = ", ".join(_show_hash(h) for h in item.block_hashes)
    return f"BlockStored(group {item.group}, hashes [{hashes}])"
