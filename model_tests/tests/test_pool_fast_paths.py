"""The optimized pool's public calls check the common input at C speed and leave the rest to the
shared checks (``optimized/block_pool.py``): a prefix checked once is remembered by identity
(``optimized/checked_prefixes.py``), a block's tokens are packed once for both their check and
their hash, and the caller's ``Prefix.extend`` reads the hash the pool just computed
(``specs/content_hash.py``). Each shortcut must give the reference's answer, and raise its error
with its message, for input next to the common case: a prefix remembered but the block, the
tokens or the room wrong; a token one past the bound at every position; a prefix checked by a
pool of another block size; a lookalike of the last block hashed."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.optimized.tokens import packed_tokens
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import (
    ROOT,
    Prefix,
    block_hash,
    encode_extra_key,
    packed_block_hash,
    packed_blocks_chain,
    remember_block_hash,
)
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.types import MAX_TOKEN, ExtraKey, PoolConfig

SIZE = 4
KEY = ExtraKey(lora_id=3, cache_salt="s")


def both() -> list[Any]:
    config = PoolConfig(num_blocks=6, block_size=SIZE, enable_caching=True, first_id=2)
    return [ReferenceBlockPool(config), OptimizedBlockPool(config)]


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except PagedKVError as error:
        return (type(error).__name__, str(error))


def same(pools: list[Any], call: Callable[[Any], Any]) -> tuple[str, Any]:
    reference, optimized = (outcome(partial(call, pool)) for pool in pools)
    assert optimized == reference
    assert pools[1].view() == pools[0].view()
    return reference


BAD_TOKENS: list[Any] = [
    (),
    [],
    (True,),
    (-1,),
    (MAX_TOKEN + 1,),
    (2**64,),
    (1.0,),
    ("1",),
    (1, 2, 3, 4, 5),
    [1, MAX_TOKEN + 1],
    [1, False],
    (1, -2),
    "ab",
    None,
]


@pytest.mark.parametrize("tokens", BAD_TOKENS, ids=repr)
def test_an_append_under_a_remembered_prefix_still_refuses_bad_tokens(tokens: Any) -> None:
    pools = both()
    prefix = Prefix(ROOT, 0, KEY)
    block = same(pools, lambda pool: pool.allocate_mutable())[1]
    same(pools, lambda pool: pool.append_tokens(block, prefix, [7]))  # the prefix remembered
    kind, _ = same(pools, lambda pool: pool.append_tokens(block, prefix, tokens))
    assert kind != "ok"


@pytest.mark.parametrize("block", [0, 1, 8, 3, 4, True, 2.0, "2", None], ids=repr)
def test_an_append_under_a_remembered_prefix_still_refuses_a_bad_block(block: Any) -> None:
    """Ids outside the pool (below first_id, past its end), a free block (3), a cached one (4),
    and ids that are not plain ints."""
    pools = both()
    prefix = Prefix(ROOT, 0, KEY)
    held = same(pools, lambda pool: pool.allocate_mutable())[1]
    full = same(pools, lambda pool: pool.allocate_mutable())[1]
    same(pools, lambda pool: pool.append_tokens(held, prefix, (7,)))
    same(pools, lambda pool: pool.append_tokens(full, prefix, (1, 2, 3, 4)))  # cached when freed
    same(pools, lambda pool: pool.free(full))
    kind, _ = same(pools, lambda pool: pool.append_tokens(block, prefix, (8,)))
    assert kind != "ok"


FILLING_BAD_TOKENS: list[Any] = [  # the bad token last: a fill of a block holding some has it
    (1, 2, 3, True),
    [1, 2, 3, MAX_TOKEN + 1],
    (1, 2, 3, 2**64 - 1),
    [1, 2, 3, -1],
    (1, 2, 3, 1.0),
    (1, 2, 3, 2**64),
    [1, 2, 3, False],
]


@pytest.mark.parametrize("held", [0, 1, 3])
@pytest.mark.parametrize("tokens", FILLING_BAD_TOKENS, ids=repr)
def test_bad_tokens_that_would_fill_the_block_are_refused(tokens: Any, held: int) -> None:
    """Tokens that would fill a block, empty or not, are refused as the reference refuses them,
    on ``append_tokens``'s fast path too (the tokens packed and range-checked in C)."""
    pools = both()
    prefix = Prefix(ROOT, 0, KEY)
    block = same(pools, lambda pool: pool.allocate_mutable())[1]
    if held:
        same(pools, lambda pool: pool.append_tokens(block, prefix, list(range(held))))
    kind, _ = same(pools, lambda pool: pool.append_tokens(block, prefix, tokens[held:]))
    assert kind != "ok"


def test_room_shared_blocks_and_filling_under_a_remembered_prefix() -> None:
    pools = both()
    prefix = Prefix(ROOT, 0, KEY)
    block = same(pools, lambda pool: pool.allocate_mutable())[1]
    same(pools, lambda pool: pool.append_tokens(block, prefix, (1, 2)))
    assert same(pools, lambda pool: pool.append_tokens(block, prefix, (3, 4, 5)))[0] != "ok"
    same(pools, lambda pool: pool.fork([block]))
    copy = same(pools, lambda pool: pool.append_tokens(block, prefix, [3]))[1]  # copy-on-write
    assert copy != block
    same(pools, lambda pool: pool.clear_copy_on_writes())
    filled = same(pools, lambda pool: pool.append_tokens(copy, prefix, (4,)))[1]
    other = same(pools, lambda pool: pool.append_tokens(block, prefix, [3, 4]))[1]
    assert other == filled  # dedup onto the block cached a call before
    assert pools[1].lookup(block_hash(ROOT, (1, 2, 3, 4), KEY)) == filled


@pytest.mark.parametrize(
    "prefix",
    [
        Prefix(ROOT, 2, KEY),
        Prefix(ROOT[:31], 0, KEY),
        Prefix(ROOT, -4, KEY),
        Prefix(ROOT, True, KEY),
        Prefix(ROOT, 0, ExtraKey(lora_id=-1)),
        Prefix(ROOT, 0, ExtraKey(cache_salt="\ud800")),
        Prefix(bytearray(ROOT), 0, KEY),  # type: ignore[arg-type]
        (ROOT, 0, KEY),
        None,
    ],
    ids=repr,
)
def test_bad_prefixes_are_refused_by_every_call_that_takes_one(prefix: Any) -> None:
    pools = both()
    good = Prefix(ROOT, 0, KEY)
    block = same(pools, lambda pool: pool.allocate_mutable())[1]
    same(pools, lambda pool: pool.append_tokens(block, good, (7,)))
    assert same(pools, lambda pool: pool.append_tokens(block, prefix, (8,)))[0] != "ok"
    assert same(pools, lambda pool: pool.append_tokens(block, prefix, (8, 9, 10)))[0] != "ok"
    assert same(pools, lambda pool: pool.allocate_immutable(prefix, (1, 2, 3, 4)))[0] != "ok"


def test_a_prefix_checked_by_one_pool_is_checked_again_by_a_pool_of_another_block_size() -> None:
    prefix = Prefix(ROOT, 4, KEY)  # whole blocks of 4, not of 8
    small = OptimizedBlockPool(PoolConfig(num_blocks=4, block_size=4))
    small.append_tokens(small.allocate_mutable(), prefix, (1,))
    reference = ReferenceBlockPool(PoolConfig(num_blocks=4, block_size=8))
    large = OptimizedBlockPool(PoolConfig(num_blocks=4, block_size=8))
    expected = outcome(lambda: reference.append_tokens(reference.allocate_mutable(), prefix, (1,)))
    assert expected[0] == "InvalidArgumentError"
    assert outcome(lambda: large.append_tokens(large.allocate_mutable(), prefix, (1,))) == expected


@pytest.mark.parametrize("tokens", [*BAD_TOKENS, (1, 2, 3), [1, 2, 3, 4, 5]], ids=repr)
def test_allocate_immutable_refuses_what_the_reference_refuses(tokens: Any) -> None:
    pools = both()
    assert same(pools, lambda pool: pool.allocate_immutable(Prefix(ROOT, 0, KEY), tokens))[0] != (
        "ok"
    )


def allocate(pool: Any, prefix: Prefix, tokens: Any) -> Any:
    return pool.allocate_immutable(prefix, tokens)


def test_allocate_immutable_of_plain_blocks_agrees_and_hashes_as_the_spec() -> None:
    pools = both()
    prefix = Prefix(ROOT, 0, KEY)
    for tokens in ([1, 2, 3, 4], (1, 2, 3, 4), (MAX_TOKEN, 0, 5, 6)):
        block = same(pools, partial(allocate, prefix=prefix, tokens=tokens))[1]
        assert pools[1].hash_of(block) == block_hash(ROOT, tuple(tokens), KEY)
    same(pools, lambda pool: pool.hit_rate())


@pytest.mark.parametrize("bad", [MAX_TOKEN + 1, 2**64 - 1, 2**64, -1])
def test_a_token_past_the_bound_is_seen_at_every_position_of_a_packed_block(bad: int) -> None:
    for length in range(1, 20):
        assert packed_tokens([MAX_TOKEN] * length) is not None
        for position in range(length):
            tokens: list[object] = [MAX_TOKEN] * length
            tokens[position] = bad
            assert packed_tokens(tokens) is None, (length, position)
            assert packed_tokens(tuple(tokens)) is None, (length, position)


def test_packed_hashes_are_the_spec_hashes() -> None:
    for key in (ExtraKey(), KEY, ExtraKey(lora_id=0), ExtraKey(cache_salt="")):
        for tokens in ((), (0,), (1, 2, 3), tuple(range(16)), (MAX_TOKEN,)):
            packed = packed_tokens(tokens)
            assert packed is not None
            assert packed_block_hash(ROOT, packed, encode_extra_key(key)) == block_hash(
                ROOT, tokens, key
            )
    blocks = [(1, 2, 3), (MAX_TOKEN, 0, 7), (4, 5, 6)]
    packed_blocks = [packed_tokens(block) or b"" for block in blocks]
    for key in (ExtraKey(), KEY):
        expected, parent = [], ROOT
        for block in blocks:
            parent = block_hash(parent, block, key)
            expected.append(parent)
        assert packed_blocks_chain(ROOT, packed_blocks, encode_extra_key(key)) == expected
    assert packed_blocks_chain(ROOT, [], b"\x00\x00") == []


def test_the_last_hash_remembered_is_read_only_for_the_same_block() -> None:
    """``Prefix.child_hash`` reads the remembered hash for the same parent (the same object),
    the same key object and equal tokens; any lookalike is hashed for itself."""
    prefix = Prefix(ROOT, 0, KEY)
    tokens = (1, 2, 3, 4)
    remember_block_hash(prefix.hash, tokens, prefix.extra_key, b"remembered" * 3 + b"!!")
    assert prefix.child_hash(list(tokens)) == b"remembered" * 3 + b"!!"
    assert prefix.child_hash((1, 2, 3, 5)) == block_hash(ROOT, (1, 2, 3, 5), KEY)
    assert prefix.child_hash((1, 2, 3)) == block_hash(ROOT, (1, 2, 3), KEY)
    equal_key = ExtraKey(lora_id=3, cache_salt="s")
    assert Prefix(ROOT, 0, equal_key).child_hash(tokens) == block_hash(ROOT, tokens, KEY)
    other_parent = bytes(bytearray(ROOT))
    assert Prefix(other_parent, 0, KEY).child_hash(tokens) == block_hash(ROOT, tokens, KEY)
    assert Prefix(b"\x01" * 32, 0, KEY).child_hash(tokens) == block_hash(b"\x01" * 32, tokens, KEY)
    remember_block_hash(b"", (), ExtraKey(), b"")
    assert prefix.extend(tokens).hash == block_hash(ROOT, tokens, KEY)
