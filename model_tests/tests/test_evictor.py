"""The optimized pool's evictor against the rule it keeps (``specs/block_pool.md`` §4: the least
recently accessed first, then the most hashed tokens, then the lowest id), through enough
re-rankings that its heap is rebuilt many times. The pools of the lockstep machines are too small
to make it rebuild, so a rebuild that loses the heap order went unseen (a gap found by ``make
mutate``, ``specs/mutation.md``)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from pagedkv.optimized.evictor import Evictor, time_bits


def drive(
    evictor: Evictor,
    rng: random.Random,
    steps: int,
    num_blocks: int,
    ranks_drawn: Callable[[], tuple[float, int]],
) -> None:
    """Random adds (re-ranks), removes and pops, each pop held to the rule; ``ranks_drawn``
    gives (time, hashed tokens)."""
    ranks: dict[int, tuple[float, int]] = {}
    for _ in range(steps):
        block = rng.randrange(num_blocks)
        roll = rng.random()
        if roll < 0.7:
            now, hashed = ranks_drawn()
            ranks[block] = (now, -hashed)
            evictor.add(block, now, hashed)
        elif roll < 0.85 and block in ranks:
            del ranks[block]
            evictor.remove(block)
        elif ranks:
            expected = min(ranks, key=lambda b: (*ranks[b], b))
            assert evictor.pop() == expected
            del ranks[expected]
        assert len(evictor) == len(ranks) and evictor.blocks() == frozenset(ranks)
        assert (block in evictor) == (block in ranks)


def test_the_evictor_pops_in_the_reference_order_across_rebuilds() -> None:
    rng = random.Random(0)
    evictor = Evictor()
    drive(evictor, rng, 3000, 12, lambda: (float(rng.randrange(5)), rng.randrange(1, 4)))
    evictor.clear()
    assert len(evictor) == 0 and evictor.blocks() == frozenset()
    evictor.add(3, 1.0, 1)
    assert evictor.pop() == 3


def test_time_bits_order_the_times_as_floats_do() -> None:
    """The packed key's first field: equal times (``-0.0`` and ``0.0`` too) equal, the order
    kept across signs, infinities and subnormals."""
    rng = random.Random(1)
    times = [-math.inf, math.inf, -0.0, 0.0, -1.0, 1e-300, -1e-300, 5e-324, -5e-324, 1.5, -2.5]
    times += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    for a in times:
        for b in times[:40]:
            assert (time_bits(a) < time_bits(b)) == (a < b), (a, b)
            assert (time_bits(a) == time_bits(b)) == (a == b), (a, b)


def test_the_evictor_orders_any_count_of_hashed_tokens_and_any_time() -> None:
    """Counts past the key's field widen it (every key packed again), times of any sign."""
    rng = random.Random(2)
    times = [-math.inf, math.inf, -0.0, 0.0, -1.0, 5e-324, 2.5, 1e308]
    counts = [1, 16, 2**45, 2**90 + 3]
    for _ in range(100):
        drive(Evictor(64), rng, 200, 64, lambda: (rng.choice(times), rng.choice(counts)))


def test_a_batch_of_blocks_given_back_ranks_as_the_single_adds_would() -> None:
    """``add_all`` (a sequence's blocks freed together, their keys computed from one base) pops
    in the order ``add`` gives the same blocks: one access time or several, counts past the
    key's field, blocks already evictable re-ranked."""
    rng = random.Random(3)
    times = [-1.0, 0.0, 2.5]
    for _ in range(200):
        batched, single = Evictor(64), Evictor(64)
        for _ in range(rng.randrange(1, 5)):
            blocks = rng.sample(range(64), rng.randrange(1, 12))
            shared = rng.random() < 0.7
            now = rng.choice(times)
            stamps = [now if shared else rng.choice(times) for _ in blocks]
            starts = [rng.choice([0, 16, 32, 2**41]) for _ in blocks]
            addend = rng.choice([0, 16])
            batched.add_all(blocks, stamps, starts, addend)
            for block, stamp, start in zip(blocks, stamps, starts, strict=True):
                single.add(block, stamp, start + addend)
        assert batched.blocks() == single.blocks()
        popped = [batched.pop() for _ in range(len(batched))]
        assert popped == [single.pop() for _ in range(len(single))]
