"""Where blocks sit in the two sides' tables, and what to tell a person when a target put a block
where the reference did not (``manager_session.py``, comparison §3 of ``specs/oracle.md``).

A bijection of block ids is the session's bookkeeping, not something a reader should need: a
message says which sequence and position, which block the target put there and what else that
block already is, what the reference put there, and why the two cannot be the same (different
positions, extra keys or tokens: a sharing that would alias two requests' data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pagedkv.model_tests.lockstep.bijection import Bijection
from pagedkv.model_tests.lockstep.show import show_value
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.pool_view import BlockView
from pagedkv.specs.types import BlockId, Device, ExtraKey, Token

MAX_SHOWN_TOKENS = 12


class Place(NamedTuple):
    """A table entry: block ``position`` of a sequence's table, or of a group's cross table. A
    named tuple: every call places every block of both sides' tables, and hashes each place."""

    owner: str
    """``sequence``, ``group`` (its cross-attention table) or ``null`` (the window's null
    block, where the target names it with ``get_null_block()``)."""
    id: int
    position: int

    def __str__(self) -> str:
        if self.owner == "null":
            return "the null block"
        if self.owner == "group":
            return f"group {self.id} cross block {self.position}"
        return f"sequence {self.id} block {self.position}"


Slot = tuple[Place, Device, BlockId, BlockId]
"""(where, device, the model's block there, the target's block there)."""


def misplaced(
    view: ManagerView,
    slots: list[Slot],
    previous: list[Slot],
    where: Place,
    ids: Bijection,
    mine: BlockId,
    theirs: BlockId,
) -> str:
    """The sentence for a target block at ``where`` that cannot stand for the model's ``mine``
    there: what the target put there, what the reference put there, and why they differ.
    ``previous`` are the places as they were before the call, ``ids`` the device's bijection as
    far as this call has bound it."""
    device = next(d for p, d, _, _ in slots if p == where)
    stands_for, counterpart = ids.to_model.get(theirs), ids.to_target.get(mine)
    kept = any(p == where and d is device and t == theirs for p, d, _, t in previous)
    if kept:
        text = f"{where}: the target kept its block {theirs} there"
    else:
        text = f"{where}: the target put its block {theirs} there"
        if stands_for is not None:
            found = _places(slots, device, model=stands_for, besides=where)
            at = f" (at {_list(found)})" if found else ""
            text += f", which already stands for the model's block {stands_for}{at}"
    if device is Device.GPU and mine == view.null_block:
        return (
            f"{text}; the reference put its null block there: the entry slid out of the sliding"
            " window, and the block that held it is given back"
        )
    if counterpart is None:
        text += f"; the reference put a new block there (its block {mine})"
    else:
        found = _places(slots, device, target=counterpart, besides=where)
        at = f" (at {_list(found)})" if found else ""
        text += f"; the reference put its block {mine} there, the target's block {counterpart}{at}"
    shared = _places(slots, device, target=theirs, besides=where)
    if stands_for is not None and shared and not kept:
        return (
            f"{text}: the target shares one block between {where} and {shared[0]},"
            f" {_why_apart(view, where, shared[0])}"
        )
    model_also = _places(slots, device, model=mine, besides=where)
    if model_also:
        return (
            f"{text}: the reference shares its block between {where} and {model_also[0]},"
            " the target gave this place a block of its own (a copy the reference does not"
            " make, or a cached block it did not reuse)"
        )
    return text


def _places(
    slots: list[Slot],
    device: Device,
    *,
    model: BlockId | None = None,
    target: BlockId | None = None,
    besides: Place,
) -> list[Place]:
    return sorted(
        place
        for place, d, mine, theirs in slots
        if d is device and place != besides and (mine == model or theirs == target)
    )


def _list(places: list[Place]) -> str:
    shown = ", ".join(str(p) for p in places[:3])
    return shown + (f" and {len(places) - 3} more" if len(places) > 3 else "")


def _contents(view: ManagerView, place: Place) -> tuple[ExtraKey, tuple[Token, ...]]:
    """The extra key and the tokens up to the end of the block at ``place``."""
    size = view.config.block_size
    if place.owner == "group":
        group = view.groups[place.id]
        return group.extra_key, group.encoder_tokens[: (place.position + 1) * size]
    seq = view.seqs[place.id]
    return view.groups[seq.group_id].extra_key, seq.tokens[: (place.position + 1) * size]


def _why_apart(view: ManagerView, here: Place, there: Place) -> str:
    """Why the reference gives two places different blocks, in words."""
    if here.owner != there.owner:
        return "a sequence's table and a cross-attention table, which never share a block"
    if here.position != there.position:
        return "at different positions of their tables (a block holds one position's data)"
    (key, tokens), (other_key, other_tokens) = _contents(view, here), _contents(view, there)
    if key != other_key:
        return (
            f"under different extra keys ({show_value(key)} and {show_value(other_key)}):"
            " two requests that must never share data"
        )
    if tokens != other_tokens:
        return (
            f"whose tokens up to there differ ({_tokens(tokens)} and {_tokens(other_tokens)}):"
            " one would read the other's data"
        )
    return (
        "which hold the same tokens under the same extra key: sharing is safe, but the"
        " reference's policy does not share them here (specs/policy.md)"
    )


def not_a_hit(
    before: ManagerView, after: ManagerView, place: Place, device: Device, block: BlockId
) -> str:
    """Why the model's cached ``block`` (as it was before the call) cannot serve ``place`` (as it
    is after) as a cache hit, in words; ``""`` when it could, or when that cannot be told."""
    if place.owner != "sequence":
        return ""
    key, tokens = _contents(after, place)
    start = place.position * after.config.block_size
    return cannot_serve(before.pool(device).blocks.get(block), key, tokens[start:], start)


def cannot_serve(cached: BlockView | None, key: ExtraKey, here: Sequence[Token], start: int) -> str:
    """Why a cached block cannot hold the block of ``here``'s tokens at token ``start`` under
    ``key``, in words; ``""`` when it could, or when it is not a cached block."""
    if cached is None or cached.prefix is None:
        return ""
    if cached.prefix.extra_key != key:
        return (
            f"it was cached under another extra key ({show_value(cached.prefix.extra_key)},"
            f" here {show_value(key)}): two requests that must never share data"
        )
    if cached.tokens != tuple(here):
        return f"it holds other tokens ({_tokens(cached.tokens)}, here {_tokens(tuple(here))})"
    if cached.prefix.num_tokens != start:
        return f"it holds the block at token {cached.prefix.num_tokens}, here {start}"
    return ""


def _tokens(tokens: tuple[Token, ...]) -> str:
    if len(tokens) <= MAX_SHOWN_TOKENS:
        return str(list(tokens))
    return "[…, " + ", ".join(str(t) for t in tokens[-MAX_SHOWN_TOKENS:]) + "]"
