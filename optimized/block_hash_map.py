"""The cache map of one KV cache group: block hash -> the blocks cached under it, oldest first
(``specs/request_level.md``, "State").

Nothing is deduplicated: two requests that computed the same block at the same time each cache
their own copy under one key, and a lookup answers the earliest one still cached. As in vLLM
v1's ``BlockHashToBlockMap``, a key holds a bare id in the common case and an insertion-ordered
dict only once a second block joins it, so the map makes no container per cached block.
"""

from __future__ import annotations

from pagedkv.specs.types import BlockHash, BlockId


class BlockHashMap:
    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[BlockHash, BlockId | dict[BlockId, None]] = {}

    def __len__(self) -> int:
        """How many keys have a block."""
        return len(self._blocks)

    def first(self, block_hash: BlockHash) -> BlockId | None:
        """The earliest-inserted block still cached under ``block_hash``, or ``None``."""
        held = self._blocks.get(block_hash)
        if held is None or isinstance(held, int):
            return held
        return next(iter(held))

    def holds(self, block_hash: BlockHash, block: BlockId) -> bool:
        held = self._blocks.get(block_hash)
        if held is None:
            return False
        if isinstance(held, int):
            return held == block
        return block in held

    def insert(self, block_hash: BlockHash, block: BlockId) -> None:
        held = self._blocks.get(block_hash)
        if held is None:
            self._blocks[block_hash] = block
        elif isinstance(held, int):
            self._blocks[block_hash] = {held: None, block: None}
        else:
            held[block] = None

    def remove(self, block_hash: BlockHash, block: BlockId) -> None:
        """Forget ``block`` under ``block_hash``; it must be there."""
        held = self._blocks[block_hash]
        if isinstance(held, int):
            del self._blocks[block_hash]
            return
        del held[block]
        if len(held) == 1:
            self._blocks[block_hash] = next(iter(held))

    def clear(self) -> None:
        self._blocks.clear()
