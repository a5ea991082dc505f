"""The operation stream of a policy: what the scheduler calls when the manager's answers follow
profile ``P`` (``specs/policy.py``).

The scheduler reads the manager's answers, so a manager with another policy (vLLM 0.6.3's
``can_append_slots`` counts its worst case otherwise, its ``can_swap_out`` never says NEVER)
would have been asked other questions than pagedkv's stream holds, and it lacks some operations
altogether. So a target checked under ``--profile P`` replays the stream the same scheduler
makes over the reference under ``P`` (``Offered``: the questions ``P``'s engine does not offer
are not asked): its answers are held to the reference's there, and whatever differs is a
difference of the target's own, counted and shown, never a reason to leave it untimed. The
optimized manager replays that stream too, so that the two are timed on the same calls.

The reference is slow (about a hundred times the optimized manager): recording the default
stream over it takes minutes, once per profile.
"""

from __future__ import annotations

import time
from functools import partial

from pagedkv.model_tests.bench.scheduler import Offered
from pagedkv.model_tests.bench.workload import Workload, WorkloadSpec, build
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.policy import PROFILES

PAGEDKV = "pagedkv"
"""The default profile, whose stream the optimized manager records (it is exact to the
reference under it)."""


def offered(profile: str) -> Offered:
    policy = PROFILES[profile]
    return Offered(policy.unsupported, policy.lookahead)


def record(spec: WorkloadSpec, profile: str) -> tuple[Workload, float]:
    """The stream of ``profile`` and the seconds its recording took."""
    start = time.perf_counter()
    if profile == PAGEDKV:
        found = build(spec)
    else:
        model = partial(ReferenceBlockSpaceManager, policy=PROFILES[profile])
        found = build(spec, model, offered(profile), profile)
    return found, time.perf_counter() - start
