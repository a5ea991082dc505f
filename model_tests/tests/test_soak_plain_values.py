"""A target's state is compared as Python's own values (``oracle/plain_state.py``): a value of
the target's that answers ``==`` for itself cannot make a wrong state equal to the model's.

Found by a user's tryout of the wheel: ``pagedkv soak --exact`` said PASS for a subclass that put
a stray entry in its pool's hash index, a ``dict`` subclass whose ``==`` says yes, and for one
that gave a free block a token in a ``bytes`` subclass that does the same (the second since the
soak compared compact states; the first once pools were compared by fingerprint)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.oracle.plain_state import (
    ForeignValue,
    check_exact,
    same_plain,
)
from pagedkv.model_tests.oracle.request_soak import RequestLockstep
from pagedkv.model_tests.oracle.soak import soak
from pagedkv.model_tests.oracle.soak_model import OPTIMIZED, REFERENCE, Model
from pagedkv.model_tests.tests.false_pass_targets import AgreeableInt
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.specs.request_types import RequestConfig
from pagedkv.specs.types import ExtraKey, ManagerConfig

STRAY = b"\xee" * 32
"""A content hash no prompt makes."""


class SaysEqualDict(dict[Any, Any]):
    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = None

    def copy(self) -> SaysEqualDict:
        return SaysEqualDict(self)


class SaysEqualBytes(bytes):
    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = bytes.__hash__


class StrayIndexEntry(OptimizedBlockSpaceManager):
    """Its GPU pool's hash index a ``SaysEqualDict``, and a stray entry in it at the first free."""

    def __init__(self, config: ManagerConfig) -> None:
        super().__init__(config)
        self._gpu._cached = SaysEqualDict()
        self._strayed = False

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        if not self._strayed:
            self._strayed = True
            self._gpu._cached[STRAY] = self._gpu._end_id - 1


class TokensOnAFreeBlock(OptimizedBlockSpaceManager):
    """At the first free, a free GPU block given a token in ``bytes`` that say they are equal."""

    strayed = False
    plain_bytes = False

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        if self.strayed:
            return
        pool = self._gpu
        for index in range(len(pool._tokens) - 1, -1, -1):
            if pool._ref_counts[index] == 0 and not pool._tokens[index]:
                token = b"\x05" + b"\x00" * 7
                pool._tokens[index] = token if self.plain_bytes else SaysEqualBytes(token)
                self.strayed = True
                return


class TokensOnAFreeBlockPlainly(TokensOnAFreeBlock):
    """The control: the same token in plain ``bytes``."""

    plain_bytes = True


@pytest.mark.parametrize("model", [OPTIMIZED, REFERENCE], ids=["optimized model", "reference"])
@pytest.mark.parametrize(
    "target",
    [StrayIndexEntry, TokensOnAFreeBlock, TokensOnAFreeBlockPlainly],
    ids=["a dict that says equal", "bytes that say equal", "plain bytes"],
)
def test_a_state_that_only_says_it_is_equal_fails(target: Any, model: Model) -> None:
    result = soak(target, 3000, 1, exact=True, model=model)
    assert not result.passed, "a wrong state passed"
    assert result.own_bug is None, result.own_bug
    assert result.calls is not None and len(result.calls) <= 4, result.calls


CONFIG = ManagerConfig(block_size=2, num_gpu_blocks=6, num_cpu_blocks=2, enable_caching=True)


def _state() -> Any:
    manager = OptimizedBlockSpaceManager(CONFIG)
    manager.allocate(1, [1], [3, 1, 4, 1, 5], ExtraKey(lora_id=2))
    return manager.compact()


def test_a_state_of_python_s_own_values_passes() -> None:
    state = _state()
    assert same_plain(state, _state())
    assert not same_plain(state, OptimizedBlockSpaceManager(CONFIG).compact())


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s._replace(gpu=s.gpu._replace(cached=SaysEqualDict(s.gpu.cached))),
        lambda s: s._replace(seqs=SaysEqualDict(s.seqs)),
        lambda s: s._replace(gpu=s.gpu._replace(keys=list(map(Key.of, s.gpu.keys)))),
        lambda s: s._replace(gpu=tuple(s.gpu)),
        lambda s: tuple(s),
    ],
    ids=["dict subclass", "rows in a dict subclass", "an ExtraKey subclass", "a bare pool", "bare"],
)
def test_what_is_not_python_s_own_is_refused(change: Any) -> None:
    with pytest.raises(ForeignValue):
        same_plain(_state(), change(_state()))


class Key(ExtraKey):
    @staticmethod
    def of(key: ExtraKey | None) -> ExtraKey | None:
        return None if key is None else Key(key.lora_id, key.cache_salt)


def test_bytes_that_answer_for_themselves_are_refused() -> None:
    """Equal by ``==`` whatever they hold, so refused before any comparison."""
    state = _state()
    other = [SaysEqualBytes(b"\x07" * len(t)) for t in state.gpu.tokens]
    wrong = state._replace(gpu=state.gpu._replace(tokens=other))
    assert wrong == state  # what the comparison used to trust
    with pytest.raises(ForeignValue, match="SaysEqualBytes among a pool's tokens"):
        same_plain(state, wrong)


def test_a_views_comparable_values_are_python_s_own_or_the_spec_s() -> None:
    """What the checkpoints compare of a view: real views pass; anything of a user's fails."""
    manager = OptimizedBlockSpaceManager(CONFIG)
    manager.allocate(1, [1, 2], [3, 1, 4, 1, 5], ExtraKey(lora_id=2))
    check_exact(manager.view().comparable())
    requests = RequestManager(RequestConfig(num_blocks=8, block_size=2, enable_caching=True))
    check_exact(requests.view().comparable())
    for foreign in (SaysEqualDict(), SaysEqualBytes(b"x"), AgreeableInt(3), (1, [AgreeableInt(2)])):
        with pytest.raises(ForeignValue):
            check_exact(foreign)
    with pytest.raises(ForeignValue, match="Key"):
        check_exact((Key(1, None),))


class FreeQueueThatSaysEqual(RequestManager):
    """A view whose free queue holds an id that says it equals any other."""

    def view(self) -> Any:
        real = super().view()
        return dataclasses.replace(real, free_queue=(AgreeableInt(99), *real.free_queue[1:]))


def test_a_request_level_checkpoint_reads_the_targets_values_as_python_s_own() -> None:
    config = RequestConfig(num_blocks=8, block_size=2, enable_caching=True)
    side = RequestLockstep(FreeQueueThatSaysEqual, config, exact=True)
    assert side.model.view().comparable() == side.target.view().comparable()  # the lie
    with pytest.raises(Divergence, match="holds a AgreeableInt"):
        side.check_state("at the checkpoint")


def test_a_lookalike_nested_anywhere_is_read_as_what_it_holds() -> None:
    """A bytes-like object passes ``marshal`` wherever it is nested (here where a block id is
    kept): it is read as the plain bytes it holds, which no int equals."""
    state = _state()
    assert state.gpu.cached, "the state caches a block"
    cached = {key: SaysEqualBytes(b"\x00") for key in state.gpu.cached}
    wrong = state._replace(gpu=state.gpu._replace(cached=cached))
    assert wrong == state  # what the comparison used to trust
    assert not same_plain(state, wrong)
    rows = {
        seq: (group, tokens, (AgreeableInt(77),)) for seq, (group, tokens, _) in state.seqs.items()
    }
    with pytest.raises(ForeignValue):
        same_plain(state, state._replace(seqs=rows))
