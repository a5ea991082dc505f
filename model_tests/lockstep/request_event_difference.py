"""How a target's KV events differ from the model's, in words that say what a router would be
told wrong (``specs/request_level.md`` §4.7, §9).

Two kinds of difference, told apart so that a known defect can name one precisely: the events
store and remove other keys than the model's (or in another order), or they store and remove the
same keys but some ``BlockStored`` misnames its blocks: names none, is not one run of
consecutive blocks, or gives another parent or other tokens than its blocks'. The blocks' parent
and tokens are read off the model's events, which name each stored block exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.model_tests.lockstep.request_reading import show_event
from pagedkv.specs.request_types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from pagedkv.specs.types import BlockHash, Token

KeyStep = tuple[object, ...]
"""One key stored or removed, or the cache cleared, in the order the events say."""


def key_steps(events: Sequence[KVEvent]) -> list[KeyStep]:
    steps: list[KeyStep] = []
    for item in events:
        if isinstance(item, BlockStored):
            steps += [("stored", item.group, h, item.lora_id) for h in item.block_hashes]
        elif isinstance(item, BlockRemoved):
            steps += [("removed", item.group, h) for h in item.block_hashes]
        elif isinstance(item, AllBlocksCleared):
            steps.append(("cleared",))
        else:
            steps.append(("not an event", repr(item)))
    return steps


def describe_event_difference(mine: Sequence[KVEvent], theirs: Sequence[KVEvent]) -> str:
    """Why the target's events (``theirs``) are not the model's (``mine``)."""
    if key_steps(mine) != key_steps(theirs):
        at = next(
            (i for i, pair in enumerate(zip(mine, theirs, strict=False)) if pair[0] != pair[1]),
            min(len(mine), len(theirs)),
        )
        return (
            f"the target's events store or remove other keys than the model's (or in another"
            f" order): the model sends {len(mine)} events, the target {len(theirs)}; event {at}"
            f" is the model's {_at(mine, at)}, the target's {_at(theirs, at)}"
        )
    blocks = _stored_blocks(mine)
    problems = []
    for index, item in enumerate(theirs):
        if isinstance(item, BlockStored):
            problems += [f"event {index}, {p}" for p in _misnamed(item, blocks)]
    if not problems:
        problems.append("they are batched otherwise: " + ", ".join(map(show_event, theirs)))
    return "the target's events store and remove the model's keys in order, but " + "; ".join(
        problems
    )


def _stored_blocks(
    events: Sequence[KVEvent],
) -> dict[BlockHash, tuple[BlockHash | None, tuple[Token, ...]]]:
    """Each stored block's parent and tokens, as the model's exact events give them."""
    blocks: dict[BlockHash, tuple[BlockHash | None, tuple[Token, ...]]] = {}
    for item in events:
        if isinstance(item, BlockStored):
            parent, size = item.parent_hash, item.block_size
            for i, digest in enumerate(item.block_hashes):
                blocks[digest] = (parent, tuple(item.token_ids[i * size : (i + 1) * size]))
                parent = digest
    return blocks


def _misnamed(
    item: BlockStored, blocks: dict[BlockHash, tuple[BlockHash | None, tuple[Token, ...]]]
) -> list[str]:
    group = f"a BlockStored of group {item.group}"
    if not item.block_hashes:
        return [f"{group}, names no block (tokens {list(item.token_ids)})"]
    problems = []
    known = [blocks[h] for h in item.block_hashes if h in blocks]
    if len(known) < len(item.block_hashes):
        return [f"{group}, names a block the model's events do not: {show_event(item)}"]
    if any(known[j][0] != item.block_hashes[j - 1] for j in range(1, len(known))):
        problems.append(f"{group}, names blocks that are not one run")
    if item.parent_hash != known[0][0]:
        problems.append(f"{group}, gives its first block another parent")
    tokens = [token for _, held in known for token in held]
    if list(item.token_ids) != tokens:
        problems.append(
            f"{group}, its blocks hold the tokens {tokens}, yet it names the tokens"
            f" {list(item.token_ids)}"
        )
    return problems


def _at(events: Sequence[KVEvent], at: int) -> str:
    return show_event(events[at]) if at < len(events) else "(none)"
