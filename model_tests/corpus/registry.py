"""Every wrong variant of the corpus, with the clauses of the spec it breaks (``specs/corpus.md``).

A clause is one promise of the spec: an operation's post-condition (``manager §5.3``, ``pool
§5``), an invariant (``invariants.md``), a ``can_*`` promise (``manager §5.2``) or a policy
option (``policy.md`` §4). ``CLAUSES`` lists them all, each with the page that states it;
``VARIANTS`` names each wrong variant, its level, the profile it is checked under and the clauses
it breaks. Every clause has a variant, except those ``pagedkv check`` cannot reach
(``OUT_OF_REACH``, with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.corpus import pools
from pagedkv.model_tests.corpus.policies import OTHER_CHOICES
from pagedkv.model_tests.independent import broken, request_broken
from pagedkv.model_tests.independent import defragmenter_broken as d
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.specs.operations import OPERATIONS
from pagedkv.specs.policy import OPTIONS

INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8")
REQUEST_PAGES = {
    "get_computed_blocks": "§3",
    "allocate_slots": "§4",
    "free": "§5",
    "preempt": "§5",
    "get_block_ids": "§6",
    "num_free_blocks": "§6",
    "usage": "§6",
    "reset_prefix_cache": "§9",
    "take_events": "§9",
}
"""Where ``request_level.md`` states each request-level operation."""
DEFRAG_PAGES = {
    "update_state": "§3",
    "defragment": "§3",
    "resolve": "§3",
    "resolve_all": "§3",
    "unresolve": "§3",
}
"""Where ``defragmenter.md`` states each operation of the defrag level."""
REQUEST_SAFETY = {
    "refs": "ref counts equal holders",
    "accounting": "held or free, exactly once",
    "hit data": "a hit's blocks hold the request's tokens",
    "none": "a None changes nothing else",
    "committed": "only committed tokens cached",
    "events": "events fold into the cached keys",
}
"""The request level's safety promises (``request_level.md`` §10), each a clause."""
POOL_EVENTS = {
    "removals": "a BlockRemoved for every hash the index loses",
    "full blocks": "a BlockStored only once its block is full",
    "committed": "a BlockStored only for a hash the index holds",
    "parents": "a BlockStored names its block's parent",
}
"""The pool's KV-event promises (``block_pool.md`` §9), each a clause."""
PROMISES = ("can_allocate", "can_append_slots", "can_swap_out", "can_swap_in", "NEVER")


def _clauses() -> dict[str, str]:
    """Each clause and where the spec states it."""
    clauses = {f"manager {op}": f"block_manager.md §5.3 `{op}`" for op in OPERATIONS["manager"]}
    clauses |= {
        f"pool {op}": f"block_pool.md {'§9' if op == 'take_events' else '§5'} `{op}`"
        for op in OPERATIONS["pool"]
    }
    clauses |= {name: f"invariants.md {name}" for name in INVARIANTS}
    clauses |= {f"promise {p}": f"block_manager.md §5.2, promise of `{p}`" for p in PROMISES}
    clauses |= {f"policy {name}": f"policy.md §4 `{name}`" for name in OPTIONS}
    clauses |= {
        f"request {op}": f"request_level.md {REQUEST_PAGES[op]} `{op}`"
        for op in OPERATIONS["request"]
    }
    clauses |= {
        f"request safety: {name}": f"request_level.md §10, safety: {what}"
        for name, what in REQUEST_SAFETY.items()
    }
    clauses |= {
        f"pool events: {name}": f"block_pool.md §9, events: {what}"
        for name, what in POOL_EVENTS.items()
    }
    clauses |= {
        f"defrag {op}": f"defragmenter.md {DEFRAG_PAGES[op]} `{op}`" for op in OPERATIONS["defrag"]
    }
    return clauses


CLAUSES: dict[str, str] = _clauses()

OUT_OF_REACH = {
    "pool allocate_immutable_chain": "the isomorphic session that `pagedkv check --level pool`"
    " runs adopts one allocation choice per call and a chain makes several, so check sends a"
    " chain's blocks as single `allocate_immutable` calls; the exact-mode pool machine holds"
    " both of pagedkv's pools to it (model_tests/tests/test_pool_batches.py)",
    **{
        f"policy {name}": "a request-level option: no check drives the request level until"
        " `pagedkv check --level request` exists; model_tests/tests/test_policy.py holds the"
        " reference to each value meanwhile"
        for name in ("request_hit_cap", "request_release_before_fit", "request_free_order")
    },
}


BOTH = ("pagedkv", "safety")
ISOMORPHIC = ("pagedkv",)
"""The profiles a defrag variant is checked under: the safety tier too, unless what it breaks
is no safety promise (the pairs' order)."""


@dataclass(frozen=True)
class Variant:
    """One wrong variant: what it is, where it is checked, and what it breaks."""

    name: str
    factory: Callable[[Any], Any]
    level: Level
    profile: str
    clauses: tuple[str, ...]
    bug: str
    correct: Callable[[Any], Any]
    """The same implementation without the bug: a trace that fails the variant passes it."""


def _fixture(cls: type[Any], clauses: tuple[str, ...], *, level: Level = "manager",
             profile: str = "pagedkv") -> Variant:  # fmt: skip
    suffix = "" if profile == "pagedkv" else f" ({profile})"
    doc = " ".join((cls.__doc__ or "").split())
    correct = cls.__mro__[1]  # each variant is its correct parent with one method changed
    return Variant(cls.__name__ + suffix, cls, level, profile, clauses, doc, correct)


def _variants() -> tuple[Variant, ...]:
    b, p = broken, pools
    manager = [
        _fixture(b.BrokenForgetsCowSource, ("manager append_slots", "I1")),
        _fixture(b.BrokenEvictsNewest, ("policy eviction",)),
        _fixture(b.BrokenSwapDropsPair, ("manager swap_in",)),
        _fixture(b.BrokenCanAllocateIgnoresWatermark, ("manager can_allocate",)),
        _fixture(b.BrokenHitMarksComputed, ("manager allocate", "policy computed_marks")),
        _fixture(b.BrokenWindowKeepsExtraBlock, ("manager append_slots", "policy window_release")),
        _fixture(b.BrokenNoUpFrontCheck, ("I6",)),
        _fixture(b.BrokenCanSwapInForgetsLookahead, ("manager can_swap_in", "promise can_swap_in")),
        _fixture(b.BrokenHashIgnoresExtraKey, ("manager allocate", "I3"), profile="safety"),
        _fixture(b.BrokenFreeLeaksLastBlock, ("manager free", "I1"), profile="safety"),
        _fixture(
            b.BrokenCanAppendIgnoresCopies,
            ("manager can_append_slots", "promise can_append_slots", "I7"),
            profile="safety",
        ),
        _fixture(b.BrokenWindowKeepsGivenBackBlock, ("I2", "I4"), profile="safety"),
        _fixture(b.BrokenSwapDropsPair, ("I5",), profile="safety"),
        _fixture(b.BrokenForkForgetsLastBlock, ("manager fork", "I1")),
        _fixture(
            b.BrokenCanSwapOutIgnoresCpuRoom, ("manager can_swap_out", "promise can_swap_out")
        ),
        _fixture(b.BrokenSwapOutLeaksGpuBlock, ("manager swap_out",)),
        _fixture(b.BrokenBlockTableHidesNullEntries, ("manager get_block_table",)),
        _fixture(b.BrokenCrossTableForgotten, ("manager get_cross_block_table",)),
        _fixture(b.BrokenGpuFreeCountSkipsEvictable, ("manager get_num_free_gpu_blocks",)),
        _fixture(b.BrokenCpuFreeCountSkipsEvictable, ("manager get_num_free_cpu_blocks",)),
        _fixture(b.BrokenAccessTouchesLastBlockOnly, ("manager access_all_blocks_in_seq",)),
        _fixture(b.BrokenMarkComputedMarksPartialBlocks, ("manager mark_blocks_as_computed",)),
        _fixture(b.BrokenCommonComputedKeepsLastBlock, ("manager get_common_computed_block_ids",)),
        _fixture(b.BrokenCachedTokensIgnoreMarks, ("manager get_num_cached_tokens",)),
        _fixture(b.BrokenHitRateOfOneDevice, ("manager get_prefix_cache_hit_rate",)),
        _fixture(b.BrokenResetSaysDoneIfAny, ("manager reset_prefix_cache",)),
        _fixture(b.BrokenCanAllocateCountsHits, ("promise can_allocate", "I7")),
        _fixture(b.BrokenCanAllocateNeverWhenFull, ("promise NEVER",)),
    ]
    pool = [
        _fixture(p.PoolAllocateLeaksABlock, ("pool allocate_mutable",), level="pool"),
        _fixture(p.PoolHashIgnoresExtraKey, ("pool allocate_immutable",), level="pool"),
        _fixture(p.PoolCowKeepsSource, ("pool cow_if_not_appendable",), level="pool"),
        _fixture(p.PoolClearKeepsPairs, ("pool clear_copy_on_writes",), level="pool"),
        _fixture(p.PoolFreeDropsTwoReferences, ("pool free",), level="pool"),
        _fixture(p.PoolFreeBlocksKeepsTheLast, ("pool free_blocks",), level="pool"),
        _fixture(p.PoolForkForgetsLastBlock, ("pool fork",), level="pool"),
        _fixture(p.PoolMarkAccessedSkipsCached, ("pool mark_accessed",), level="pool"),
        _fixture(p.PoolMarkComputedSkipsCached, ("pool mark_computed",), level="pool"),
        _fixture(p.PoolCommonPrefixKeepsLast, ("pool common_computed_prefix",), level="pool"),
        _fixture(p.PoolHitRateCountsMisses, ("pool hit_rate",), level="pool"),
        _fixture(p.PoolResetRefusesCachedBlocks, ("pool reset_prefix_cache",), level="pool"),
        _fixture(p.MirroredPoolMissingOneFree, ("pool num_free_blocks",), level="pool"),
    ]
    pool_events = [
        _fixture(cls, (f"pool events: {clause}", *also), level="pool", profile=profile)
        for cls, clause, also in (
            (p.PoolEvictionSilent, "removals", ("pool take_events",)),
            (p.PoolStoresBeforeFull, "full blocks", ()),
            (p.PoolStoresWithoutCaching, "committed", ()),
            (p.PoolStoredWithoutParent, "parents", ()),
        )
        for profile in BOTH
    ]
    r = request_broken
    safety = "request safety: "
    request = [
        _fixture(r.RequestHitNotCapped, ("request get_computed_blocks",), level="request"),
        _fixture(r.RequestPreemptKeepsBlocks, ("request preempt",), level="request"),
        _fixture(r.RequestWindowHitShort, ("request get_computed_blocks",), level="request"),
        _fixture(r.RequestHybridTakesFullLength, ("request get_computed_blocks",), level="request"),
        _fixture(r.RequestLookupTakesLatest, ("request get_computed_blocks",), level="request"),
        _fixture(r.RequestCachesDrafts, (safety + "committed",), level="request"),
        _fixture(r.RequestCachesLookahead, (safety + "committed",), level="request"),
        _fixture(r.RequestCachesWhenOff, ("request take_events",), level="request"),
        _fixture(r.RequestCacheDeduplicates, ("request allocate_slots",), level="request"),
        _fixture(r.RequestNoneStillTouches, (safety + "none",), level="request"),
        _fixture(r.RequestNoneStillAllocates, (safety + "none",), level="request"),
        _fixture(r.RequestCountSkipsEvictableHits, ("request allocate_slots",), level="request"),
        _fixture(r.RequestIgnoresMaxModelLen, ("request allocate_slots",), level="request"),
        _fixture(r.RequestWindowNotReleased, ("request allocate_slots",), level="request"),
        _fixture(r.RequestWindowReleasesOneMore, ("request allocate_slots",), level="request"),
        _fixture(r.RequestWindowReleaseAscending, ("request allocate_slots",), level="request"),
        _fixture(
            r.RequestWindowReleaseAfterAllocating,
            ("request allocate_slots", "policy request_release_before_fit"),
            level="request",
        ),
        _fixture(
            r.RequestFreeHeadFirst,
            ("request free", "policy request_free_order"),
            level="request",
        ),
        _fixture(r.RequestUncachedToBack, ("request free",), level="request"),
        _fixture(r.RequestTakesFromBack, ("request allocate_slots",), level="request"),
        _fixture(r.RequestEvictionSilent, (safety + "events",), level="request"),
        _fixture(r.RequestStoredEventOneTooMany, (safety + "events",), level="request"),
        _fixture(r.RequestEventsRepeatHit, ("request take_events",), level="request"),
        _fixture(r.RequestResetWhileInUse, ("request reset_prefix_cache",), level="request"),
        _fixture(r.RequestUsageCountsNull, ("request usage",), level="request"),
        _fixture(r.RequestFreeCountSkipsCached, ("request num_free_blocks",), level="request"),
        _fixture(r.RequestTakeEventsKeeps, ("request take_events",), level="request"),
        _fixture(r.RequestBlockIdsHideNulls, ("request get_block_ids",), level="request"),
        _fixture(r.RequestFreeUnknownRaises, ("request free",), level="request"),
        _fixture(r.RequestHitTouchKeepsRefCount, (safety + "refs",), level="request"),
        _fixture(
            r.RequestWindowReleaseKeepsEntry,
            (safety + "refs", safety + "accounting"),
            level="request",
        ),
        _fixture(r.RequestEvictionKeepsKey, (safety + "hit data",), level="request"),
        _fixture(r.RequestHashIgnoresSalt, (safety + "hit data",), level="request"),
        _fixture(r.RequestHashIgnoresLora, (safety + "hit data",), level="request"),
        _fixture(r.RequestHashIgnoresMultimodal, (safety + "hit data",), level="request"),
    ]
    request_safety = [
        _fixture(cls, clauses, level="request", profile="safety")
        for cls, clauses in (
            (r.RequestCachesLookahead, (safety + "committed", safety + "hit data")),
            (r.RequestNoneStillTouches, (safety + "none", safety + "refs")),
            (r.RequestNoneStillAllocates, (safety + "none", safety + "accounting")),
            (r.RequestEvictionSilent, (safety + "events",)),
            (r.RequestStoredEventOneTooMany, (safety + "events",)),
            (r.RequestHitTouchKeepsRefCount, (safety + "refs",)),
            (r.RequestWindowReleaseKeepsEntry, (safety + "refs", safety + "accounting")),
            (r.RequestEvictionKeepsKey, (safety + "hit data",)),
            (r.RequestHashIgnoresSalt, (safety + "hit data",)),
            (r.RequestHashIgnoresLora, (safety + "hit data",)),
            (r.RequestHashIgnoresMultimodal, (safety + "hit data",)),
        )
    ]
    defrag = [
        _fixture(cls, clauses, level="defrag", profile=profile)
        for profiles, cls, clauses in (
            (BOTH, d.DefragTriggerAtThreshold, ("defrag defragment", "I8")),
            (BOTH, d.DefragPairsPastTheMiddle, ("defrag defragment", "I8")),
            (BOTH, d.DefragCapIgnored, ("defrag defragment", "I8")),
            (BOTH, d.DefragCapOffByOne, ("defrag defragment", "I8")),
            (ISOMORPHIC, d.DefragPairsOutOfOrder, ("defrag defragment",)),
            (BOTH, d.DefragMovesReservedHoles, ("defrag defragment", "I4")),
            (BOTH, d.DefragExchangeForgetsFreeSide, ("I4", "I5")),
            (BOTH, d.DefragFinishedKeepsReferences, ("defrag update_state", "I4")),
            (BOTH, d.DefragTableIdsUnchecked, ("defrag update_state",)),
            (BOTH, d.DefragUpdateNotAtomic, ("defrag update_state", "I6")),
            (BOTH, d.DefragResolveAllUnmapped, ("defrag resolve_all",)),
            (BOTH, d.DefragResolveUnmapped, ("defrag resolve", "I5")),
            (BOTH, d.DefragUnresolveThroughForward, ("defrag unresolve", "I4")),
        )
        for profile in profiles
    ]
    extra = {"promotion": ("pool append_tokens",)}
    policy = [
        Variant(
            choice.name,
            choice.factory(),
            choice.level,
            choice.profile,
            (f"policy {choice.option}", *extra.get(choice.option, ())),
            choice.bug,
            choice.correct(),
        )
        for choice in OTHER_CHOICES
    ]
    return (*manager, *pool, *pool_events, *request, *request_safety, *defrag, *policy)


VARIANTS: tuple[Variant, ...] = _variants()


def variant(name: str) -> Variant:
    """The variant called ``name`` (KeyError with the known names otherwise)."""
    for each in VARIANTS:
        if each.name == name:
            return each
    raise KeyError(f"no variant {name!r}; known: {', '.join(v.name for v in VARIANTS)}")


def uncovered() -> list[str]:
    """Clauses no variant breaks and no reason puts out of reach."""
    covered = {clause for each in VARIANTS for clause in each.clauses}
    return [c for c in CLAUSES if c not in covered and c not in OUT_OF_REACH]
