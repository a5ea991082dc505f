"""The optimized manager's compact state, its pools' parts kept between calls: what ``pagedkv
soak`` reads after every call of an optimized model or target (``specs/oracle.md`` §6, "The
whole state at every step").

``OptimizedBlockSpaceManager.compact`` rebuilds each pool's columns at every call (lists out of
its arrays, a prefix per block), most of what it costs, though most calls change one pool or
none. Here a pool's compact form is kept with the pool's ``fingerprint`` (everything ``compact``
reads of it, copied at C speed, no Python loop over blocks) and the accesses still pending on it,
and built again only when either differs. The sequences (their tables' own packed tokens, no
copy) and the groups are read at every call: nothing of them is kept. A pool that did not change
is the same object as at the last call, so the soak compares it with a glance
(``soak.same_parts``).

A kept part can go stale: a fingerprint that missed something ``compact`` reads would keep the
old columns while the pool changed. So it is never the last word: at every checkpoint the soak
builds the compact state fresh on both sides (``OptimizedBlockSpaceManager.compact``, nothing
kept) and holds the kept one equal to it; a stale one sends the episode to a replay that
compares fresh whole states after every call (``soak.Lockstep.fresh_check``).
"""

from __future__ import annotations

from pagedkv.optimized.block_manager import Held, OptimizedBlockSpaceManager
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs.compact_state import CompactManager, CompactPool
from pagedkv.specs.types import Device


class IncrementalCompact:
    """``manager.compact()``, each pool's part kept while its fingerprint and pending accesses
    stay the same (the module's docstring). A kept pool is never changed afterwards; the rest
    is the manager's own, to be compared at once, as ``compact``'s."""

    def __init__(self, manager: OptimizedBlockSpaceManager) -> None:
        self.manager = manager
        self.pools: dict[Device, tuple[tuple[object, ...], Held, CompactPool]] = {}

    def __call__(self) -> CompactManager:
        manager = self.manager
        seqs, groups, on_gpu, on_cpu = manager.compact_tables()
        gpu, cpu = manager.pools()  # read at every call: a subclass may make a pool anew
        return CompactManager(
            manager.config,
            self.pool(Device.GPU, gpu, on_gpu),
            self.pool(Device.CPU, cpu, on_cpu),
            seqs,
            groups,
            manager.get_null_block(),
        )

    def pool(self, device: Device, pool: OptimizedBlockPool, untouched: Held) -> CompactPool:
        """The pool's compact form: the one kept, if it was built from the same fingerprint and
        pending accesses; else built, its pool's own lists and dict copied, and kept."""
        fingerprint = pool.fingerprint()
        known = self.pools.get(device)
        if known is not None and known[1] == untouched and known[0] == fingerprint:
            return known[2]
        built = pool.compact(untouched)
        built = built._replace(
            tokens=list(built.tokens), hashes=list(built.hashes), cached=dict(built.cached)
        )
        self.pools[device] = (fingerprint, untouched, built)
        return built
