"""The ``sglang`` profile and leaf-only eviction (``specs/radix_cache.md``), through the oracle:
the reference under SGLang's policy passes a check under the ``sglang`` profile, and the
reference that differs from a profile in its eviction alone fails it, either way round."""

from __future__ import annotations

from typing import Any

import pytest

from pagedkv.model_tests.oracle.api import check
from pagedkv.model_tests.oracle.targets import Factory
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager, sglang_reference
from pagedkv.specs.errors import InvalidArgumentError
from pagedkv.specs.policy import PAGEDKV, profile
from pagedkv.specs.request_types import Request, RequestConfig

STEPS = 1500


def leaf_lru_reference(config: RequestConfig) -> ReferenceRequestKVManager:
    return ReferenceRequestKVManager(config, PAGEDKV.overridden({"request_eviction": "leaf_lru"}))


def test_the_sglang_profile_is_sglangs_radix_cache() -> None:
    """SGLang's hit cap (``input_len - 1``), leaf-only eviction, insertion at its checkpoints
    with its duplicates freed, at the request level only."""
    sglang = profile("sglang")
    assert sglang.policy.request_hit_cap == "n_minus_1"
    assert sglang.policy.request_eviction == "leaf_lru"
    assert sglang.policy.differences(PAGEDKV) == {
        "request_eviction": ("leaf_lru", "free_queue"),
        "request_cache_timing": ("at_checkpoint", "at_schedule"),
        "request_duplicates": ("free_at_insert", "keep"),
    }
    assert sglang.levels == ("request",)
    with pytest.raises(ValueError, match="request level only"):
        sglang.check_level("manager")


def test_the_reference_under_sglangs_policy_passes_the_sglang_profile() -> None:
    result = check(sglang_reference, "request", profile="sglang", steps=STEPS, seed=0)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("target", "profile_name"),
    [(leaf_lru_reference, "pagedkv"), (ReferenceRequestKVManager, "sglang")],
    ids=["leaf_lru under pagedkv", "free_queue under sglang"],
)
def test_a_reference_of_the_other_eviction_fails(target: Factory | str, profile_name: str) -> None:
    """The eviction order is observable: the isomorphic session catches either choice where the
    profile makes the other."""
    result = check(target, "request", profile=profile_name, steps=STEPS, seed=0)
    assert not result.passed
    assert "allocate_slots" in result.message


def test_the_reference_under_sglangs_policy_is_safe() -> None:
    """Leaf-only eviction keeps every safety promise of the request level (the safety tier,
    drawing what the ``sglang`` profile offers)."""
    result = check(sglang_reference, "request", profile="safety:sglang", steps=STEPS, seed=3)
    assert result.passed, result.message


def after_compute_reference(config: RequestConfig) -> ReferenceRequestKVManager:
    return ReferenceRequestKVManager(
        config, PAGEDKV.overridden({"request_cache_timing": "after_compute"})
    )


def test_caching_after_compute_is_a_choice_the_oracle_tells_apart() -> None:
    """Caching only computed tokens is safe, agrees with the reference told to do the same
    (``--policy request_cache_timing=after_compute``), and fails pagedkv's own policy."""
    after = {"request_cache_timing": "after_compute"}
    safe = check(after_compute_reference, "request", profile="safety", steps=STEPS, seed=3)
    assert safe.passed, safe.message
    same = check(after_compute_reference, "request", policy=after, steps=STEPS, seed=0)
    assert same.passed, same.message
    assert not check(after_compute_reference, "request", steps=STEPS, seed=0).passed


def test_a_checkpoint_counts_a_recomputed_prefill() -> None:
    """A request admitted again with its output (a preemption's recompute) computes all of it
    as its prefill (SGLang's extend of ``origin_input_ids + output_ids``): each chunk is
    checkpointed up to the tokens it was admitted with, not only up to its prompt."""
    config = RequestConfig(8, 2)
    m = ReferenceRequestKVManager(config, profile("sglang").policy)
    tokens = tuple(range(6))
    m.allocate_slots(Request("a", tokens, 2, 0), 2)
    m.allocate_slots(Request("a", tokens, 2, 2), 4)
    asking = Request("b", tuple(range(9)), 9, 0)
    assert m.get_computed_blocks(asking)[1] == 2
    m.allocate_slots(Request("a", (*tokens, 6), 2, 6), 1)
    assert m.get_computed_blocks(asking)[1] == 6


def test_a_preemption_caches_nothing_a_finish_caches_what_ran() -> None:
    """Under SGLang's timing a finish inserts what the last step computed and a retract inserts
    nothing (``preempt``, ``specs/request_level.md`` §5); under vLLM's both are ``free``."""
    hits = {}
    for name in ("sglang", "pagedkv"):
        for release in ("free", "preempt"):
            m = ReferenceRequestKVManager(RequestConfig(8, 2), profile(name).policy)
            m.allocate_slots(Request("a", tuple(range(4)), 4, 0), 4)
            if release == "free":
                m.free("a")
            else:
                m.preempt("a")
            hits[name, release] = m.get_computed_blocks(Request("b", tuple(range(5)), 5, 0))[1]
    assert hits == {
        ("sglang", "free"): 4,
        ("sglang", "preempt"): 0,
        ("pagedkv", "free"): 4,
        ("pagedkv", "preempt"): 4,
    }


@pytest.mark.parametrize("make", [ReferenceRequestKVManager, RequestManager])
def test_preempt_checks_its_id_as_free_does(make: type[Any]) -> None:
    """``preempt``'s error paths (request §5): a request id that is not a string is refused with
    ``InvalidArgumentError`` and changes nothing; an unknown one is a no-op, as for ``free``."""
    m = make(RequestConfig(8, 2))
    m.allocate_slots(Request("a", tuple(range(4)), 4, 0), 4)
    before = m.view()
    with pytest.raises(InvalidArgumentError):
        m.preempt(5)
    m.preempt("nobody")
    assert m.view() == before
