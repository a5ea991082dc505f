"""The optimized pool's evictor against the rule it keeps (``specs/block_pool.md`` §4: the least
recently accessed first, then the most hashed tokens, then the lowest id), through enough
re-rankings that its heap is rebuilt many times. The pools of the lockstep machines are too small
to make it rebuild, so a rebuild that loses the heap order went unseen (a gap found by ``make
mutate``, ``specs/mutation.md``)."""

from __future__ import annotations

import random

from pagedkv.optimized.evictor import Evictor


def test_the_evictor_pops_in_the_reference_order_across_rebuilds() -> None:
    rng = random.Random(0)
    evictor = Evictor()
    ranks: dict[int, tuple[float, int]] = {}
    for _ in range(3000):
        block = rng.randrange(12)
        roll = rng.random()
        if roll < 0.7:
            ranks[block] = (float(rng.randrange(5)), -rng.randrange(1, 4))
            evictor.add(block, ranks[block][0], -ranks[block][1])
        elif roll < 0.85 and block in ranks:
            del ranks[block]
            evictor.remove(block)
        elif ranks:
            expected = min(ranks, key=lambda b: (*ranks[b], b))
            assert evictor.pop() == expected
            del ranks[expected]
        assert len(evictor) == len(ranks) and evictor.blocks() == frozenset(ranks)
        assert (block in evictor) == (block in ranks)
    evictor.clear()
    assert len(evictor) == 0 and evictor.blocks() == frozenset()
    evictor.add(3, 1.0, 1)
    assert evictor.pop() == 3
