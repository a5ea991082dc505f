"""The optimized manager's shortcuts take the plain rule's answer at every position: the packed
check of a prompt's tokens (``optimized/tokens.py``) reads the top byte of each token, not of
some. Sampled inputs rarely put the one bad token where a wrong stride skips it (a gap found by
``make mutate``, ``specs/mutation.md``), so every position is tried here. Its append counts
skip the full check for a plain int, and anything else is still refused; the common prefix of
chains is found by a binary search, which must agree with a plain scan. Ids, lookahead counts
and prompts have shortcuts too (a dict hit for a plain int, the prompts checked before
remembered, lists with a copy of their tokens): a value that is not a plain int, a different
prompt, or a list changed since its last check must each still reach the full rule."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import common_length
from pagedkv.optimized.tokens import plain_tokens
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.errors import InvalidArgumentError, UnknownSequenceError
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.types import MAX_TOKEN, AllocStatus, ManagerConfig


@pytest.mark.parametrize("bad", [MAX_TOKEN + 1, 2**64 - 1])
def test_one_token_past_the_bound_is_seen_at_every_position(bad: int) -> None:
    for length in range(1, 40):
        assert plain_tokens([MAX_TOKEN] * length)
        for position in range(length):
            tokens: list[object] = [MAX_TOKEN] * length
            tokens[position] = bad
            assert not plain_tokens(tokens), (length, position)
            assert not plain_tokens(tuple(tokens)), (length, position)


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
@pytest.mark.parametrize("bad", [1.5, True, "1", -1, None])
@pytest.mark.parametrize("argument", ["num_new_tokens", "num_lookahead_slots"])
def test_append_counts_that_skip_the_fast_type_check_are_still_refused(
    factory: Callable[[ManagerConfig], BlockSpaceManager], bad: object, argument: str
) -> None:
    """``can_append_slots`` takes a plain non-negative int without the full check: anything else
    (a float, a bool, a string) must still reach ``check_count`` and be refused."""
    manager = factory(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4))
    manager.allocate(1, [1], [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match=argument):
        manager.can_append_slots(1, **{argument: bad})  # type: ignore[arg-type]
    assert manager.can_append_slots(1, **{argument: 1})


def plain_common_length(chains: list[list[int]], limit: int) -> int:
    length = 0
    while length < limit and all(chain[length] == chains[0][length] for chain in chains):
        length += 1
    return length


def test_the_binary_search_for_a_common_prefix_agrees_with_the_plain_scan() -> None:
    """Every split point of two and three chains, the first position included (a search that
    assumed the first block common was a gap found by ``make mutate``)."""
    for length in range(1, 12):
        base = list(range(length))
        for split in range(length + 1):
            other = base[:split] + [b + 100 for b in base[split:]]
            for chains in ([base, other], [base, base, other], [other, base]):
                for limit in range(length + 1):
                    expected = plain_common_length(chains, limit)
                    assert common_length(chains, limit) == expected, (chains, limit)


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
@pytest.mark.parametrize("bad", [True, 1.0])
def test_an_id_equal_to_a_known_one_but_not_an_int_is_refused(
    factory: Callable[[ManagerConfig], BlockSpaceManager], bad: object
) -> None:
    """``True == 1.0 == 1`` and they hash alike, so a dict looked up with them finds sequence
    and group 1: only the plain int may take the shortcut."""
    manager = factory(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4))
    manager.allocate(1, [1], [1, 2, 3])
    calls: list[tuple[Callable[..., object], tuple[object, ...]]] = [
        (manager.get_block_table, ()),
        (manager.can_swap_out, ()),
        (manager.can_append_slots, (1, 0)),
        (manager.append_slots, ([4],)),
        (manager.access_all_blocks_in_seq, (1.0,)),
        (manager.mark_blocks_as_computed, ()),
    ]
    for call, args in calls:
        with pytest.raises(InvalidArgumentError):
            call(bad, *args)
    assert manager.get_block_table(1) == [0, 1]
    with pytest.raises(UnknownSequenceError):
        manager.access_all_blocks_in_seq(2, 1.0)
    with pytest.raises(UnknownSequenceError):
        manager.mark_blocks_as_computed(2)
    cached = factory(ManagerConfig(2, 4, 4, enable_caching=True))
    cached.allocate(1, [1], [1, 2, 3])
    for seq_ids in ([bad], [1, bad], {0: 1}):  # a dict: not a list, though [0] reads 1
        with pytest.raises(InvalidArgumentError):
            cached.get_common_computed_block_ids(seq_ids)  # type: ignore[arg-type]


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_common_computed_blocks_of_a_tuple_of_ids_is_the_lists(
    factory: Callable[[ManagerConfig], BlockSpaceManager],
) -> None:
    """A tuple is a sequence of ids too: it skips the list's shortcut and takes the checked
    way, which must answer as the shortcut does, for one sequence and for several (a gap
    found by ``make mutate``: that way's one-sequence answer was never read)."""
    manager = factory(ManagerConfig(2, 8, 4, enable_caching=True))
    manager.allocate(1, [1], [1, 2, 3, 4, 5])
    manager.fork(1, 2)
    manager.mark_blocks_as_computed(1)
    assert manager.get_common_computed_block_ids([1]) == [0, 1]
    assert list(manager.get_common_computed_block_ids((1,))) == [0, 1]
    assert list(manager.get_common_computed_block_ids((1, 2))) == [0, 1]
    assert list(manager.get_common_computed_block_ids(())) == []


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
@pytest.mark.parametrize("bad", [True, 1.0, -1])
def test_lookahead_that_skips_the_fast_type_check_is_still_refused(
    factory: Callable[[ManagerConfig], BlockSpaceManager], bad: object
) -> None:
    manager = factory(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=4))
    manager.allocate(1, [1], [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="num_lookahead_slots"):
        manager.can_allocate([1], bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="num_lookahead_slots"):
        manager.append_slots(1, [4], bad)  # type: ignore[arg-type]
    assert manager.get_block_table(1) == [0, 1]


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_each_prompt_is_read_for_itself(
    factory: Callable[[ManagerConfig], BlockSpaceManager],
) -> None:
    """A prompt checked once is remembered: another prompt (tuple or list) is read for itself;
    a list changed since is checked again; a missing prompt, or one that is no list or tuple, is
    refused (first, before any prompt is remembered)."""
    manager = factory(ManagerConfig(block_size=1, num_gpu_blocks=4, num_cpu_blocks=4))
    not_prompts: list[object] = [None, (), [], b"ab", {1: 2}]  # bytes, a dict's keys: ints
    for missing in not_prompts:
        with pytest.raises(InvalidArgumentError):
            manager.can_allocate(missing)  # type: ignore[arg-type]
    assert manager.can_allocate((1, 2, 3)) is AllocStatus.OK
    assert manager.can_allocate((1, 2, 3, 4, 5)) is AllocStatus.NEVER
    assert manager.can_allocate((1,)) is AllocStatus.OK
    assert manager.can_allocate([1, 2, 3, 4, 5]) is AllocStatus.NEVER
    prompt = [1, 2]
    assert manager.can_allocate(prompt) is AllocStatus.OK
    prompt.append(-1)
    with pytest.raises(InvalidArgumentError):
        manager.can_allocate(prompt)


CHANGES: list[tuple[str, Callable[[list[object]], None]]] = [
    ("a value", lambda p: p.__setitem__(2, -1)),
    ("a length", lambda p: p.append(-1)),
    ("an equal bool for 1", lambda p: p.__setitem__(1, True)),
    ("an equal bool for 0", lambda p: p.__setitem__(0, False)),
    ("an equal float for 1", lambda p: p.__setitem__(1, 1.0)),
    ("an equal float for 7", lambda p: p.__setitem__(2, 7.0)),
    ("an equal Decimal for 300", lambda p: p.__setitem__(3, Decimal(300))),
    ("an equal Fraction for 2**40", lambda p: p.__setitem__(4, Fraction(2**40))),
]


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
@pytest.mark.parametrize("change", CHANGES, ids=[name for name, _ in CHANGES])
@pytest.mark.parametrize("filler", [0, 300], ids=["short", "long"])
def test_a_remembered_list_changed_in_place_is_checked_again(
    factory: Callable[[ManagerConfig], BlockSpaceManager],
    change: tuple[str, Callable[[list[object]], None]],
    filler: int,
) -> None:
    """The scheduler's own list, asked about twice (so it is remembered), then changed in place:
    a new value, a longer list, or a token replaced by an equal bool, float, Decimal or Fraction
    (``==`` cannot tell those from the tokens they replaced) is refused, by ``can_allocate`` and
    by ``allocate``, which changes nothing. A long prompt is compared another way (one memory
    comparison, ``optimized/same_objects.py``) than a short one (item by item)."""
    manager = factory(ManagerConfig(block_size=2, num_gpu_blocks=256, num_cpu_blocks=4))
    prompt: list[object] = [0, 1, 7, 300, 2**40, *range(1000, 1000 + filler)]
    for _ in range(2):
        assert manager.can_allocate(prompt) is AllocStatus.OK  # type: ignore[arg-type]
    change[1](prompt)
    with pytest.raises(InvalidArgumentError):
        manager.can_allocate(prompt)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        manager.allocate(1, [1], prompt)  # type: ignore[arg-type]
    assert manager.get_num_free_gpu_blocks() == 256


@pytest.mark.parametrize("factory", [ReferenceBlockSpaceManager, OptimizedBlockSpaceManager])
def test_a_remembered_list_given_equal_new_ints_is_still_accepted(
    factory: Callable[[ManagerConfig], BlockSpaceManager],
) -> None:
    """A token replaced by an equal int that is another object (a large int made again) is
    checked again and accepted: the memo refuses nothing the plain rule takes."""
    manager = factory(ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4))
    prompt = [0, 1, 7, 300, 2**40]
    for _ in range(2):
        assert manager.can_allocate(prompt) is AllocStatus.OK
    prompt[4] = int(str(2**40))
    assert manager.can_allocate(prompt) is AllocStatus.OK
    manager.allocate(1, [1], prompt)
    assert manager.get_num_free_gpu_blocks() == 5


def test_many_prompts_are_remembered_and_the_oldest_forgotten() -> None:
    """More prompts than the memo holds, each asked about twice, the first changed in place
    after it was forgotten: every answer is the plain rule's."""
    manager = OptimizedBlockSpaceManager(
        ManagerConfig(block_size=2, num_gpu_blocks=8, num_cpu_blocks=4)
    )
    prompts = [[1, 2, n] for n in range(200)]
    for prompt in prompts * 2:
        assert manager.can_allocate(prompt) is AllocStatus.OK
    prompts[0][0] = -1
    with pytest.raises(InvalidArgumentError):
        manager.can_allocate(prompts[0])
    assert manager.can_allocate(prompts[-1]) is AllocStatus.OK
