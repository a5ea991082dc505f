"""The pool's batch operations (``specs/block_pool.md`` §5, batches), each a fold of the single
operation it stands for over the frozen state. Each returns the trail of states, the one after
each item, so that the adapter publishes each item's KV events in turn, as the single calls
would; a failure anywhere raises before the adapter keeps any of it, so a failed batch leaves
the pool as it was."""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.reference import block_pool as ops
from pagedkv.reference.pool_state import PoolState
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.types import BlockId, Token
from pagedkv.specs.validation import check_batch, in_batch


def allocate_immutable_chain(
    state: PoolState, prefix: Prefix, token_blocks: Sequence[Sequence[Token]]
) -> tuple[list[PoolState], list[BlockId]]:
    """``allocate_immutable`` of each full block in turn, each after ``prefix`` extended by the
    blocks before it: a prompt's full blocks in one call."""
    trail: list[PoolState] = []
    taken: list[BlockId] = []
    for index, tokens in enumerate(check_batch("token_blocks", token_blocks)):
        try:
            state, block = ops.allocate_immutable(state, prefix, tokens)
        except PagedKVError as error:
            raise in_batch(error, "token_blocks", index) from None
        trail.append(state)
        taken.append(block)
        prefix = prefix.extend(tokens)
    return trail, taken


def free_blocks(state: PoolState, blocks: Sequence[BlockId]) -> list[PoolState]:
    """``free`` of each block in the order given: a sequence's blocks given back in one call."""
    trail: list[PoolState] = []
    for index, block in enumerate(check_batch("blocks", blocks)):
        try:
            state = ops.free(state, block)
        except PagedKVError as error:
            raise in_batch(error, "blocks", index) from None
        trail.append(state)
    return trail
