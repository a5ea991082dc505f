"""The online defragmenter of seed 003 over flat arrays (``specs/defragmenter.md``).

Same results as ``reference/defragmenter.py``, step for step. Per physical id a ref count in a
list; the forward and backward tables as lists; a running count of used ids, a high-water mark
above the highest used id and a low-water mark below the lowest free one, each moved lazily, so
the trigger costs O(1) amortised and a defragmentation walks two cursors towards each other
(highest used down, lowest free up) over only the ids between the marks, instead of sorting every
used id. An update that only appends to a table (the usual decode step) touches only the new
entries.

The exchanges it returns are physical ids; the caller runs them with
``pagedkv.optimized.kernels.swap_blocks_in_place(store, pairs, config.pad_sizes)``.
"""

from __future__ import annotations

from pagedkv.specs import defrag_rule
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.types import BlockId, DefragConfig, TableKey
from pagedkv.specs.validation import (
    check_defrag_config,
    check_defrag_id,
    check_defrag_tables,
    check_table_update,
)

Pair = tuple[BlockId, BlockId]


class OptimizedDefragmenter:
    def __init__(self, config: DefragConfig) -> None:
        check_defrag_config(config)
        self._config = config
        n = config.num_blocks
        self._forward = list(range(n))
        self._backward = list(range(n))
        self._refs = [0] * n
        self._movable = [b not in config.reserved for b in range(n)]
        self._num_used = 0
        self._high = -1
        """No used id lies above it (it may itself be unused: lowered when asked)."""
        self._low = 0
        """No free movable id lies below it (it may itself be used: raised when asked)."""
        self._tables: dict[TableKey, list[BlockId]] = {}

    @property
    def config(self) -> DefragConfig:
        return self._config

    # --- mapping --------------------------------------------------------------------------------

    def resolve(self, block: object) -> BlockId:
        return self._forward[check_defrag_id(self._config, block, "logical block")]

    def resolve_all(self, tables: object) -> list[list[BlockId]]:
        forward = self._forward
        return [[forward[b] for b in table] for table in check_defrag_tables(self._config, tables)]

    def unresolve(self, physical: object) -> BlockId:
        return self._backward[check_defrag_id(self._config, physical, "physical block")]

    # --- ref counts -----------------------------------------------------------------------------

    def _take(self, logical_ids: list[BlockId]) -> None:
        refs, forward = self._refs, self._forward
        for b in logical_ids:
            physical = forward[b]
            if refs[physical] == 0:
                self._num_used += 1
                if physical > self._high:
                    self._high = physical
            refs[physical] += 1

    def _give_back(self, logical_ids: list[BlockId]) -> None:
        refs, forward = self._refs, self._forward
        for b in logical_ids:
            physical = forward[b]
            refs[physical] -= 1
            if refs[physical] == 0:
                self._num_used -= 1
                if physical < self._low:
                    self._low = physical

    def update_state(self, changed: object, finished: object) -> None:
        tables, done = check_table_update(self._config, changed, finished, self._tables)
        for key, table in tables.items():
            old = self._tables.get(key, [])
            keep = len(old) if table[: len(old)] == old else 0
            if keep == 0:  # not a pure append: find the common prefix
                limit = min(len(old), len(table))
                while keep < limit and old[keep] == table[keep]:
                    keep += 1
            self._give_back(old[keep:])
            self._take(table[keep:])
            self._tables[key] = table
        for key in done:
            self._give_back(self._tables.pop(key))

    # --- defragmentation ------------------------------------------------------------------------

    def _max_used(self) -> int:
        refs, high = self._refs, self._high
        while high >= 0 and refs[high] == 0:
            high -= 1
        self._high = high
        return high

    def _exchange(self, used_id: BlockId, free_id: BlockId) -> None:
        forward, backward, refs = self._forward, self._backward, self._refs
        logical_used, logical_free = backward[used_id], backward[free_id]
        forward[logical_used], forward[logical_free] = free_id, used_id
        backward[free_id], backward[used_id] = logical_used, logical_free
        refs[free_id], refs[used_id] = refs[used_id], 0

    def defragment(self) -> list[Pair]:
        """Exchange the highest used ids with the lowest free ones when the trigger says so;
        returns the pairs (used, free) whose KV the caller must exchange."""
        if self._num_used == 0:
            return []
        high = self._max_used()
        if not defrag_rule.should_defragment(high, self._num_used, self._config.threshold):
            return []
        refs, movable, cap = self._refs, self._movable, self._config.max_pairs
        pairs: list[Pair] = []
        low = self._low
        while len(pairs) < cap:
            while high >= 0 and (refs[high] == 0 or not movable[high]):
                high -= 1
            while low < high and (refs[low] != 0 or not movable[low]):
                low += 1
            if low >= high:
                break
            self._exchange(high, low)
            pairs.append((high, low))
        self._low = low  # every id below it is used or reserved now
        return pairs

    def view(self) -> DefragmenterView:
        return DefragmenterView(
            config=self._config,
            forward=tuple(self._forward),
            backward=tuple(self._backward),
            ref_counts={b: count for b, count in enumerate(self._refs) if count},
            tables={key: tuple(table) for key, table in self._tables.items()},
        )
