"""The online defragmenter of seed 003, pure (``specs/defragmenter.md``).

A block manager names blocks by logical id; the KV of logical block ``b`` sits at physical id
``forward[b]``, and ``backward`` is the inverse. The defragmenter counts the references the block
tables it is told about hold on each physical id, and when the highest used physical id lies far
past the number used it exchanges the highest used ids with the lowest free ones, updating both
tables, so that every logical id still finds its data. The manager never sees anything move.

Every function takes a frozen ``DefragState`` and returns a new one (or a value); bad input raises
the typed error of ``pagedkv.specs.validation`` before anything is computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from immutables import Map

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
"""(used physical id, free physical id): the two blocks of one exchange."""


@dataclass(frozen=True, slots=True)
class DefragState:
    config: DefragConfig
    forward: tuple[BlockId, ...]
    backward: tuple[BlockId, ...]
    ref_counts: Map[BlockId, int]
    """Physical id -> references; ids without any are absent."""
    tables: Map[TableKey, tuple[BlockId, ...]]


def create(config: DefragConfig) -> DefragState:
    """Nothing has moved: both tables are the identity, and no table is known."""
    check_defrag_config(config)
    identity = tuple(range(config.num_blocks))
    return DefragState(config, identity, identity, Map(), Map())


# --- mapping ------------------------------------------------------------------------------------


def resolve(state: DefragState, block: object) -> BlockId:
    """Where logical ``block``'s KV is."""
    return state.forward[check_defrag_id(state.config, block, "logical block")]


def resolve_all(state: DefragState, tables: object) -> list[list[BlockId]]:
    """Block tables as the model must read them: every logical id resolved."""
    return [
        [state.forward[b] for b in table] for table in check_defrag_tables(state.config, tables)
    ]


def unresolve(state: DefragState, physical: object) -> BlockId:
    """Which logical block's KV sits at ``physical``."""
    return state.backward[check_defrag_id(state.config, physical, "physical block")]


# --- ref counts ---------------------------------------------------------------------------------


def _add_references(
    counts: Map[BlockId, int], physical_ids: Sequence[BlockId], step: int
) -> Map[BlockId, int]:
    for physical in physical_ids:
        count = counts.get(physical, 0) + step
        counts = counts.set(physical, count) if count else counts.delete(physical)
    return counts


def update_state(state: DefragState, changed: object, finished: object) -> DefragState:
    """The tables changed since the last update: ``changed`` maps each table key to the whole
    table now (a new key is a new table), ``finished`` lists tables that are gone. Each table's
    old entries give back their references and its new entries take theirs."""
    tables, done = check_table_update(state.config, changed, finished, state.tables)
    counts, held = state.ref_counts, state.tables
    for key, table in tables.items():
        counts = _add_references(counts, [state.forward[b] for b in held.get(key, ())], -1)
        counts = _add_references(counts, [state.forward[b] for b in table], +1)
        held = held.set(key, tuple(table))
    for key in done:
        counts = _add_references(counts, [state.forward[b] for b in held[key]], -1)
        held = held.delete(key)
    return replace(state, ref_counts=counts, tables=held)


# --- defragmentation ----------------------------------------------------------------------------


def used_ids(state: DefragState) -> frozenset[BlockId]:
    return frozenset(state.ref_counts)


def free_ids(state: DefragState) -> list[BlockId]:
    """Physical ids no table holds and that may move, lowest first."""
    movable = (b for b in range(state.config.num_blocks) if b not in state.config.reserved)
    return [b for b in movable if b not in state.ref_counts]


def exchange_plan(state: DefragState) -> list[Pair]:
    """Used ids from the highest down against free ids from the lowest up, while the free one is
    below the used one, and at most the largest pad size of them (seed 003's loop)."""
    config = state.config
    if not defrag_rule.triggered(config, used_ids(state)):
        return []
    used = sorted((b for b in state.ref_counts if b not in config.reserved), reverse=True)
    pairs: list[Pair] = []
    for used_id, free_id in zip(used, free_ids(state), strict=False):
        if len(pairs) == config.max_pairs or free_id > used_id:
            break
        pairs.append((used_id, free_id))
    return pairs


def _with(values: tuple[BlockId, ...], updates: Mapping[int, BlockId]) -> tuple[BlockId, ...]:
    return tuple(updates.get(i, value) for i, value in enumerate(values))


def exchange(state: DefragState, used_id: BlockId, free_id: BlockId) -> DefragState:
    """The two physical ids trade their logical blocks and their references."""
    logical_used, logical_free = state.backward[used_id], state.backward[free_id]
    counts = state.ref_counts.delete(used_id).set(free_id, state.ref_counts[used_id])
    return replace(
        state,
        forward=_with(state.forward, {logical_used: free_id, logical_free: used_id}),
        backward=_with(state.backward, {free_id: logical_used, used_id: logical_free}),
        ref_counts=counts,
    )


def defragment(state: DefragState) -> tuple[DefragState, list[Pair]]:
    """The state after one defragmentation, and the pairs whose KV the caller must exchange
    (``swap_blocks_in_place``) before the model reads through the new mapping."""
    pairs = exchange_plan(state)
    for used_id, free_id in pairs:
        state = exchange(state, used_id, free_id)
    return state, pairs


def to_view(state: DefragState) -> DefragmenterView:
    return DefragmenterView(
        config=state.config,
        forward=state.forward,
        backward=state.backward,
        ref_counts=dict(state.ref_counts),
        tables=dict(state.tables),
    )
