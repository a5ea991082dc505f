"""What a learner sees of a request-level manager (``specs/request_level.md``): the pool's ids
with their holders and cached keys, the free queue front to back, each request's tables per
group, and the KV events a router would read.

A ``RequestPicture`` is plain data drawn from a ``RequestManagerView`` alone, so that the demo,
the terminal, the page and ``pagedkv show`` draw one thing. The view knows a cached block's key
but not its tokens: ``block_contents`` names them from the requests a caller knows (the demo's,
or a trace's), and a picture drawn without them shows the key only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pagedkv.model_tests.teaching.snapshot import State, short_hash
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AllBlocksCleared,
    AttentionKind,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVGroup,
    Request,
)
from pagedkv.specs.request_view import CachedKey, RequestManagerView
from pagedkv.specs.types import BlockHash, BlockId, Token

Contents = Mapping[BlockHash, tuple[Token, ...]]
"""The tokens of each block hash a caller has seen (``block_contents``)."""


def block_contents(requests: Iterable[Request], block_size: int) -> Contents:
    """Each full block's tokens under its chained hash, for every request given."""
    contents: dict[BlockHash, tuple[Token, ...]] = {}
    for request in requests:
        for i, block_hash in enumerate(request_block_hashes(request, block_size)):
            contents[block_hash] = request.tokens[i * block_size : (i + 1) * block_size]
    return contents


def group_label(group: KVGroup) -> str:
    if group.kind is AttentionKind.SLIDING_WINDOW:
        return f"sliding window of {group.sliding_window} tokens"
    return "full attention"


@dataclass(frozen=True)
class RequestCell:
    """A block that is not blank and free: the null block, a held block, or a cached block in
    the free queue (``evictable``: taking it forgets its key)."""

    block: BlockId
    state: State
    ref_count: int
    holders: tuple[str, ...]
    """Where it sits: ``a[2]`` (request ``a``, index 2), ``a g1[2]`` with several groups."""
    key: str
    """The key it is cached under (``g1 #abcdef``; the group left out with one group), or ''."""
    tokens: tuple[Token, ...] | None
    """A cached block's tokens, when the picture was given them."""


@dataclass(frozen=True)
class RequestRow:
    """One request's table in one group."""

    request: str
    group: int
    blocks: tuple[BlockId, ...]
    num_cached: int


@dataclass(frozen=True)
class RequestPicture:
    num_blocks: int
    block_size: int
    groups: tuple[str, ...]
    caching: bool
    cells: tuple[RequestCell, ...]
    free_queue: tuple[tuple[BlockId, bool], ...]
    """Front first: each block and whether it is cached (taking it evicts)."""
    tables: tuple[RequestRow, ...]
    events: tuple[str, ...] = ()
    """The KV events the step emitted, when the caller took them (the demo does)."""

    @property
    def num_held(self) -> int:
        return sum(1 for cell in self.cells if cell.state == "used")

    @property
    def usage(self) -> float:
        usable = self.num_blocks - 1
        return 0.0 if usable == 0 else 1.0 - len(self.free_queue) / usable

    def counts(self) -> str:
        """One line: what ``num_free_blocks`` and ``usage`` are made of (§6)."""
        cached = sum(1 for _, is_cached in self.free_queue if is_cached)
        parts = [
            f"{self.num_blocks} blocks (0 is the null block)",
            f"held {self.num_held}",
            f"free {len(self.free_queue)}" + (f" ({cached} cached)" if self.caching else ""),
            f"usage {self.usage:.2f}",
        ]
        return " · ".join(parts)

    def group_lines(self) -> list[str]:
        if len(self.groups) == 1:
            return [f"one group: {self.groups[0]}"]
        return [f"g{g}: {label}" for g, label in enumerate(self.groups)]


def key_text(key: CachedKey, several_groups: bool) -> str:
    shown = short_hash(key.block_hash)
    return f"g{key.group} {shown}" if several_groups else shown


def holder_text(request: str, group: int, index: int, several_groups: bool) -> str:
    return f"{request} g{group}[{index}]" if several_groups else f"{request}[{index}]"


def event_text(event: KVEvent) -> str:
    """An event as a router reads it, hashes shortened."""
    if isinstance(event, BlockStored):
        hashes = " ".join(short_hash(h) for h in event.block_hashes)
        parent = "none" if event.parent_hash is None else short_hash(event.parent_hash)
        return (
            f"BlockStored(group {event.group}: {hashes}; parent {parent};"
            f" {len(event.token_ids)} tokens)"
        )
    if isinstance(event, BlockRemoved):
        hashes = " ".join(short_hash(h) for h in event.block_hashes)
        return f"BlockRemoved(group {event.group}: {hashes})"
    assert isinstance(event, AllBlocksCleared)
    return "AllBlocksCleared()"


def request_picture(
    view: RequestManagerView,
    contents: Contents | None = None,
    events: Iterable[KVEvent] = (),
) -> RequestPicture:
    """The picture of ``view``; ``contents`` names cached blocks' tokens, ``events`` are the ones
    the step emitted (the view holds neither)."""
    config = view.config
    several = len(config.groups) > 1
    holders: dict[BlockId, list[str]] = {}
    rows = []
    for request_id in sorted(view.requests):
        table = view.requests[request_id]
        for g, blocks in enumerate(table.blocks):
            rows.append(RequestRow(request_id, g, blocks, table.num_cached_blocks[g]))
            for index, block in enumerate(blocks):
                if block != NULL_BLOCK:
                    holders.setdefault(block, []).append(holder_text(request_id, g, index, several))
    cells = [RequestCell(NULL_BLOCK, "null", 0, (), "", None)]
    for block in sorted(view.blocks):
        seen = view.blocks[block]
        if seen.ref_count == 0 and seen.cached is None:
            continue
        state: State = "used" if seen.ref_count > 0 else "evictable"
        key = "" if seen.cached is None else key_text(seen.cached, several)
        tokens = None
        if seen.cached is not None and contents is not None:
            tokens = contents.get(seen.cached.block_hash)
        cells.append(
            RequestCell(block, state, seen.ref_count, tuple(holders.get(block, ())), key, tokens)
        )
    queue = tuple((block, view.blocks[block].cached is not None) for block in view.free_queue)
    return RequestPicture(
        config.num_blocks,
        config.block_size,
        tuple(group_label(group) for group in config.groups),
        config.enable_caching,
        tuple(cells),
        queue,
        tuple(rows),
        tuple(event_text(event) for event in events),
    )
