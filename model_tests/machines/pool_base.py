"""The pool machine's state and its one way to call both sides: the pools and the session built
per run, chains grown block by block (``_grow``, which several rules share), and the
bookkeeping of held blocks. The rules live in ``pool_rules.py`` and ``pool_misuse.py``."""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import initialize, multiple

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.calls import call_both
from pagedkv.model_tests.lockstep.pool_event_ledger import SameEvents, events_hook
from pagedkv.model_tests.lockstep.pool_safety_session import PoolSafetySession
from pagedkv.model_tests.lockstep.pool_session import IsomorphicPoolSession
from pagedkv.model_tests.lockstep.views import Views
from pagedkv.model_tests.machines.draws import FOLLOW_TEMPLATE, integers, small_tokens
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.lockstep_machine import LockstepMachine
from pagedkv.model_tests.machines.pool_chains import (
    CHAINS,
    COPYING,
    EXTRA_KEYS,
    TEMPLATE,
    Chain,
    Mode,
    pool_configs,
    swarms,
)
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import (
    BlockPool,
    BlockPoolFactory,
    PoolBatchFree,
    PoolChainAllocation,
)
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import BlockId, ExtraKey, PoolConfig, Token

T = TypeVar("T")


class PoolMachineBase(LockstepMachine):
    """Subclass and set ``make_target`` to check another pool against the reference."""

    make_target: ClassVar[BlockPoolFactory]
    mode: ClassVar[Mode] = "exact"
    contract: ClassVar[str] = "any"
    """``scheduler``: no calls meant to fail (a pool's caller passes what it was given)."""
    chains = CHAINS

    def __init__(self) -> None:
        super().__init__()
        self.model: ReferenceBlockPool | None = None
        self.target: BlockPool
        self.live: list[Chain] = []
        self.clock = 0.0
        self.calls = 0
        self.pending: capture.RecordedCall | None = None
        self.checking_config: PoolConfig | None = None
        self.evictions = 0

    @initialize(
        target=CHAINS,
        config=pool_configs,
        keys=st.lists(st.sampled_from(EXTRA_KEYS), min_size=2, max_size=3),
        off=swarms,
        data=DATA,
    )
    def create_pools(
        self, config: PoolConfig, keys: list[ExtraKey], off: frozenset[str], data: st.DataObject
    ) -> Any:
        """Two or three chains start with prompts along the template, so the first steps
        already find shared prefixes, cache hits and a nearly full pool."""
        self.target = capture.build_target(self, config)
        self.config = config
        self.off = off
        for name in sorted(off):
            event(f"swarm: without {name}")
        if not self.on("extra keys"):
            keys = [ExtraKey() for _ in keys]
        self.session: IsomorphicPoolSession | PoolSafetySession | None = None
        if self.mode == "safety":
            self.session = PoolSafetySession(self.target, config)
        else:
            self.model = ReferenceBlockPool(config, self.policy)
            self.same_events = SameEvents(self.model.take_events, events_hook(self.target))
            if self.mode == "isomorphic":
                self.session = IsomorphicPoolSession(self.model, self.target)
        self.views = Views(self.model, self.target)
        self._report_unchecked_batches()
        self.passed_invariants: tuple[object, Counter[BlockId]] | None = None
        """The model's state and the holders the invariants last passed on."""
        event(f"config: caching={config.enable_caching}")
        self.live = [Chain(key) for key in keys]
        for chain in self.live:
            for _ in range(data.draw(st.integers(0, 3), label="prompt operations")):
                self._grow(chain, data)
        return multiple(*self.live)

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def ended(self) -> bool:
        """A failed call left the target in a state nothing defines: the run makes no more
        calls."""
        return bool(getattr(self.session, "ended", False))

    def both(self, call: PoolCall[T]) -> T | PagedKVError:
        method = call.name
        skipped = self.not_made(method)
        if skipped is not None:
            return skipped
        self.calls += 1
        self.views.changed()
        if self.session is None:
            assert self.model is not None
            outcome = call_both(self.model, self.target, call, "pool")
            self.same_events.check(method)
            return outcome
        self.pending = (method, call.args)
        outcome = self.session.call(call)
        self.pending = None
        if self.ended:
            assert isinstance(outcome, PagedKVError)  # a run ends on a failed call
            self.ending_error = outcome
        elif method in COPYING and self._drains_each_call():
            self.both(calls.clear_copy_on_writes())
        return outcome

    def _drains_each_call(self) -> bool:
        """A pool that keeps its copy-on-write pairs as recorded (``cow_pairs=as_recorded``)
        relies on its caller draining them after every call that can record one, as vLLM
        0.6.3's manager does in ``append_slots``: a pair left waiting while its destination is
        given back and handed out again would overwrite the new holder's data. The safety tier
        checks the pool under that contract."""
        return self.mode == "safety" and self.policy.cow_pairs == "as_recorded"

    def _tokens(self, data: st.DataObject, chain: Chain, count: int) -> list[Token]:
        if data.draw(FOLLOW_TEMPLATE, label="follow template"):
            start = chain.num_tokens
            return [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(count)]
        return data.draw(small_tokens(count, 2))

    def offers(self, method: str) -> bool:
        return method not in self.policy.unsupported

    def batches(self, protocol: type) -> bool:
        """Whether to draw a batch operation (``block_pool.md`` §5, batches): where the target
        offers it (``PoolChainAllocation``, ``PoolBatchFree``), in exact mode, and
        ``free_blocks`` in isomorphic mode too (the isomorphic session adopts one allocation
        choice per call, so a chain that allocates several is left to exact mode); the safety
        tier takes the single calls a batch stands for."""
        if not isinstance(self.target, protocol):
            return False
        return self.session is None or (protocol is PoolBatchFree and self.mode == "isomorphic")

    def _report_unchecked_batches(self) -> None:
        """A batch the target offers that this mode does not send (``batches``) is named to the
        check, whose verdict then says so."""
        why = (
            "the safety tier sends the single calls a batch stands for"
            if self.mode == "safety"
            else "the isomorphic session adopts one allocation choice per call, so a chain's"
            " single allocate_immutable calls are sent instead"
        )
        for protocol, name in (
            (PoolChainAllocation, "allocate_immutable_chain"),
            (PoolBatchFree, "free_blocks"),
        ):
            if isinstance(self.target, protocol) and not self.batches(protocol):
                capture.report_unchecked(self, name, why)

    def _model_view(self) -> PoolView | None:
        """The model's view, rendered once per state (``views.py``)."""
        return None if self.model is None else self.views.model()

    def _grow(self, chain: Chain, data: st.DataObject) -> object:
        room = chain.open_room(self.block_size)
        before = self._model_view()
        if before is not None:  # steering: allocations in a nearly full pool score higher
            free = len(before.free) + len(before.evictable)
            self._score(1.0 - free / self.config.num_blocks, label="scarcity at allocation")
        if room:
            result = self._append(chain, data, room, before)
        elif data.draw(st.booleans(), label="immutable"):
            tokens = self._tokens(data, chain, self.block_size)
            block = self.both(calls.allocate_immutable(chain.prefix_of_next(), tokens))
            if not isinstance(block, PagedKVError):
                after = self._model_view()
                if before is not None and after is not None and after.hits > before.hits:
                    event("outcome: cache hit")
                chain.blocks.append(block)
                chain.contents.append(tuple(tokens))
            result = block
        else:
            block = self.both(calls.allocate_mutable())
            if not isinstance(block, PagedKVError):
                chain.blocks.append(block)
                chain.contents.append(())
            result = block
        self._note_allocation(before)
        return result

    def _append(
        self, chain: Chain, data: st.DataObject, room: int, before: PoolView | None
    ) -> object:
        count = data.draw(integers(1, room), label="count")
        tokens = self._tokens(data, chain, count)
        last = chain.blocks[-1]
        result = self.both(calls.append_tokens(last, chain.prefix_of_last(), tokens))
        if isinstance(result, PagedKVError):
            return result
        after = self._model_view()
        if before is not None and after is not None:
            if len(after.pending_cows) > len(before.pending_cows):
                event("outcome: copy-on-write")
            if result != last and result in before.cached.values():
                event("outcome: dedup on promotion")
        chain.blocks[-1] = result
        chain.contents[-1] += tuple(tokens)
        return result

    def _preempt(self, chain: Chain) -> None:
        """Out of blocks: the engine frees the sequence, which starts over by recomputation."""
        event("outcome: preempted")
        for block in chain.blocks:
            self.both(calls.free(block))
        chain.blocks.clear()
        chain.contents.clear()

    def _fork(self, chain: Chain) -> Chain:
        """Parallel sampling: a child shares every block of its parent."""
        result = self.both(calls.fork(list(chain.blocks)))
        assert not isinstance(result, PagedKVError) or self.ended, result
        return Chain(chain.extra_key, list(chain.blocks), list(chain.contents))

    def _free_count(self) -> int:
        view = self._model_view()
        if view is not None:
            return len(view.free) + len(view.evictable)
        count = self.both(calls.num_free_blocks())  # the safety tier: the target's own count
        return count if isinstance(count, int) else 0

    def _held(self) -> Counter[BlockId]:
        return Counter(block for chain in self.live for block in chain.blocks)

    def _note_allocation(self, before: PoolView | None) -> None:
        after = self._model_view()
        if before is None or after is None:
            return
        lost = set(before.cached) - set(after.cached)
        if lost:
            event("outcome: eviction")
            self.evictions += len(lost)
            self._score(float(self.evictions), label="evictions")
            for content_hash in lost:
                evicted = before.blocks[before.cached[content_hash]]
                survivors = [after.blocks[b] for b in after.evictable]
                if any(
                    v.num_hashed_tokens < evicted.num_hashed_tokens
                    and v.last_accessed == evicted.last_accessed
                    for v in survivors
                ):
                    event("outcome: tail evicted before its head")

    def teardown(self) -> None:
        buckets = [0, 10, 25, 50, 100, 200]
        event(f"calls per run: {max(b for b in buckets if b <= self.calls)}+")
        self.hand_over_scores()
        capture.finish(self, "pool")
