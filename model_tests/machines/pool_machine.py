"""The block pool lockstep machine: the reference and an implementation, step by step.

Steps act on live chains (a sequence's blocks, as a block table would hold them). Pools are small,
tokens few and chains tend to follow one shared template, so evictions, dedup and copy-on-write
happen in most runs. After every step the two pools must look the same (exact mode,
``specs/comparison.md``) and satisfy invariants I1-I3 of ``specs/invariants.md``; a step that
raises must leave both unchanged (I6).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar, cast

from hypothesis import event, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.calls import assert_same_state, call_both, construction_outcome
from pagedkv.model_tests.lockstep.pool_safety_session import PoolSafetySession
from pagedkv.model_tests.lockstep.pool_session import IsomorphicPoolSession
from pagedkv.model_tests.lockstep.views import Views
from pagedkv.model_tests.machines.draws import FOLLOW_TEMPLATE, SAMPLE, integers, small_tokens
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs import invariants
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError, UnsupportedError
from pagedkv.specs.interface import BlockPool, BlockPoolFactory
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.types import BlockId, ExtraKey, PoolConfig, Token

TEMPLATE: tuple[Token, ...] = (0, 1, 1, 0, 2, 0, 1, 2, 2, 1, 0, 0)
"""The shared 'system prompt' most chains follow, so that prefixes repeat across chains."""

COPYING = frozenset({"append_tokens", "cow_if_not_appendable"})
"""The calls that can record a copy-on-write pair."""
EXTRA_KEYS = (ExtraKey(), ExtraKey(), ExtraKey(lora_id=1), ExtraKey(cache_salt="tenant-b"))


T = TypeVar("T")


@dataclass(eq=False)
class Chain:
    """One holder's view of its blocks: ids, and the tokens it put in each (so the prefix of
    each block follows from the chain itself, whatever pool holds it)."""

    extra_key: ExtraKey
    blocks: list[BlockId] = field(default_factory=list)
    contents: list[tuple[Token, ...]] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Chain(blocks={self.blocks}, lengths={self.lengths})"

    @property
    def lengths(self) -> list[int]:
        return [len(tokens) for tokens in self.contents]

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    def open_room(self, block_size: int) -> int:
        """Empty slots of the last block (0 when there is none or it is full)."""
        return block_size - len(self.contents[-1]) if self.blocks else 0

    def prefix_of_last(self) -> Prefix:
        """The prefix of the chain's last block: the full blocks before it."""
        prefix = Prefix(extra_key=self.extra_key)
        for tokens in self.contents[:-1]:
            prefix = prefix.extend(tokens)
        return prefix

    def prefix_of_next(self) -> Prefix:
        prefix = Prefix(extra_key=self.extra_key)
        for tokens in self.contents:
            prefix = prefix.extend(tokens)
        return prefix


Mode = Literal["exact", "isomorphic", "safety"]

SWARM = ("extra keys", "parallel sampling")
"""Features a run may leave out (swarm testing); the rules are swarmed by Hypothesis itself
(``manager_machine.SWARM``)."""

swarms = st.one_of(st.just(frozenset[str]()), st.frozensets(st.sampled_from(SWARM)))

pool_configs = st.builds(
    PoolConfig,
    num_blocks=st.integers(1, 8),
    block_size=st.sampled_from([1, 2, 2, 3, 4]),
    enable_caching=st.sampled_from([True, True, True, False]),
    first_id=st.sampled_from([0, 0, 7]),
)


class PoolLockstep(RuleBasedStateMachine):
    """Subclass and set ``make_target`` to check another pool against the reference."""

    make_target: ClassVar[BlockPoolFactory]
    mode: ClassVar[Mode] = "exact"
    policy: ClassVar[Policy] = PAGEDKV
    contract: ClassVar[str] = "any"
    """``scheduler``: no calls meant to fail (a pool's caller passes what it was given)."""
    last_run: ClassVar[capture.RunRecord | None] = None
    on_run_end: ClassVar[capture.RunHook | None] = None
    on_declined: ClassVar[capture.DeclineHook | None] = None
    release_target: ClassVar[capture.ReleaseHook | None] = None
    chains = Bundle("chains")

    def __init__(self) -> None:
        super().__init__()
        self.model: ReferenceBlockPool | None = None
        self.target: BlockPool
        self.ending_error: PagedKVError | None = None
        self.live: list[Chain] = []
        self.clock = 0.0
        self.calls = 0
        self.pending: capture.Call | None = None
        self.checking_config: PoolConfig | None = None
        self.off: frozenset[str] = frozenset()
        self.scores: dict[str, float] = {}
        """The highest of each steering score this run (``hypothesis.target`` takes one per
        label per run: they are handed over at teardown)."""
        self.evictions = 0

    def on(self, name: str) -> bool:
        return name not in self.off

    def _score(self, value: float, label: str) -> None:
        self.scores[label] = max(value, self.scores.get(label, value))

    # --- set-up -------------------------------------------------------------------------------

    @initialize(
        target=chains,
        config=pool_configs,
        keys=st.lists(st.sampled_from(EXTRA_KEYS), min_size=2, max_size=3),
        off=swarms,
        data=st.data(),
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
            if self.mode == "isomorphic":
                self.session = IsomorphicPoolSession(self.model, self.target)
        self.views = Views(self.model, self.target)
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
        if self.ended:
            assert self.ending_error is not None  # set by the call that ended the run
            return self.ending_error
        if method in self.policy.unsupported:  # the engine has no such call: nobody makes it
            return UnsupportedError(f"{method} is not offered under this policy")
        event(f"rule: {method}")
        self.calls += 1
        self.views.changed()
        if self.session is None:
            assert self.model is not None
            return call_both(self.model, self.target, call)
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

    # --- chains -------------------------------------------------------------------------------

    @rule(target=chains, key=st.sampled_from(EXTRA_KEYS))
    def start_chain(self, key: ExtraKey) -> Chain:
        chain = Chain(key if self.on("extra keys") else ExtraKey())
        self.live.append(chain)
        return chain

    @rule(chain=chains, data=st.data())
    def grow(self, chain: Chain, data: st.DataObject) -> None:
        """One pool operation that lengthens the chain: append into its open last block, or
        add a block (immutable when a full block's worth of tokens is at hand)."""
        self._grow(chain, data)

    @rule(data=st.data())
    def decode_step(self, data: st.DataObject) -> None:
        """Every live chain grows by one operation, as in one iteration of a serving engine's
        scheduler: this is what fills the pool, so it is what makes eviction happen."""
        for chain in list(self.live):
            sample = chain.blocks and self.offers("fork") and self.on("parallel sampling")
            if sample and data.draw(SAMPLE, label="sample"):
                self.live.append(self._fork(chain))
            if isinstance(self._grow(chain, data), OutOfBlocksError):
                self._preempt(chain)
        if self.live:  # the scheduler's question of the iteration, for some of its requests
            asked = data.draw(st.lists(st.sampled_from(self.live), min_size=1, max_size=3))
            self.both(calls.common_computed_prefix([list(c.blocks) for c in asked]))
        self.clock += 1.0  # its stamp on every block of the requests it ran (the manager's
        for chain in self.live:  # access_all_blocks_in_seq), and its copy kernel's batch
            if chain.blocks:
                self.both(calls.mark_accessed(list(chain.blocks), self.clock))
        self.both(calls.clear_copy_on_writes())

    def _preempt(self, chain: Chain) -> None:
        """Out of blocks: the engine frees the sequence, which starts over by recomputation."""
        event("outcome: preempted")
        for block in chain.blocks:
            self.both(calls.free(block))
        chain.blocks.clear()
        chain.contents.clear()

    def offers(self, method: str) -> bool:
        return method not in self.policy.unsupported

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

    @rule(target=chains, key=st.sampled_from(EXTRA_KEYS), blocks=st.integers(1, 3))
    def admit(self, key: ExtraKey, blocks: int) -> Chain:
        """A new request whose prompt follows the template for whole blocks: each one a lookup
        (a hit on what others cached, evictable or held, or a new block), then the scheduler's
        question of what it may skip computing."""
        chain = Chain(key if self.on("extra keys") else ExtraKey())
        self.live.append(chain)
        for _ in range(blocks):
            start = chain.num_tokens
            tokens = [TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(self.block_size)]
            result = self.both(calls.allocate_immutable(chain.prefix_of_next(), tokens))
            if isinstance(result, PagedKVError):
                break
            chain.blocks.append(result)
            chain.contents.append(tuple(tokens))
        self.both(calls.common_computed_prefix([list(chain.blocks)]))
        return chain

    @rule(target=chains, chain=consumes(chains))
    def next_turn(self, chain: Chain) -> Chain:
        """A conversation's next turn: the chain finishes, and a new request reads its whole
        blocks again (lookups that revive them from the evictor), then the scheduler's
        question."""
        self.free_chain(chain)
        again = Chain(chain.extra_key)
        self.live.append(again)
        for tokens in chain.contents:
            if len(tokens) != self.block_size:
                break
            result = self.both(calls.allocate_immutable(again.prefix_of_next(), list(tokens)))
            if isinstance(result, PagedKVError):
                break
            again.blocks.append(result)
            again.contents.append(tokens)
        self.both(calls.common_computed_prefix([list(again.blocks)]))
        return again

    @rule(leave=st.sampled_from([0, 0, 1]))
    def fill_pool(self, leave: int) -> None:
        """Press the pool to its edge: take empty blocks until ``leave`` are free (each one a
        free block, or the cached block the eviction order names: every eviction is compared),
        then give them back. Empty blocks are never cached, so the evictor is left to the
        blocks under test."""
        fillers = []
        for _ in range(self.config.num_blocks):
            if self.ended or self._free_count() <= leave:
                break
            before = self._model_view()
            result = self.both(calls.allocate_mutable())
            if isinstance(result, PagedKVError):
                break
            self._note_allocation(before)
            fillers.append(result)
        event(f"outcome: pool filled with {min(len(fillers), 3)}+ blocks")
        for block in fillers:
            self.both(calls.free(block))

    def _free_count(self) -> int:
        view = self._model_view()
        if view is not None:
            return len(view.free) + len(view.evictable)
        count = self.both(calls.num_free_blocks())  # the safety tier: the target's own count
        return count if isinstance(count, int) else 0

    @precondition(lambda self: self.offers("fork") and self.offers("cow_if_not_appendable"))
    @rule(chain=chains)
    def abandon_copy(self, chain: Chain) -> None:
        """A sample forked from ``chain`` gets its own copy of the shared last block, then is
        aborted before the copy kernel runs: the copy's block is given back with its pair
        pending (``block_pool.md`` release; policy ``cow_pairs``)."""
        if not chain.open_room(self.block_size):
            return
        child = self._fork(chain)
        result = self.both(calls.cow_if_not_appendable(child.blocks[-1]))
        if not isinstance(result, PagedKVError):
            child.blocks[-1] = result
        for block in child.blocks:
            self.both(calls.free(block))
        self.both(calls.clear_copy_on_writes())

    @precondition(lambda self: self.offers("fork"))
    @rule(target=chains, chain=chains)
    def fork(self, chain: Chain) -> Chain:
        child = self._fork(chain)
        self.live.append(child)
        return child

    def _fork(self, chain: Chain) -> Chain:
        """Parallel sampling: a child shares every block of its parent."""
        result = self.both(calls.fork(list(chain.blocks)))
        assert not isinstance(result, PagedKVError) or self.ended, result
        return Chain(chain.extra_key, list(chain.blocks), list(chain.contents))

    @rule(chain=consumes(chains))
    def free_chain(self, chain: Chain) -> None:
        self.live.remove(chain)
        for block in chain.blocks:
            result = self.both(calls.free(block))
            assert not isinstance(result, PagedKVError) or self.ended, result

    @rule(chain=chains)
    def cow_if_not_appendable(self, chain: Chain) -> None:
        if not chain.open_room(self.block_size):
            return
        before = self._model_view()
        result = self.both(calls.cow_if_not_appendable(chain.blocks[-1]))
        if isinstance(result, PagedKVError):
            return
        self._note_allocation(before)
        if result != chain.blocks[-1]:
            event("outcome: copy-on-write")
        chain.blocks[-1] = result

    @rule(
        chain=chains,
        step=st.sampled_from([0.0, 0.0, 1.0, 2.5]),
        back=st.booleans(),
        data=st.data(),
    )
    def mark_accessed(self, chain: Chain, step: float, back: bool, data: st.DataObject) -> None:
        self.clock += step
        now = max(0.0, self.clock - 3.0) if back else self.clock
        self.both(calls.mark_accessed(list(chain.blocks) + self._maybe_cached(data), now))

    @rule(chain=chains, upto=st.integers(0, 4), data=st.data())
    def mark_computed(self, chain: Chain, upto: int, data: st.DataObject) -> None:
        self.both(calls.mark_computed(chain.blocks[:upto] + self._maybe_cached(data)))

    def _maybe_cached(self, data: st.DataObject) -> list[BlockId]:
        """Sometimes one block nobody holds but the cache keeps (marks reach those too)."""
        cached = self._cached_unheld()
        if not cached or not data.draw(st.booleans(), label="a cached block too"):
            return []
        block: BlockId = data.draw(st.sampled_from(cached), label="cached block")
        return [block]

    @rule(chain=chains, data=st.data())
    def mark_computed_anywhere(self, chain: Chain, data: st.DataObject) -> None:
        """Any of a chain's blocks, not only a leading run (``block_pool.md`` mark_computed): a
        computed list with a gap, which ``common_computed_prefix`` must stop at."""
        count = len(chain.blocks)
        picks = data.draw(st.lists(st.booleans(), min_size=count, max_size=count), label="marked")
        marked = [block for block, pick in zip(chain.blocks, picks, strict=True) if pick]
        if marked and marked != chain.blocks[: len(marked)]:
            event("outcome: computed marks with a gap")
        self.both(calls.mark_computed(marked))

    def _cached_unheld(self) -> list[BlockId]:
        """The model's evictable blocks (none under the safety tier: no model)."""
        view = self._model_view() if hasattr(self, "views") else None
        return [] if view is None else sorted(view.evictable)

    @precondition(lambda self: bool(self._cached_unheld()))
    @rule(data=st.data(), step=st.sampled_from([0.0, 1.0, 2.5]), computed=st.booleans())
    def touch_cached(self, data: st.DataObject, step: float, computed: bool) -> None:
        """A block nobody holds but the cache keeps: an access moves it in the eviction order
        under the evictor, a mark makes its KV reusable (``block_pool.md`` mark_accessed,
        mark_computed: used or evictable blocks alike). One block, so that it parts from the
        blocks it tied with."""
        block = data.draw(st.sampled_from(self._cached_unheld()), label="block")
        if computed:
            self.both(calls.mark_computed([block]))
        else:
            self.clock += step
            self.both(calls.mark_accessed([block], self.clock))
        event("outcome: a cached block touched")

    @rule(group=st.lists(chains, max_size=3))
    def common_computed_prefix(self, group: list[Chain]) -> None:
        common = self.both(calls.common_computed_prefix([c.blocks for c in group]))
        if isinstance(common, PagedKVError):
            return
        event(f"outcome: common computed prefix of {min(len(common), 2)}+ blocks")

    @rule(query=st.sampled_from([calls.num_free_blocks(), calls.hit_rate()]))
    def ask(self, query: PoolCall[object]) -> None:
        self.both(query)

    @rule(
        action=st.sampled_from(
            ["clear_copy_on_writes"] * 3 + ["reset_prefix_cache"] * 2 + ["drain"]
        )
    )
    def maintain(self, action: str) -> None:
        """Drain the copy-on-write pairs, or reset the cache; ``drain``: every live chain
        finishes (the engine idle, its cached blocks left in the evictor), then the reset."""
        if action == "drain":
            for chain in list(self.live):
                self._preempt(chain)
            action = "reset_prefix_cache"
        if action == "reset_prefix_cache":
            result: object = self.both(calls.reset_prefix_cache())
        else:
            result = self.both(calls.clear_copy_on_writes())
        if action == "reset_prefix_cache":
            event(f"outcome: reset {'done' if result else 'refused'}")
        elif result:
            event("outcome: copy-on-write pairs cleared")

    # --- calls that must fail -----------------------------------------------------------------

    @precondition(lambda self: self.mode != "safety" and self.contract != "scheduler")
    @rule(
        chain=chains,
        data=st.data(),
        kind=st.sampled_from(["unheld block", "too many tokens", "bad argument"]),
    )
    def misuse(self, chain: Chain, data: st.DataObject, kind: str) -> None:
        """A call that must fail, and leave both pools exactly as they were."""
        if kind == "unheld block":
            call = self._unheld_block_call(data)
        elif kind == "too many tokens" and chain.blocks:
            room = chain.open_room(self.block_size)
            extra = data.draw(st.integers(1, 3), label="extra")
            call = calls.append_tokens(
                chain.blocks[-1], chain.prefix_of_last(), [0] * (room + extra)
            )
        else:
            call = self._bad_argument_call(chain, data)
        if call is None:
            return
        result = self.both(call)
        assert isinstance(result, PagedKVError), f"{call} succeeded"

    def _unheld_block_call(self, data: st.DataObject) -> PoolCall[object] | None:
        """Blocks no chain holds have count 0 (double free, unallocated) or are foreign."""
        block = self.config.first_id + data.draw(st.integers(-2, 10), label="offset")
        if block in self._held():
            return None
        unheld: list[PoolCall[object]] = [
            calls.free(block),
            calls.append_tokens(block, Prefix(), [0]),
            calls.fork([block]),
            calls.cow_if_not_appendable(block),
        ]
        view = self._model_view()
        if view is not None and block not in view.evictable:  # a cached block may be marked
            unheld.append(calls.mark_computed([block]))
        return data.draw(st.sampled_from(unheld), label="call")

    def _bad_argument_call(self, chain: Chain, data: st.DataObject) -> PoolCall[object]:
        size = self.block_size
        block = chain.blocks[-1] if chain.blocks else self.config.first_id
        not_chains = cast(list[list[BlockId]], "not chains")  # not a list of chains, on purpose
        bad: list[PoolCall[object]] = [
            calls.allocate_immutable(Prefix(), [-1] * size),
            calls.allocate_immutable(Prefix(), [True] * size),
            calls.allocate_immutable(Prefix(), [0] * (size + 1)),
            calls.allocate_immutable(Prefix(hash=b"short"), [0] * size),
            calls.allocate_immutable(Prefix(num_tokens=-size), [0] * size),
            calls.append_tokens(block, Prefix(), []),
            calls.mark_accessed(list(chain.blocks), math.nan),
            calls.mark_accessed(list(chain.blocks), -1.0),
            calls.common_computed_prefix(not_chains),
        ]
        return data.draw(st.sampled_from(bad), label="call")

    @precondition(lambda self: self.mode != "safety")
    @rule(
        num_blocks=st.integers(-1, 2),
        block_size=st.integers(-1, 2),
        caching=st.sampled_from([True, 1]),
    )
    def bad_configuration(self, num_blocks: int, block_size: int, caching: Any) -> None:
        """(Not under the safety tier: which configurations to refuse is the spec's.)"""
        config = PoolConfig(num_blocks, block_size, caching)
        self.checking_config = config
        outcomes = [
            construction_outcome(factory, config)
            for factory in (partial(ReferenceBlockPool, policy=self.policy), type(self).make_target)
        ]
        if outcomes[1] != "UnsupportedError":  # one the target declines is not compared
            assert outcomes[0] == outcomes[1], (
                f"{config}: model {outcomes[0]}, target {outcomes[1]}"
            )
        self.checking_config = None
        event(f"rule: configuration {outcomes[0]}")

    # --- bookkeeping --------------------------------------------------------------------------

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
        for label, value in sorted(self.scores.items()):
            target(value, label=label)
        capture.finish(self, "pool")

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        if self.model is not None and self.mode == "exact":
            assert_same_state(self.views.model(), self.views.target(), "pool state")

    @invariant()
    def invariants_hold(self) -> None:
        if self.model is None:
            return  # the safety session checks its own after every call
        held = self._held()
        if self.policy.pool_null_block:
            held[self.model.config.first_id] += 1  # the pool's own null block
        sides: list[tuple[str, Any]] = [("model", self.model)]
        if self.mode == "exact":
            sides.append(("target", self.target))
        view = self.views.model()  # exact mode: same_state holds the target's equal to it
        # the model's state is a frozen value a change replaces: on the state and holders they
        # last passed on, the view's invariants would pass again
        if self.passed_invariants is None or (
            self.passed_invariants[0] is not self.model.state or self.passed_invariants[1] != held
        ):
            problems = invariants.ref_counts(view, held) + invariants.pool_invariants(view)
            assert not problems, "model: " + "; ".join(problems)
            self.passed_invariants = (self.model.state, held)
        for name, side in sides:
            free_count = side.num_free_blocks()
            assert free_count == len(view.free) + len(view.evictable), f"{name}: free count"


def lockstep_case(
    factory: Any, *, mode: Mode = "exact", policy: Policy = PAGEDKV, contract: str = "any"
) -> type[PoolLockstep]:
    """A machine class checking ``factory``'s pools: against the reference under ``policy`` in
    exact or isomorphic mode (ids through a bijection, the target's allowed choices adopted),
    or against the safety tier alone (``mode="safety"``); under the ``scheduler`` contract, no
    call meant to fail."""
    return type(
        f"PoolLockstep_{getattr(factory, '__name__', 'target')}",
        (PoolLockstep,),
        {
            "make_target": staticmethod(factory),
            "mode": mode,
            "policy": policy,
            "contract": contract,
        },
    )
