"""What a learner sees of a state: per device the blocks with their ref counts, free / cached /
evictable, the hash chains; every sequence's block table; pending copies.

A ``Picture`` is plain data drawn from a ``ManagerView`` or a ``PoolView`` (``specs/``), so that
the terminal and the HTML page draw the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pagedkv.specs.content_hash import ROOT
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import NEVER_ACCESSED, BlockHash, BlockId, CopyPair, Device, Token

HASH_DIGITS = 6
"""Hex digits of a content hash shown: enough to tell the blocks of a small example apart."""

State = Literal["used", "evictable", "null"]


def short_hash(value: BlockHash) -> str:
    return "#" + value.hex()[:HASH_DIGITS]


@dataclass(frozen=True)
class BlockCell:
    """A block that is not blank-free: in use, cached and evictable, or the null block."""

    block: BlockId
    state: State
    ref_count: int
    tokens: tuple[Token, ...]
    capacity: int
    content_hash: str | None
    computed: bool
    last_accessed: float

    @property
    def accessed(self) -> str:
        return "never" if self.last_accessed == NEVER_ACCESSED else f"{self.last_accessed:g}"


@dataclass(frozen=True)
class ChainLink:
    """One cached block in its hash chain: ``depth`` 0 is a chain's head (or the first block of
    the chain still cached on this device)."""

    block: BlockId
    content_hash: str
    parent: str | None
    """The parent's short hash; None when the parent is the root (the sequence's first block)."""
    depth: int
    tokens: tuple[Token, ...]
    evictable: bool


@dataclass(frozen=True)
class DevicePicture:
    name: str
    cells: tuple[BlockCell, ...]
    free: tuple[BlockId, ...]
    num_blocks: int
    chain: tuple[ChainLink, ...]
    pending: tuple[CopyPair, ...]
    hits: int
    queries: int
    caching: bool

    @property
    def num_evictable(self) -> int:
        return sum(1 for cell in self.cells if cell.state == "evictable")

    @property
    def num_used(self) -> int:
        return sum(1 for cell in self.cells if cell.state != "evictable")

    @property
    def num_cached(self) -> int:
        return len(self.chain)

    def counts(self) -> str:
        """One line: what the allocator's free count is made of."""
        parts = [
            f"{self.num_blocks} block{'' if self.num_blocks == 1 else 's'}",
            f"used {self.num_used}",
            f"free {len(self.free)} + evictable {self.num_evictable}"
            f" = {len(self.free) + self.num_evictable}",
        ]
        if self.caching:
            parts.append(f"cached {self.num_cached}")
            parts.append(f"hits {self.hits}/{self.queries}")
        return " · ".join(parts)


@dataclass(frozen=True)
class TableRow:
    """A sequence's block table (or a group's cross-attention table)."""

    label: str
    device: str
    num_tokens: int
    blocks: tuple[BlockId, ...]
    null_block: BlockId | None
    extra_key: str = ""

    @property
    def length(self) -> str:
        return f"{self.num_tokens} token{'' if self.num_tokens == 1 else 's'}"


@dataclass(frozen=True)
class Picture:
    devices: tuple[DevicePicture, ...]
    tables: tuple[TableRow, ...]


# --- drawing a state ----------------------------------------------------------------------------


def device_picture(name: str, pool: PoolView, null_block: BlockId | None = None) -> DevicePicture:
    size = pool.config.block_size
    cells = []
    for block in sorted(pool.blocks):
        view = pool.blocks[block]
        if block in pool.free:
            continue
        state: State = "evictable" if block in pool.evictable else "used"
        if block == null_block:
            state = "null"
        cells.append(
            BlockCell(
                block,
                state,
                view.ref_count,
                view.tokens,
                size,
                None if view.content_hash is None else short_hash(view.content_hash),
                view.computed,
                view.last_accessed,
            )
        )
    return DevicePicture(
        name,
        tuple(cells),
        tuple(sorted(pool.free)),
        pool.config.num_blocks,
        hash_chain(pool),
        tuple(pool.pending_cows),
        pool.hits,
        pool.queries,
        pool.config.enable_caching,
    )


def hash_chain(pool: PoolView) -> tuple[ChainLink, ...]:
    """The cached blocks as chains: each block under its parent, heads first, in id order."""
    children: dict[BlockHash | None, list[BlockId]] = {}
    for block in pool.cached.values():
        prefix = pool.blocks[block].prefix
        parent = None if prefix is None else prefix.hash
        if parent == ROOT or parent not in pool.cached:
            parent = None
        children.setdefault(parent, []).append(block)
    links: list[ChainLink] = []

    def walk(parent: BlockHash | None, depth: int) -> None:
        for block in sorted(children.get(parent, [])):
            view = pool.blocks[block]
            assert view.content_hash is not None and view.prefix is not None
            links.append(
                ChainLink(
                    block,
                    short_hash(view.content_hash),
                    None if view.prefix.hash == ROOT else short_hash(view.prefix.hash),
                    depth,
                    view.tokens,
                    block in pool.evictable,
                )
            )
            walk(view.content_hash, depth + 1)

    walk(None, 0)
    return tuple(links)


def manager_picture(view: ManagerView) -> Picture:
    devices = (
        device_picture("GPU", view.gpu, view.null_block),
        device_picture("CPU", view.cpu),
    )
    rows = []
    for seq_id in sorted(view.seqs):
        seq = view.seqs[seq_id]
        group = view.groups[seq.group_id]
        rows.append(
            TableRow(
                f"seq {seq_id} (group {seq.group_id})",
                group.device.name,
                len(seq.tokens),
                seq.blocks,
                view.null_block if group.device is Device.GPU else None,
                _key(group.extra_key.lora_id, group.extra_key.cache_salt),
            )
        )
    for group_id in sorted(view.groups):
        group = view.groups[group_id]
        if group.encoder_tokens:
            rows.append(
                TableRow(
                    f"group {group_id} cross",
                    group.device.name,
                    len(group.encoder_tokens),
                    group.cross_blocks,
                    None,
                )
            )
    return Picture(devices, tuple(rows))


def _key(lora_id: int | None, cache_salt: str | None) -> str:
    parts = []
    if lora_id is not None:
        parts.append(f"lora {lora_id}")
    if cache_salt is not None:
        parts.append(f"salt {cache_salt!r}")
    return ", ".join(parts)


def pool_picture(view: PoolView) -> Picture:
    return Picture((device_picture("pool", view),), ())
