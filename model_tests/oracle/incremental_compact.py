"""The optimized manager's compact state, kept between calls: what ``pagedkv soak`` reads after
every call of an optimized model or target (``specs/oracle.md`` §6, "The whole state at every
step").

``OptimizedBlockSpaceManager.compact`` reads every sequence and group and rebuilds each pool's
columns at every call, though most calls change one sequence and one pool, or nothing. Two ways
to keep what did not change, by whose code the manager runs (``own_code_only``):

- *From the manager's record of its changes* (``optimized/changes.py``), where every method it
  runs is pagedkv's own: the optimized manager, or a subclass that defines nothing. Only the
  rows of the sequences and groups its calls recorded are read again (each sequence's tokens
  copied, so a kept row never changes with its table), the accesses the tables keep aside are
  merged again only when one of those changed, and a pool's columns are built again only when
  a change may have reached it (a sequence on its device, a group, a mark or a reset). A call
  that recorded nothing (a query, a refused call) returns the very compact state of the call
  before, which ``soak.same_parts`` compares with a glance.
- *From fingerprints*, for a subclass with code of its own, which may change the manager's
  structures without going through the record (a transient change, undone before any
  checkpoint, would be seen by nobody): the sequences and groups are read at every call, and a
  pool's columns are kept with the pool's ``fingerprint`` (everything ``compact`` reads of it,
  copied at C speed) and the accesses still pending on it.

Paired (``IncrementalCompact.pair``: the model's reader and the target's, both on the record
route, in ``pagedkv soak`` of a subclass without code of its own against the optimized
stand-in), a pool that a change may have reached is kept as its fingerprint alone, and the soak
compares the two states part by part (``soak.Lockstep.same_pair``): the rows, and each pool by
its fingerprint, pending accesses, configuration and first id, which are everything
``OptimizedBlockPool.compact_of`` reads to build the pool's columns. The columns are built,
from the fingerprint, only where two fingerprints differ (a free heap in another order) and at
each checkpoint.

A kept part can go stale: a change the record or the fingerprint missed would keep old rows or
columns while the manager changed. So it is never the last word: at every checkpoint the soak
builds the compact state fresh on both sides (``OptimizedBlockSpaceManager.compact``, nothing
kept) and holds the kept one equal to it; a stale one sends the episode to a replay that
compares fresh whole states after every call (``soak.Lockstep.fresh_check``). A paired pool's
columns, built at the checkpoint from its fingerprint, are held to the fresh ones the same way:
a fingerprint that missed something (and ``compact_of``, which reads nothing else) would show
there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.oracle.stand_in_guard import patched
from pagedkv.optimized.block_manager import Held, OptimizedBlockSpaceManager, Pending
from pagedkv.optimized.block_pool import OptimizedBlockPool
from pagedkv.specs.compact_state import CompactManager, CompactPool, GroupFields, SeqFields
from pagedkv.specs.types import Device

GPU, CPU = Device.GPU, Device.CPU
TOKENS, HASHES, CACHED = (
    CompactPool._fields.index(name) for name in ("tokens", "hashes", "cached")
)
"""The parts of a pool's compact form that are the pool's own list or dict (``compact``)."""

BOOKKEEPING = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
    }
)
"""What every class body defines: names, not code."""


def own_code_only(manager: OptimizedBlockSpaceManager) -> bool:
    """Whether every method the manager runs is pagedkv's own, so that its record of its changes
    can be trusted between checkpoints: its class is the optimized manager or a subclass whose
    classes define nothing but names, nothing of the class is replaced on the instance, and its
    pools are the optimized pool itself, likewise; each of its and its pools' attributes is of
    the type a freshly built manager's is (``_same_kinds``); and pagedkv's optimized code is what
    was loaded (``stand_in_guard``: a target may have patched the base class itself)."""
    if patched():
        return False
    found = type(manager)
    mro = found.__mro__
    if OptimizedBlockSpaceManager not in mro:
        return False
    for each in mro[: mro.index(OptimizedBlockSpaceManager)]:
        if set(vars(each)) - BOOKKEEPING:
            return False
    if set(vars(manager)) & set(dir(OptimizedBlockSpaceManager)):
        return False
    pools = OptimizedBlockSpaceManager.pools(manager)
    if not all(
        type(pool) is OptimizedBlockPool and not set(vars(pool)) & set(dir(OptimizedBlockPool))
        for pool in pools
    ):
        return False
    fresh = OptimizedBlockSpaceManager(manager._config)
    return _same_kinds(manager, fresh) and all(
        _same_kinds(pool, new) for pool, new in zip(pools, fresh.pools(), strict=True)
    )


READERS = frozenset({"_changes"})
"""What a reader of the manager sets (its record of changes): not the manager's own state."""


def _same_kinds(found: object, fresh: object) -> bool:
    """Whether every attribute of ``found`` is of the type the same attribute of a freshly built
    one has: a factory may have put a container of its own in (a ``dict`` subclass for the
    tables, say), whose code would change state behind the record's back."""
    mine, theirs = vars(found), vars(fresh)
    return mine.keys() == theirs.keys() and all(
        type(mine[name]) is type(theirs[name]) for name in mine.keys() - READERS
    )


@dataclass(slots=True, eq=False)
class Looked:
    """A pool as a reader last looked at it: the pool, its fingerprint (``()`` where the
    reader keeps none), the pending accesses it shows, and its compact part, None until built
    (``IncrementalCompact.part``: a paired reader builds it from the fingerprint only when it is
    asked for). A ``Looked`` is never replaced while the pool is not looked at again: the same
    object, the same pool as it was then."""

    pool: OptimizedBlockPool
    fingerprint: tuple[object, ...]
    held: Held
    part: CompactPool | None


class IncrementalCompact:
    """``manager.compact()``, kept between calls (the module's docstring). What it returns is
    never changed afterwards: the parts a later call did not change are the same objects."""

    def __init__(self, manager: OptimizedBlockSpaceManager) -> None:
        self.manager = manager
        self.pools: list[Looked | None] = [None, None]
        """The GPU pool and the CPU pool, as last looked at."""
        self.changes = manager.record_changes() if own_code_only(manager) else None
        self.last: CompactManager | None = None
        """The compact state last returned, while it is still what the last ``update`` read."""
        self.read = False
        """Whether the record was read once (``update``): before, everything is new."""
        self.seqs: dict[int, SeqFields] = {}
        self.groups: dict[int, GroupFields] = {}
        self.since: tuple[dict[int, SeqFields], set[int], dict[int, GroupFields], set[int]]
        self.since = (self.seqs, set(), self.groups, set())
        """What the last update started from and read again: the sequences' rows before it and
        the ids whose rows it read (every other row is the very one it was), and the same of
        the groups (``soak.Lockstep.same_pair`` compares only those rows)."""
        self.pending: dict[int, tuple[Device, Pending]] = {}
        """The sequences with a pending access: their device and the access."""
        self.held: tuple[Held, Held] = ({}, {})
        self.marks = (0, 0)
        """The record's counts of pool changes no sequence shows, as last read."""
        self.paired = False
        """Paired with the other side's reader (``pair``): a pool a change may have reached is
        fingerprinted, its columns built only when asked for."""

    def __call__(self) -> CompactManager:
        changes = self.changes
        if changes is None or changes.detached:
            return self.fingerprinted()
        last = self.last
        if not self.update() and last is not None:
            return last
        manager = self.manager
        built = self.last = CompactManager(
            manager.config,
            self.part(0),
            self.part(1),
            self.seqs,
            self.groups,
            manager.get_null_block(),
        )
        return built

    def pair(self, other: IncrementalCompact) -> bool:
        """Pair this reader with ``other``, the other side's in a soak, if both read through the
        record (each pool then is the optimized pool itself, with pagedkv's code:
        ``own_code_only``): after each call the two states are compared part by part
        (``soak.Lockstep.same_state``), a pool by its fingerprint, the same exactly when the
        columns ``compact`` would build are (``OptimizedBlockPool.compact_of``); the columns
        are built only where two fingerprints differ, and at each checkpoint, where the kept
        state is held to the fresh one."""
        if self.changes is None or other.changes is None:
            return False
        self.paired = other.paired = True
        return True

    def update(self) -> bool:
        """The record read (on its route only): the rows of the sequences and groups it names
        read again, and each pool a change may have reached looked at again (``look``);
        whether anything may have changed since the last update (False: all that was read
        then still holds)."""
        changes = self.changes
        assert changes is not None
        manager = self.manager
        gpu, cpu = manager.pools()
        marks = (changes.gpu, changes.cpu)
        if not self.read:  # everything is new
            self.read = True
            live = manager.live()
            changes.seqs.update(live.seqs)
            changes.groups.update(live.groups)
            on_gpu = on_cpu = True
        elif not changes.seqs and not changes.groups and marks == self.marks:
            if self.same_pools(gpu, cpu):
                return False
            on_gpu = on_cpu = False
        else:
            on_gpu, on_cpu = marks[0] != self.marks[0], marks[1] != self.marks[1]
        self.marks = marks
        self.last = None
        changed_seqs, changed_groups = changes.seqs, changes.groups
        self.since = (
            self.seqs,
            changed_seqs or set(),  # an empty record's set stays the record's: not kept
            self.groups,
            changed_groups or set(),
        )
        if changed_seqs:
            changes.seqs = set()
            gpu_seqs, cpu_seqs = self.changed_seqs(changed_seqs)
            on_gpu, on_cpu = on_gpu or gpu_seqs, on_cpu or cpu_seqs
        if changed_groups:
            changes.groups = set()
            groups = dict(self.groups)
            for group_id in changed_groups:
                was = groups.get(group_id)
                fields = manager.compact_group(group_id)
                if fields is None:
                    groups.pop(group_id, None)
                else:
                    groups[group_id] = fields
                for row in (was, fields):  # the pools it was on and is on (a swap: both)
                    if row is not None:
                        if row[1] is GPU:
                            on_gpu = True
                        else:
                            on_cpu = True
            self.groups = groups
        self.look(0, gpu, self.held[0], on_gpu)
        self.look(1, cpu, self.held[1], on_cpu)
        return True

    def unchanged(self) -> CompactManager | None:
        """The compact state returned last, if the record says nothing changed since and the
        manager's pools are the same; else None (on the fingerprint route: always None)."""
        changes, last = self.changes, self.last
        if changes is None or changes.detached or last is None or not self.quiet():
            return None
        return last

    def quiet(self) -> bool:
        """On the record route: whether the record says nothing changed since the last update,
        and the manager's pools are the same (``update`` would return False)."""
        changes = self.changes
        assert changes is not None
        return (
            self.read
            and not changes.seqs
            and not changes.groups
            and (changes.gpu, changes.cpu) == self.marks
            and self.same_pools(*self.manager.pools())
        )

    def changed_seqs(self, changed: set[int]) -> tuple[bool, bool]:
        """The rows of the ``changed`` sequences read again, and the pending accesses merged
        again if any of theirs changed; whether the changes may have reached the GPU pool, and
        the CPU pool (a freed sequence's group is recorded too, and the pool it was on with
        it)."""
        manager = self.manager
        seqs = dict(self.seqs)
        pending = self.pending
        on_gpu = on_cpu = merge = False
        for seq_id in changed:
            found = manager.compact_row(seq_id)
            if found is None:
                seqs.pop(seq_id, None)
                merge = pending.pop(seq_id, None) is not None or merge
                continue
            row, device, access = found
            seqs[seq_id] = row
            known = pending.get(seq_id)
            if device is GPU:
                on_gpu = True
            else:
                on_cpu = True
            if access is None:
                if known is not None:
                    del pending[seq_id]
                    merge = True
            elif known is None or known[0] is not device or known[1] != access:
                pending[seq_id] = (device, access)
                merge = True
        self.seqs = seqs
        if merge:
            self.held = self.merged()
        return on_gpu, on_cpu

    def merged(self) -> tuple[Held, Held]:
        """The pending accesses by block, for each pool (GPU, CPU), the later access of a block
        two tables share: as ``BlockTable.untouched`` adds them up."""
        on_gpu: Held = {}
        on_cpu: Held = {}
        for device, (stamp, now, blocks) in self.pending.values():
            into = on_gpu if device is GPU else on_cpu
            for block in blocks:
                known = into.get(block)
                if known is None or known[0] < stamp:
                    into[block] = (stamp, now)
        return on_gpu, on_cpu

    def same_pools(self, gpu: OptimizedBlockPool, cpu: OptimizedBlockPool) -> bool:
        """Whether the manager's pools are those the kept parts came from."""
        on_gpu, on_cpu = self.pools
        return (
            on_gpu is not None and on_gpu.pool is gpu and on_cpu is not None and on_cpu.pool is cpu
        )

    def look(self, index: int, pool: OptimizedBlockPool, held: Held, changed: bool) -> None:
        """The pool as last looked at is kept, unless a change may have reached it, its
        pending accesses are others or it is another pool; else it is looked at again:
        fingerprinted (paired), or its columns built."""
        known = self.pools[index]
        if (
            not changed
            and known is not None
            and known.pool is pool
            and (known.held is held or known.held == held)
        ):
            return
        if self.paired:
            self.pools[index] = Looked(pool, pool.fingerprint(), held, None)
        else:
            self.build(index, pool, (), held)

    def part(self, index: int) -> CompactPool:
        """The pool's compact part as last looked at: built from its fingerprint if it was not
        built then (``OptimizedBlockPool.compact_of``: the fingerprint's own copies, never
        changed)."""
        looked = self.pools[index]
        assert looked is not None
        part = looked.part
        if part is None:
            part = looked.part = looked.pool.compact_of(looked.fingerprint, looked.held)
        return part

    def build(
        self, index: int, pool: OptimizedBlockPool, fingerprint: tuple[object, ...], held: Held
    ) -> CompactPool:
        """The pool's compact form, its pool's own lists and dict copied, and kept."""
        fields: list[Any] = list(pool.compact(held))  # tokens, hashes, cached: the pool's own
        fields[TOKENS], fields[HASHES] = list(fields[TOKENS]), list(fields[HASHES])
        fields[CACHED] = dict(fields[CACHED])
        built = CompactPool._make(fields)
        self.pools[index] = Looked(pool, fingerprint, held, built)
        return built

    # --- a subclass with code of its own: fingerprints ------------------------------------------

    def fingerprinted(self) -> CompactManager:
        """The sequences and groups read, each pool's columns kept while its fingerprint and
        pending accesses stay the same."""
        manager = self.manager
        seqs, groups, on_gpu, on_cpu = manager.compact_tables()
        gpu, cpu = manager.pools()  # read at every call: a subclass may make a pool anew
        return CompactManager(
            manager.config,
            self.fingerprinted_pool(0, gpu, on_gpu),
            self.fingerprinted_pool(1, cpu, on_cpu),
            seqs,
            groups,
            manager.get_null_block(),
        )

    def fingerprinted_pool(
        self, index: int, pool: OptimizedBlockPool, untouched: Held
    ) -> CompactPool:
        """The one kept, if it was built from the same fingerprint and pending accesses."""
        fingerprint = pool.fingerprint()
        known = self.pools[index]
        if known is not None and known.held == untouched and known.fingerprint == fingerprint:
            return self.part(index)
        return self.build(index, pool, fingerprint, untouched)
