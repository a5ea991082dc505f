"""Everything the pool protocol lets a caller read of a pool, taken at once, so that a failed
call can be held to changing nothing (invariant I6; ``specs/oracle.md`` §1, pool level).

A pool says little by its required operations: after a failed copy-on-write only the free count
would show a change, and a reference count lowered on a block that stays held, or a hash left
pointing at the wrong block, would pass unseen and surface calls later, blamed on an innocent
call. So a reading also takes, where the pool offers them, each known block through ``block()``
(its ref count, tokens, hash, prefix, computed mark and access time) and the hash lookup
(``lookup``) of the cached hashes and of the hash the call itself would cache. A reading before
the call and one after a raise must be equal; after a call that succeeded, each block and lookup
must read as the model's (``differences``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from pagedkv.model_tests.lockstep.calls import TargetStopped, exact_answer
from pagedkv.model_tests.lockstep.show import show_value
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.pool_view import BlockView, PoolView
from pagedkv.specs.types import BlockHash, BlockId

Answer = tuple[str, Any]
"""("is", a value) or ("raised", the error's class name): a read that raised is a reading too."""


@dataclass(frozen=True)
class PoolReading:
    free: Answer
    blocks: dict[BlockId, Answer]
    lookups: dict[BlockHash, Answer]


def _ask(method: Callable[[], Callable[..., Any]], *args: Any) -> Answer:
    """``method()(*args)``, e.g. ``_ask(lambda: target.block, b)``: the method is read inside
    too, so that a target that fails to give it answers with the error."""
    try:
        return ("is", method()(*args))
    except (KeyboardInterrupt, TargetStopped):
        raise
    except BaseException as error:  # as ``run_call``: a read that raised is a reading too
        return ("raised", type(error).__name__)


def offers(target: Any, method: str) -> bool:
    return callable(getattr(target, method, None))


def read_pool(target: Any, blocks: Iterable[BlockId], hashes: Iterable[BlockHash]) -> PoolReading:
    """The free count, and ``block()`` / ``lookup`` where ``target`` offers them."""
    has_block, has_lookup = offers(target, "block"), offers(target, "lookup")
    free = _ask(lambda: target.num_free_blocks)
    if free[0] == "is":  # as its exact value: an answer equal to every other hides a change
        free = ("is", exact_answer("pool", "num_free_blocks", "num_free_blocks()", free[1]))
    return PoolReading(
        free,
        {b: _ask(lambda: target.block, b) for b in sorted(set(blocks))} if has_block else {},
        {h: _ask(lambda: target.lookup, h) for h in sorted(set(hashes))} if has_lookup else {},
    )


def reread(target: Any, before: PoolReading) -> PoolReading:
    """The same questions as ``before`` asked again."""
    return read_pool(target, before.blocks, before.lookups)


def changes(
    before: PoolReading, after: PoolReading, name: Callable[[BlockId], str] = str
) -> list[str]:
    """What differs, in words; ``name`` says a target block's id as the reader knows it."""
    found = []
    if before.free != after.free:
        found.append(f"its free count went from {_answer(before.free)} to {_answer(after.free)}")
    for block, was in before.blocks.items():
        now = after.blocks[block]
        if was != now:
            found.append(f"block {name(block)}: {_block_change(was, now)}")
    for content_hash, was in before.lookups.items():
        now = after.lookups[content_hash]
        if was != now:
            found.append(
                f"lookup({show_value(content_hash)}) gave {_lookup(was, name)} before and"
                f" {_lookup(now, name)} after"
            )
    return found


def differences(
    model: PoolView, target: Any, ids: dict[BlockId, BlockId], name: Callable[[BlockId], str]
) -> list[str]:
    """Where a target that offers ``block()`` / ``lookup()`` reads otherwise than the model:
    each block the model holds or caches that has a counterpart (``ids``: the model's block to
    the target's), and the lookup of each cached hash."""
    found = []
    if offers(target, "block"):
        for block, view in model.blocks.items():
            theirs = ids.get(block)
            if theirs is None or (view.ref_count == 0 and view.content_hash is None):
                continue
            answer = _ask(lambda: target.block, theirs)
            if answer != ("is", view):
                found.append(f"block {name(theirs)}: {_block_change(('is', view), answer)}")
    if offers(target, "lookup"):
        for content_hash, block in model.cached.items():
            answer = _ask(lambda: target.lookup, content_hash)
            if answer != ("is", ids.get(block)):
                found.append(
                    f"lookup({show_value(content_hash)}) gave {_lookup(answer, name)}, not"
                    f" block {name(ids[block]) if block in ids else block}"
                )
    return found


def _answer(answer: Answer) -> str:
    kind, value = answer
    return f"raised {value}" if kind == "raised" else show_value(value)


def _lookup(answer: Answer, name: Callable[[BlockId], str]) -> str:
    kind, value = answer
    if kind == "raised":
        return f"an error ({value})"
    return "no block" if value is None else f"block {name(value)}"


def _block_change(was: Answer, now: Answer) -> str:
    """Field by field for two ``BlockView``s; else the two answers."""
    if was[0] == now[0] == "is" and isinstance(was[1], BlockView) and isinstance(now[1], BlockView):
        parts = []
        for field in fields(BlockView):
            old, new = getattr(was[1], field.name), getattr(now[1], field.name)
            if old != new:
                parts.append(f"{field.name.replace('_', ' ')} {_field(old)} -> {_field(new)}")
        return ", ".join(parts)
    return f"{_answer(was)} -> {_answer(now)}"


def _field(value: object) -> str:
    if isinstance(value, tuple):
        return show_value(list(value))
    return show_value(value)


def hash_of_call(
    method: str,
    args: tuple[Any, ...],
    block_size: int,
    tokens_of: Callable[[BlockId], tuple[int, ...] | None],
) -> BlockHash | None:
    """The hash ``method(*args)`` would give a block it fills (``allocate_immutable``, or an
    ``append_tokens`` that fills its block), when the arguments make one; ``tokens_of`` tells
    what a block already holds (None: not known). A failed call must not leave it cached."""
    filled = block_of_call(method, args, block_size, tokens_of)
    return None if filled is None else filled[0].child_hash(filled[1])


def block_of_call(
    method: str,
    args: tuple[Any, ...],
    block_size: int,
    tokens_of: Callable[[BlockId], tuple[int, ...] | None],
) -> tuple[Prefix, tuple[int, ...]] | None:
    """The full block ``method(*args)`` commits, as its prefix and tokens, when the arguments
    make one (see ``hash_of_call``)."""
    try:
        if method == "allocate_immutable" and isinstance(args[0], Prefix):
            tokens = tuple(args[1])
        elif method == "append_tokens" and isinstance(args[1], Prefix):
            held = tokens_of(args[0])
            if held is None:
                return None
            tokens = (*held, *args[2])
        else:
            return None
        if len(tokens) != block_size:
            return None
        prefix: Prefix = args[0] if method == "allocate_immutable" else args[1]
        prefix.child_hash(tokens)  # arguments of the wrong shape fail here
        return prefix, tokens
    except Exception:  # arguments of the wrong shape, on purpose: no block
        return None
