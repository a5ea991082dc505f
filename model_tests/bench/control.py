"""The control of the scaling benchmark: a plain dict-and-list loop with a block manager's access
pattern and none of its work.

It answers the manager's calls by touching what a manager touches (a dict entry per sequence
and per group, the per-block entries of the blocks it names, a free list) and nothing else: no
checks, no hashing, no eviction order, every answer yes. Its time per call is what the memory
hierarchy alone costs at a given pool size; a real manager's growth with the pool is judged
against it (``scaling``). It is not a manager and replays a stream only because it never says
no.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.specs.types import (
    NO_EXTRA_KEY,
    AllocStatus,
    BlockId,
    CopyPair,
    Device,
    ExtraKey,
    ManagerConfig,
    Token,
)


class ControlLoop:
    def __init__(self, config: ManagerConfig) -> None:
        num_blocks = config.num_gpu_blocks + config.num_cpu_blocks
        self.block_size = config.block_size
        self.unused: list[BlockId] = list(range(num_blocks - 1, -1, -1))
        self.ref_counts = [0] * num_blocks
        self.fill = [0] * num_blocks
        self.touched = [0.0] * num_blocks
        self.tables: dict[int, list[BlockId]] = {}
        self.lengths: dict[int, int] = {}
        self.groups: dict[int, list[int]] = {}
        self.group_of: dict[int, int] = {}
        self.asked = False
        """What the last question read (kept so that reading it is not optimized away)."""

    def _take(self) -> BlockId:
        """A block off the free list; when it is empty (the control shares no prefix, so it
        needs more blocks than a caching manager) one more is made."""
        if not self.unused:
            self.unused.append(len(self.ref_counts))
            self.ref_counts.append(0)
            self.fill.append(0)
            self.touched.append(0.0)
        block = self.unused.pop()
        self.ref_counts[block] = 1
        self.fill[block] = 0
        return block

    def _release(self, block: BlockId) -> None:
        self.ref_counts[block] -= 1
        if not self.ref_counts[block]:
            self.unused.append(block)

    def can_allocate(
        self, prompt: Sequence[Token], lookahead: int = 0, encoder: object = None
    ) -> AllocStatus:
        self.asked = len(prompt) // self.block_size <= len(self.unused)
        return AllocStatus.OK

    def allocate(
        self,
        group_id: int,
        seq_ids: Sequence[int],
        prompt: Sequence[Token],
        extra_key: ExtraKey = NO_EXTRA_KEY,
        encoder: object = None,
    ) -> None:
        size = self.block_size
        blocks = [self._take() for _ in range(0, len(prompt), size)]
        for block in blocks:
            self.fill[block] = size
        self.groups[group_id] = list(seq_ids)
        for seq_id in seq_ids:
            self.tables[seq_id] = blocks.copy()
            self.lengths[seq_id] = len(prompt)
            self.group_of[seq_id] = group_id
        for _ in seq_ids[1:]:
            for block in blocks:
                self.ref_counts[block] += 1

    def can_append_slots(self, group_id: int, num_new: int = 1, lookahead: int = 0) -> bool:
        needed = 0
        for seq_id in self.groups[group_id]:
            needed += (self.lengths[seq_id] + num_new + lookahead) // self.block_size
        return needed >= 0

    def append_slots(
        self, seq_id: int, tokens: Sequence[Token], lookahead: int = 0
    ) -> list[CopyPair]:
        table = self.tables[seq_id]
        length = self.lengths[seq_id] + len(tokens)
        self.lengths[seq_id] = length
        while len(table) * self.block_size < length + lookahead:
            table.append(self._take())
        self.fill[table[-1]] += len(tokens)
        return []

    def fork(self, parent_id: int, child_id: int) -> None:
        table = self.tables[parent_id]
        for block in table:
            self.ref_counts[block] += 1
        self.tables[child_id] = table.copy()
        self.lengths[child_id] = self.lengths[parent_id]
        group_id = self.group_of[parent_id]
        self.group_of[child_id] = group_id
        self.groups[group_id].append(child_id)

    def free(self, seq_id: int) -> None:
        for block in self.tables.pop(seq_id):
            self._release(block)
        del self.lengths[seq_id]
        group_id = self.group_of.pop(seq_id)
        members = self.groups[group_id]
        members.remove(seq_id)
        if not members:
            del self.groups[group_id]

    def can_swap_out(self, group_id: int) -> AllocStatus:
        self.asked = bool(self.groups[group_id])
        return AllocStatus.OK

    def can_swap_in(self, group_id: int, lookahead: int = 0) -> AllocStatus:
        self.asked = bool(self.groups[group_id])
        return AllocStatus.OK

    def _move(self, group_id: int) -> list[CopyPair]:
        pairs: list[CopyPair] = []
        for seq_id in self.groups[group_id]:
            table = self.tables[seq_id]
            for index, block in enumerate(table):
                moved = self._take()
                self._release(block)
                pairs.append((block, moved))
                table[index] = moved
        return pairs

    def swap_out(self, group_id: int) -> list[CopyPair]:
        return self._move(group_id)

    def swap_in(self, group_id: int) -> list[CopyPair]:
        return self._move(group_id)

    def get_block_table(self, seq_id: int) -> list[BlockId]:
        return self.tables[seq_id].copy()

    def access_all_blocks_in_seq(self, seq_id: int, now: float) -> None:
        self.touched[self.tables[seq_id][-1]] = now

    def mark_blocks_as_computed(self, group_id: int) -> None:
        for seq_id in self.groups[group_id]:
            self.fill[self.tables[seq_id][-1]] += 0

    def get_common_computed_block_ids(self, seq_ids: Sequence[int]) -> list[BlockId]:
        return self.tables[seq_ids[0]][:-1]

    def get_num_cached_tokens(self, seq_id: int) -> int:
        return self.fill[self.tables[seq_id][0]]

    def get_prefix_cache_hit_rate(self, device: Device) -> float:
        return 0.0
