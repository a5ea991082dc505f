"""The reference under one policy option's other value: for each option of ``specs/policy.md``, a
target that makes the other choice, checked under a profile that fixes this one. A check must
tell them apart; that it does is what makes each option a clause the oracle enforces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.oracle.codec import Level
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs.policy import OPTIONS, PROFILES, Policy


@dataclass(frozen=True)
class OtherChoice:
    """Option ``option`` set to ``value`` (as ``--policy`` spells it) in ``profile``'s policy;
    checked at ``level`` under ``profile``."""

    option: str
    value: str
    level: Level = "manager"
    profile: str = "pagedkv"

    @property
    def name(self) -> str:
        return f"reference with {self.option}={self.value}"

    @property
    def policy(self) -> Policy:
        return PROFILES[self.profile].overridden({self.option: self.value})

    @property
    def bug(self) -> str:
        meaning = OPTIONS[self.option].meaning
        if self.value in meaning:
            return meaning[self.value]
        return f"does not offer {self.value}"  # ``unsupported``: a set of operations

    def factory(self) -> Callable[[Any], Any]:
        return self._reference(self.policy, self.name)

    def correct(self) -> Callable[[Any], Any]:
        """The reference under the profile's own choice."""
        return self._reference(PROFILES[self.profile], f"reference under {self.profile}")

    def _reference(self, policy: Policy, name: str) -> Callable[[Any], Any]:
        made: Callable[[Any, Policy], Any] = {
            "manager": ReferenceBlockSpaceManager,
            "pool": ReferenceBlockPool,
            "request": ReferenceRequestKVManager,
        }[self.level]

        def other_choice(config: Any) -> Any:
            return made(config, policy)

        other_choice.__name__ = name.replace(" ", "_")
        return other_choice


OTHER_CHOICES: tuple[OtherChoice, ...] = (
    OtherChoice("null_block", "at_first_append"),
    OtherChoice("window_release", "computed_blocks"),
    OtherChoice("append_worst_case", "token_chunks"),
    OtherChoice("swap_pairs", "every_entry"),
    OtherChoice("common_prefix", "nonempty_runs", "pool"),
    OtherChoice("cow_pairs", "as_recorded", "pool"),
    OtherChoice("promotion", "keep", "pool"),
    OtherChoice("computed_marks", "promoted_batch", "pool"),
    OtherChoice("revival_access", "reset", "pool"),
    OtherChoice("access_time", "at_free"),
    OtherChoice("computed_list", "cached_per_sequence"),
    OtherChoice("computed_list_swap", "starts_over", "manager", "vllm-v0"),
    OtherChoice("swap_worst_case", "table_entries"),
    OtherChoice("swap_never", "without_watermark"),
    OtherChoice("swap_out_answer", "ok_or_later"),
    OtherChoice("swap_cross_tables", "kept_on_gpu"),
    OtherChoice("append_order", "slots_first"),
    OtherChoice("eviction", "release_order", "pool"),
    OtherChoice("duplicates", "latest_replaces", "pool", "append-only"),
    OtherChoice("copy_on_write", "false", "pool"),
    OtherChoice("pool_null_block", "true", "pool"),
    OtherChoice("keep_freed_cache", "false", "pool"),
    OtherChoice("groups", "one_sequence"),
    OtherChoice("lookup", "stop_at_first_miss"),
    OtherChoice("admission", "free_blocks"),
    OtherChoice("cached_tokens", "hits_at_allocate"),
    OtherChoice("lookahead", "false"),
    OtherChoice("encoder", "false"),
    OtherChoice("atomic", "false"),
    OtherChoice("unsupported", "get_num_cached_tokens"),
    OtherChoice("request_hit_cap", "n", "request"),
    OtherChoice("request_release_before_fit", "false", "request"),
    OtherChoice("request_free_order", "head_first", "request"),
    OtherChoice("request_window_retention", "replay_boundary", "request"),
    OtherChoice("request_clear_event", "always", "request"),
    OtherChoice("request_eviction", "leaf_lru", "request"),
    OtherChoice("request_cache_timing", "after_compute", "request"),
    OtherChoice("request_duplicates", "keep", "request", "sglang"),
)
"""One other choice per option, at the level and under the profile where it shows."""
