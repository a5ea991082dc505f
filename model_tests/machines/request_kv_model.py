"""The request machine's KV model: what the stand-in model runner wrote into each slot, so that
a wrong prefix-cache hit shows as wrong data, not only as a wrong block id.

For every token it computes, the machine writes a ``Cell`` into block ``table[g][pos // B]``,
slot ``pos % B``, of every group ``g``. A cell is what the token's KV depends on as far as the
cache is concerned (``specs/request_hashes.py``): the chained hash of every block before its
own (which covers all earlier tokens and keys), the token, its position, the request's extra
key and the multimodal identifiers of its block. Two requests whose cells differ must never
read each other's slots; two whose blocks hash alike have equal cells by construction, which is
exactly what a cache hit promises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pagedkv.specs.content_hash import ROOT
from pagedkv.specs.request_hashes import block_identifiers, request_block_hash
from pagedkv.specs.request_types import NULL_BLOCK, MultimodalInput
from pagedkv.specs.types import BlockHash, BlockId, ExtraKey, Token


@dataclass(frozen=True, slots=True)
class Cell:
    parent: BlockHash
    """The chained hash of the blocks before this token's block (``ROOT`` in the first)."""
    token: Token
    position: int
    extra_key: ExtraKey
    identifiers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Contents:
    """What a request's tokens (committed ones, then any drafts) put in each slot."""

    cells: tuple[Cell, ...]
    """One per token, by position."""
    hashes: tuple[BlockHash, ...]
    """The chained hash of each full block of those tokens."""


def contents(
    tokens: Sequence[Token],
    extra_key: ExtraKey,
    multimodal: Sequence[MultimodalInput],
    block_size: int,
) -> Contents:
    cells: list[Cell] = []
    hashes: list[BlockHash] = []
    parent = ROOT
    for start in range(0, len(tokens), block_size):
        end = start + block_size
        identifiers = block_identifiers(multimodal, start, end)
        chunk = tokens[start:end]
        cells += [
            Cell(parent, token, start + offset, extra_key, identifiers)
            for offset, token in enumerate(chunk)
        ]
        if len(chunk) == block_size:
            parent = request_block_hash(parent, chunk, extra_key, identifiers)
            hashes.append(parent)
    return Contents(tuple(cells), tuple(hashes))


@dataclass
class RequestKVModel:
    """The slots of one side's pool, named by that side's block ids."""

    block_size: int
    slots: dict[tuple[BlockId, int], Cell] = field(default_factory=dict)
    by_hash: dict[BlockHash, tuple[Cell, ...]] = field(default_factory=dict)
    """Every full block's cells the machine has seen, by its chained hash: what a block cached
    under that hash must hold."""

    def remember(self, found: Contents, num_blocks: int) -> None:
        """The first ``num_blocks`` full blocks of ``found`` (those of committed tokens)."""
        size = self.block_size
        for index, block_hash in enumerate(found.hashes[:num_blocks]):
            self.by_hash[block_hash] = found.cells[index * size : (index + 1) * size]

    def write(
        self, tables: Sequence[Sequence[BlockId]], cells: Sequence[Cell], positions: range
    ) -> list[str]:
        """The model runner writes ``positions`` into every group's table; returns the
        positions it found no slot for."""
        problems = []
        for group, table in enumerate(tables):
            for position in positions:
                index = position // self.block_size
                block = table[index] if index < len(table) else NULL_BLOCK
                if block == NULL_BLOCK:
                    problems.append(f"group {group} has no block for position {position}")
                    continue
                self.slots[(block, position % self.block_size)] = cells[position]
        return problems

    def misread(
        self, group: int, table: Sequence[BlockId], cells: Sequence[Cell], positions: range
    ) -> list[str]:
        """Where ``table`` (group ``group``'s) does not hold ``cells`` at ``positions`` (a
        ``NULL_BLOCK`` entry is skipped: the caller says where one may be)."""
        problems = []
        size = self.block_size
        for position in positions:
            index = position // size
            if index >= len(table):
                problems.append(f"group {group} has no block for position {position}")
                break
            block = table[index]
            if block == NULL_BLOCK:
                continue
            held = self.slots.get((block, position % size))
            if held != cells[position]:
                problems.append(
                    f"group {group}, position {position}: block {block} slot {position % size}"
                    f" holds {show_cell(held)}, the request's token there is"
                    f" {show_cell(cells[position])}"
                )
                break
        return problems

    def cached_misread(self, block: BlockId, block_hash: BlockHash) -> str | None:
        """Whether cached ``block`` holds what its hash says (None if it does)."""
        wanted = self.by_hash.get(block_hash)
        if wanted is None:
            return f"block {block} is cached under {block_hash.hex()[:12]}, no request's full block"
        size = self.block_size
        held = tuple(self.slots.get((block, slot)) for slot in range(size))
        if held != wanted:
            return (
                f"block {block} is cached under {block_hash.hex()[:12]} but holds"
                f" {[show_cell(c) for c in held]}, not {[show_cell(c) for c in wanted]}"
            )
        return None


def show_cell(cell: Cell | None) -> str:
    if cell is None:
        return "nothing"
    keys = "" if cell.extra_key == ExtraKey() else f" {cell.extra_key}"
    ids = f" {list(cell.identifiers)}" if cell.identifiers else ""
    return f"(token {cell.token} at {cell.position} after {cell.parent.hex()[:8]}{keys}{ids})"
