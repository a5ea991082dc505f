"""An ``int`` subclass is an int, judged by its value (``specs/block_pool.md`` §5): its own
comparisons may say anything. Before, ``Liar(-5)`` passed the token range check by claiming to be
at least 0, ``can_allocate`` answered OK and ``allocate`` raised an untyped ``struct.error``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.errors import ForeignBlockError, InvalidArgumentError
from pagedkv.specs.types import DefragConfig, ManagerConfig, PoolConfig
from pagedkv.specs.validation import (
    check_block_id,
    check_count,
    check_defrag_id,
    check_id,
    check_tokens,
)


class Liar(int):
    """An int that says it lies between any two bounds, whatever its value."""

    def __ge__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False


class NoValue(int):
    """An int whose ``__int__`` answers something else than an int."""

    def __int__(self) -> int:
        return "seven"  # type: ignore[return-value]


CONFIG = ManagerConfig(block_size=4, num_gpu_blocks=8, num_cpu_blocks=4, enable_caching=True)
MANAGERS: dict[str, Callable[[], Any]] = {
    "reference": lambda: ReferenceBlockSpaceManager(CONFIG),
    "optimized": lambda: OptimizedBlockSpaceManager(CONFIG),
}


@pytest.mark.parametrize("make", list(MANAGERS.values()), ids=list(MANAGERS))
@pytest.mark.parametrize(
    "prompt",
    [[1, 2, Liar(-5)], (Liar(-1),), [1, Liar(2**64)], [Liar(2**63)]],
    ids=["negative in a list", "negative in a tuple", "2**64", "2**63"],
)
def test_a_lying_token_is_refused_by_its_value(make: Callable[[], Any], prompt: Any) -> None:
    manager = make()
    before = manager.view()
    with pytest.raises(InvalidArgumentError, match="token ids are ints"):
        manager.can_allocate(prompt)
    with pytest.raises(InvalidArgumentError, match="token ids are ints"):
        manager.allocate(1, [1], prompt)
    assert manager.view() == before


@pytest.mark.parametrize("make", list(MANAGERS.values()), ids=list(MANAGERS))
def test_a_valid_subclass_token_is_kept_as_its_plain_value(make: Callable[[], Any]) -> None:
    manager = make()
    manager.allocate(1, [1], [Liar(3), 4, 5])
    tokens = manager.view().seqs[1].tokens
    assert list(tokens) == [3, 4, 5]
    assert all(type(token) is int for token in tokens)


@pytest.mark.parametrize(
    "make", [ReferenceBlockPool, OptimizedBlockPool], ids=["reference", "optimized"]
)
def test_a_pool_judges_a_lying_block_id_by_its_value(make: Callable[[PoolConfig], Any]) -> None:
    pool = make(PoolConfig(num_blocks=4, block_size=2, enable_caching=False))
    with pytest.raises(ForeignBlockError, match="block -1 is not in this pool"):
        pool.free(Liar(-1))


def test_the_shared_checks_judge_values() -> None:
    pool = PoolConfig(num_blocks=4, block_size=2, enable_caching=False)
    with pytest.raises(ForeignBlockError):
        check_block_id(pool, Liar(9))
    with pytest.raises(ForeignBlockError):
        check_defrag_id(DefragConfig(num_blocks=4), Liar(-2))
    with pytest.raises(InvalidArgumentError):
        check_count("num_lookahead_slots", Liar(-1))
    with pytest.raises(InvalidArgumentError):
        check_tokens([Liar(-1)])
    with pytest.raises(InvalidArgumentError, match="token ids are ints"):
        check_tokens([1, NoValue(7)])
    with pytest.raises(InvalidArgumentError, match="sequence id must be an int"):
        check_id("sequence", NoValue(7))
    assert type(check_id("sequence", Liar(7))) is int
    assert type(check_block_id(pool, Liar(2))) is int
