"""The rules that drive the pool protocol: chains started, grown, admitted, forked, freed, marked
and asked about, as a block table's owner would."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import consumes, precondition, rule

from pagedkv.model_tests.machines.draws import SAMPLE
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.pool_base import PoolMachineBase
from pagedkv.model_tests.machines.pool_chains import CHAINS, EXTRA_KEYS, TEMPLATE, Chain
from pagedkv.specs import pool_calls as calls
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.interface import PoolBatchFree, PoolChainAllocation
from pagedkv.specs.pool_calls import PoolCall
from pagedkv.specs.types import BlockId, ExtraKey

T = TypeVar("T")


class PoolRules(PoolMachineBase):
    """The pool's calls, on live chains."""

    @rule(target=CHAINS, key=st.sampled_from(EXTRA_KEYS))
    def start_chain(self, key: ExtraKey) -> Chain:
        chain = Chain(key if self.on("extra keys") else ExtraKey())
        self.live.append(chain)
        return chain

    @rule(chain=CHAINS, data=DATA)
    def grow(self, chain: Chain, data: st.DataObject) -> None:
        """One pool operation that lengthens the chain: append into its open last block, or
        add a block (immutable when a full block's worth of tokens is at hand)."""
        self._grow(chain, data)

    @rule(data=DATA)
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

    @rule(
        target=CHAINS,
        key=st.sampled_from(EXTRA_KEYS),
        blocks=st.integers(1, 3),
        batched=st.booleans(),
    )
    def admit(self, key: ExtraKey, blocks: int, batched: bool) -> Chain:
        """A new request whose prompt follows the template for whole blocks: each one a lookup
        (a hit on what others cached, evictable or held, or a new block), then the scheduler's
        question of what it may skip computing. ``batched``: the blocks in one
        ``allocate_immutable_chain`` where it is drawn (``batches``)."""
        chain = Chain(key if self.on("extra keys") else ExtraKey())
        self.live.append(chain)
        if batched and self.batches(PoolChainAllocation):
            size = self.block_size
            contents = [
                tuple(TEMPLATE[(start + i) % len(TEMPLATE)] for i in range(size))
                for start in range(0, blocks * size, size)
            ]
            taken = self.both(
                calls.allocate_immutable_chain(Prefix(extra_key=chain.extra_key), contents)
            )
            if not isinstance(taken, PagedKVError):  # all or nothing
                chain.blocks.extend(taken)
                chain.contents.extend(contents)
                event(f"outcome: a chain of {len(taken)} allocated in one call")
            self.both(calls.common_computed_prefix([list(chain.blocks)]))
            return chain
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

    @rule(target=CHAINS, chain=consumes(CHAINS))
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

    @precondition(lambda self: self.offers("fork") and self.offers("cow_if_not_appendable"))
    @rule(chain=CHAINS)
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
    @rule(target=CHAINS, chain=CHAINS)
    def fork(self, chain: Chain) -> Chain:
        child = self._fork(chain)
        self.live.append(child)
        return child

    @rule(chain=consumes(CHAINS), batched=st.booleans())
    def free_chain(self, chain: Chain, batched: bool = False) -> None:
        """The chain's blocks given back, head first; ``batched``: tail first in one
        ``free_blocks`` where it is drawn (``batches``), as vLLM v1's manager frees."""
        self.live.remove(chain)
        if batched and self.batches(PoolBatchFree):
            result = self.both(calls.free_blocks(chain.blocks[::-1]))
            assert not isinstance(result, PagedKVError) or self.ended, result
            return
        for block in chain.blocks:
            result = self.both(calls.free(block))
            assert not isinstance(result, PagedKVError) or self.ended, result

    @rule(chain=CHAINS)
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
        chain=CHAINS,
        step=st.sampled_from([0.0, 0.0, 1.0, 2.5]),
        back=st.booleans(),
        data=DATA,
    )
    def mark_accessed(self, chain: Chain, step: float, back: bool, data: st.DataObject) -> None:
        self.clock += step
        now = max(0.0, self.clock - 3.0) if back else self.clock
        self.both(calls.mark_accessed(list(chain.blocks) + self._maybe_cached(data), now))

    @rule(chain=CHAINS, upto=st.integers(0, 4), data=DATA)
    def mark_computed(self, chain: Chain, upto: int, data: st.DataObject) -> None:
        self.both(calls.mark_computed(chain.blocks[:upto] + self._maybe_cached(data)))

    def _maybe_cached(self, data: st.DataObject) -> list[BlockId]:
        """Sometimes one block nobody holds but the cache keeps (marks reach those too)."""
        cached = self._cached_unheld()
        if not cached or not data.draw(st.booleans(), label="a cached block too"):
            return []
        block: BlockId = data.draw(st.sampled_from(cached), label="cached block")
        return [block]

    @rule(chain=CHAINS, data=DATA)
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
    @rule(data=DATA, step=st.sampled_from([0.0, 1.0, 2.5]), computed=st.booleans())
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

    @rule(group=st.lists(CHAINS, max_size=3))
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
