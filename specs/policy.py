"""The policy tier: choices a correct allocator may make differently (``specs/policy.md``).

A ``Policy`` names one value for each choice; the reference implements every value (it really
behaves that way: the oracle never masks a difference), so a profile reproduces an engine and the
oracle can tell the engine's choices from its bugs. ``PROFILES`` are the named policies;
``OPTIONS`` documents each option (what it changes, which engine makes which choice), and is what
``specs/policy.md``'s table is printed from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal, get_args

from pagedkv.specs.operations import OPERATIONS

OPERATION_NAMES: frozenset[str] = frozenset(
    name for level in OPERATIONS.values() for name, op in level.items() if not op.optional
)
"""What policy ``unsupported`` may name: the required operations of every level (a target simply
lacks an optional one, and is not offered it)."""

NullBlockWhen = Literal["at_creation", "at_first_append"]
WindowRelease = Literal["token_exact", "computed_blocks"]
AppendWorstCase = Literal["touched_blocks", "token_chunks", "new_blocks"]
SwapPairs = Literal["copies", "every_entry"]
CommonPrefix = Literal["every_run", "nonempty_runs"]
CowPairs = Literal["pending", "as_recorded"]
Promotion = Literal["dedup", "copy_then_dedup", "keep"]
ComputedMarks = Literal["data", "promoted_batch"]
RevivalAccess = Literal["kept", "reset"]
AccessTime = Literal["immediate", "at_free"]
ComputedList = Literal["recomputed", "cached_per_sequence"]
ComputedListSwap = Literal["starts_over", "kept"]
SwapWorstCase = Literal["distinct_blocks", "table_entries"]
SwapNever = Literal["with_watermark", "without_watermark"]
SwapOutAnswer = Literal["status", "ok_or_later"]
SwapCrossTables = Literal["moved", "kept_on_gpu"]
AppendOrder = Literal["token_by_token", "slots_first"]
Eviction = Literal["lru", "release_order", "free_list"]
Duplicates = Literal["first_stays", "latest_replaces"]
Groups = Literal["many_sequences", "one_sequence"]
Lookup = Literal["every_block", "stop_at_first_miss"]
Admission = Literal["watermark", "free_blocks"]
CachedTokens = Literal["computed_marks", "hits_at_allocate"]
RequestHitCap = Literal["n_minus_1", "n"]
RequestFreeOrder = Literal["tail_first", "head_first"]
RequestWindowRetention = Literal["dense", "replay_boundary"]
RequestClearEvent = Literal["with_caching", "always"]
RequestEviction = Literal["free_queue", "leaf_lru"]
RequestCacheTiming = Literal["at_schedule", "after_compute", "at_checkpoint"]
RequestDuplicates = Literal["keep", "free_at_insert"]


@dataclass(frozen=True, slots=True)
class Policy:
    null_block: NullBlockWhen = "at_creation"
    window_release: WindowRelease = "token_exact"
    append_worst_case: AppendWorstCase = "touched_blocks"
    swap_pairs: SwapPairs = "copies"
    common_prefix: CommonPrefix = "every_run"
    cow_pairs: CowPairs = "pending"
    promotion: Promotion = "dedup"
    computed_marks: ComputedMarks = "data"
    revival_access: RevivalAccess = "kept"
    access_time: AccessTime = "immediate"
    computed_list: ComputedList = "recomputed"
    computed_list_swap: ComputedListSwap = "starts_over"
    swap_worst_case: SwapWorstCase = "distinct_blocks"
    swap_never: SwapNever = "with_watermark"
    swap_out_answer: SwapOutAnswer = "status"
    swap_cross_tables: SwapCrossTables = "moved"
    append_order: AppendOrder = "token_by_token"
    eviction: Eviction = "lru"
    duplicates: Duplicates = "first_stays"
    copy_on_write: bool = True
    pool_null_block: bool = False
    keep_freed_cache: bool = True
    groups: Groups = "many_sequences"
    lookup: Lookup = "every_block"
    admission: Admission = "watermark"
    cached_tokens: CachedTokens = "computed_marks"
    lookahead: bool = True
    encoder: bool = True
    atomic: bool = True
    request_hit_cap: RequestHitCap = "n_minus_1"
    request_release_before_fit: bool = True
    request_free_order: RequestFreeOrder = "tail_first"
    request_window_retention: RequestWindowRetention = "dense"
    request_clear_event: RequestClearEvent = "with_caching"
    request_eviction: RequestEviction = "free_queue"
    request_cache_timing: RequestCacheTiming = "at_schedule"
    request_duplicates: RequestDuplicates = "keep"
    unsupported: frozenset[str] = frozenset()
    """Operations the engine does not offer: the reference raises ``UnsupportedError`` for them."""

    def overridden(self, assignments: dict[str, str]) -> Policy:
        """This policy with ``name=value`` assignments (from ``--policy``) applied; ValueError
        with a one-line message for an unknown option or value."""
        changes: dict[str, object] = {}
        for name, text in assignments.items():
            option = OPTIONS.get(name)
            if option is None:
                raise ValueError(f"unknown policy option {name!r} (known: {', '.join(OPTIONS)})")
            changes[name] = option.parse(text)
        return replace(self, **changes)  # type: ignore[arg-type]

    def differences(self, other: Policy) -> dict[str, tuple[object, object]]:
        return {
            f.name: (getattr(self, f.name), getattr(other, f.name))
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        }

    def describe(self) -> str:
        """``name=value`` for every option that differs from pagedkv's own policy."""
        shown = [
            f"{name}={value_text(mine)}" for name, (mine, _) in self.differences(PAGEDKV).items()
        ]
        return " ".join(shown) or "(pagedkv's own)"


def value_text(value: object) -> str:
    """An option's value as ``--policy`` spells it: a set as sorted comma-separated names."""
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class Option:
    """One policy option: its values, what each means, and which engines choose which."""

    name: str
    values: tuple[str, ...]
    what: str
    meaning: dict[str, str]
    rule: tuple[str, ...]
    """Where the reference implements it: ``path: function`` for each place (a test holds every
    citation to the file)."""

    def parse(self, text: str) -> object:
        if self.name == "unsupported":
            names = frozenset(t for t in text.split(",") if t)
            unknown = sorted(names - OPERATION_NAMES)
            if unknown:
                raise ValueError(
                    f"policy option unsupported: {', '.join(unknown)} is not an operation"
                    " of either protocol"
                )
            return names
        if self.values == ("true", "false"):
            if text.lower() not in self.values:
                raise ValueError(f"policy option {self.name} is true or false, got {text!r}")
            return text.lower() == "true"
        if text not in self.values:
            raise ValueError(
                f"policy option {self.name} is one of {', '.join(self.values)}, got {text!r}"
            )
        return text


def _values(kind: object) -> tuple[str, ...]:
    return tuple(str(v) for v in get_args(kind))


OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option(
            "null_block",
            _values(NullBlockWhen),
            "when a sliding window's null block is taken from the GPU pool",
            {
                "at_creation": "pagedkv: block 0, pinned when the manager is made",
                "at_first_append": "vLLM 0.6.3: the first append of a windowed table takes it",
            },
            rule=(
                "reference/manager_state.py: new_manager",
                "reference/manager_state.py: take_null_block",
                "reference/block_manager.py: append_slots",
            ),
        ),
        Option(
            "window_release",
            _values(WindowRelease),
            "which blocks an append releases to the null block",
            {
                "token_exact": "pagedkv: before an append with tokens, every block wholly before"
                " `T - W + 1` (T tokens held, window W)",
                "computed_blocks": "vLLM 0.6.3: at every append, the first `T // bs - (W // bs"
                " + 2)` blocks (T: tokens computed before it)",
            },
            rule=(
                "reference/block_manager.py: _release_out_of_window",
                "reference/block_table.py: out_of_window",
                "specs/accounting.py: computed_blocks_release_end",
            ),
        ),
        Option(
            "append_worst_case",
            _values(AppendWorstCase),
            "the blocks `can_append_slots` (and an up-front append check) counts per sequence",
            {
                "touched_blocks": "pagedkv: existing blocks that receive a token, plus blocks"
                " added (manager §4.5)",
                "token_chunks": "vLLM 0.6.3: `1 + ceil((n + L - first_chunk) / bs)`, blind to"
                " lookahead blocks already in the table",
                "new_blocks": "nano-vllm: only the blocks added (a block it writes is never"
                " shared, so it is never copied)",
            },
            rule=(
                "reference/block_manager.py: _touched",
                "specs/accounting.py: blocks_touched_by_append",
                "specs/accounting.py: token_chunks",
            ),
        ),
        Option(
            "swap_pairs",
            _values(SwapPairs),
            "which (source, destination) pairs a swap reports",
            {
                "copies": "pagedkv: each distinct block once, only real copies (no cache hit,"
                " no empty block)",
                "every_entry": "vLLM 0.6.3: every entry of every table but the null block's,"
                " sequence by sequence: a block two tables share is released and taken once per"
                " table (a hit the second time when it is hashed); an atomic swap counts every"
                " entry up front",
            },
            rule=(
                "reference/swap.py: move_group",
                "reference/swap.py: move_table_by_table",
                "reference/swap.py: blocks_to_move",
            ),
        ),
        Option(
            "common_prefix",
            _values(CommonPrefix),
            "how the common computed prefix treats a sequence with nothing computed",
            {
                "every_run": "pagedkv: an empty run makes the common prefix empty",
                "nonempty_runs": "vLLM 0.6.3: empty runs are dropped before the common prefix",
            },
            rule=(
                "reference/block_pool.py: common_computed_prefix",
                "reference/block_manager.py: common_of_kept_lists",
            ),
        ),
        Option(
            "cow_pairs",
            _values(CowPairs),
            "copy-on-write pairs whose destination is given back before they are handed out",
            {
                "pending": "pagedkv: dropped, and a copy from a block still awaiting its own"
                " copy reads that copy's source",
                "as_recorded": "vLLM 0.6.3: kept as recorded",
            },
            rule=(
                "reference/block_pool.py: _record_copy",
                "reference/allocation.py: discard_pending_copies",
            ),
        ),
        Option(
            "promotion",
            _values(Promotion),
            "an append that fills a block whose content is cached elsewhere",
            {
                "dedup": "pagedkv: switch straight to the cached block, no copy",
                "copy_then_dedup": "vLLM 0.6.3: copy-on-write first (a shared block), then"
                " switch to the cached block",
                "keep": "append-only (vLLM v1, nano-vllm): the filled block keeps its id and"
                " is cached too (policy `duplicates` says which of the two a lookup finds)",
            },
            rule=("reference/block_pool.py: append_tokens",),
        ),
        Option(
            "computed_marks",
            _values(ComputedMarks),
            "which blocks count as computed (their KV written)",
            {
                "data": "pagedkv: exactly the full blocks `mark_computed` named; a hit or a"
                " dedup leaves the mark as it was (pool §8); a swap carries the marks",
                "promoted_batch": "vLLM 0.6.3: `mark_computed` ignores its blocks and marks every"
                " block promoted since the previous call that is still held (the manager's mark,"
                " whatever group it names, marks the GPU pool's); a hit or dedup that"
                " takes a block back from the evictor makes it computed (vLLM counts every"
                " evictable block as computed: only this shows it); a swap's copies are promoted"
                " blocks, computed at the next mark",
            },
            rule=(
                "reference/block_pool.py: mark_computed",
                "reference/block_manager.py: mark_blocks_as_computed",
                "reference/block_pool.py: _take_cached",
                "reference/swap.py: _take_copy",
            ),
        ),
        Option(
            "revival_access",
            _values(RevivalAccess),
            "the last-access time of a cached block a hit takes back from the evictor",
            {
                "kept": "pagedkv: kept (per physical block)",
                "reset": "vLLM 0.6.3: reset to never accessed (its block tracker starts over)",
            },
            rule=("reference/block_pool.py: _take_cached",),
        ),
        Option(
            "access_time",
            _values(AccessTime),
            "when `access_all_blocks_in_seq` reaches the blocks",
            {
                "immediate": "pagedkv: at once, in any mode",
                "at_free": "vLLM 0.6.3: with caching only, one time kept per sequence and given"
                " to its blocks when the sequence is freed",
            },
            rule=(
                "reference/block_manager.py: access_all_blocks_in_seq",
                "reference/block_manager.py: free",
            ),
        ),
        Option(
            "computed_list",
            _values(ComputedList),
            "how `get_common_computed_block_ids` finds each sequence's computed blocks",
            {
                "recomputed": "pagedkv: the leading computed run of the table, every time",
                "cached_per_sequence": "vLLM 0.6.3: a list kept per sequence and only extended;"
                " once a block past it is not computed the list stops growing until the sequence"
                " is freed (vLLM's also takes computed blocks past the gap, which is no prefix:"
                " the reference stops at it); a window release of its head empties it; one"
                " sequence's list is its answer",
            },
            rule=(
                "reference/block_manager.py: get_common_computed_block_ids",
                "reference/block_manager.py: extend_computed_list",
                "reference/block_manager.py: _released_from_computed_list",
            ),
        ),
        Option(
            "computed_list_swap",
            _values(ComputedListSwap),
            "what a swap does to a sequence's kept computed list"
            " (`computed_list=cached_per_sequence`)",
            {
                "starts_over": "pagedkv: a swap renames every block, so the list starts over",
                "kept": "vLLM 0.6.3: its tracker outlives the swap: the list keeps its length"
                " and its stop, at the blocks now in those entries, so a list that stopped at a"
                " gap stays stopped (conservative; vLLM keeps the ids themselves, so a swap"
                " that renamed one of them would diverge)",
            },
            rule=(
                "reference/block_manager.py: swap_out",
                "reference/block_manager.py: _carried_computed_lists",
            ),
        ),
        Option(
            "swap_worst_case",
            _values(SwapWorstCase),
            "the blocks `can_swap_in` / `can_swap_out` count",
            {
                "distinct_blocks": "pagedkv: each distinct block, plus the blocks lookahead adds",
                "table_entries": "vLLM 0.6.3 (with its #8824 fixed): per sequence the token chunks"
                " of its lookahead, plus every table entry but full blocks the destination holds"
                " already",
            },
            rule=(
                "reference/block_manager.py: _swap_worst_case",
                "reference/block_manager.py: _entry_cost",
            ),
        ),
        Option(
            "swap_never",
            _values(SwapNever),
            "when a swap is judged NEVER",
            {
                "with_watermark": "pagedkv: when it would not fit an empty device with the"
                " watermark kept",
                "without_watermark": "vLLM 0.6.3: only when it exceeds the device's capacity"
                " (what fits only by eating the watermark waits as LATER)",
            },
            rule=("reference/block_manager.py: _swap_status",),
        ),
        Option(
            "swap_out_answer",
            _values(SwapOutAnswer),
            "what `can_swap_out` can answer",
            {
                "status": "pagedkv: OK, LATER or NEVER",
                "ok_or_later": "vLLM 0.6.3: a bool, so NEVER is answered LATER",
            },
            rule=("reference/block_manager.py: can_swap_out",),
        ),
        Option(
            "swap_cross_tables",
            _values(SwapCrossTables),
            "whether a swap moves a group's cross-attention table",
            {
                "moved": "pagedkv: with the group",
                "kept_on_gpu": "vLLM 0.6.3: never; it stays on the GPU while the group is away",
            },
            rule=(
                "reference/swap.py: move_group",
                "reference/swap.py: move_table_by_table",
                "reference/block_manager.py: _swap_worst_case",
            ),
        ),
        Option(
            "append_order",
            _values(AppendOrder),
            "when an append takes the blocks past its table's end",
            {
                "token_by_token": "pagedkv: each as the tokens reach it, then the lookahead",
                "slots_first": "vLLM 0.6.3: all of them (tokens' and lookahead's) first, empty,"
                " then the tokens are written",
            },
            rule=("reference/block_table.py: append",),
        ),
        Option(
            "eviction",
            _values(Eviction),
            "which block nobody holds an allocation takes (a cached one is evicted)",
            {
                "lru": "pagedkv (and vLLM 0.6.3): a free block, else the first cached block in"
                " the eviction order of block_pool.md §4",
                "release_order": "append-only (vLLM v1's free queue, the nano-vllm fork's free"
                " list): a free block, else the cached one given back first, whatever its"
                " accesses; a sequence gives its blocks back tail first",
                "free_list": "upstream nano-vllm: one first-in first-out list of every block"
                " nobody holds, cached or not: a block never taken before if any is left, else"
                " the one given back first, even while a block without contents waits behind"
                " it; a sequence gives its blocks back tail first",
            },
            rule=(
                "reference/allocation.py: allowed_choices",
                "reference/allocation.py: _first_in_free_list",
                "reference/block_pool.py: _release",
                "reference/block_manager.py: free",
            ),
        ),
        Option(
            "duplicates",
            _values(Duplicates),
            "with `promotion=keep`, which of two blocks cached under one hash a lookup finds",
            {
                "first_stays": "vLLM v1: the block cached first; the later one is kept as a"
                " second holder of the hash, found once the first is evicted",
                "latest_replaces": "nano-vllm: the block cached last; the earlier one is no"
                " longer found",
            },
            rule=(
                "reference/hash_index.py: index_block",
                "reference/hash_index.py: unindex_block",
            ),
        ),
        Option(
            "copy_on_write",
            ("true", "false"),
            "whether a shared block is ever written",
            {
                "true": "pagedkv: an append to a shared block copies it first",
                "false": "append-only: never (blocks are shared only when full); such an"
                " append, and `cow_if_not_appendable`, raise UnsupportedError",
            },
            rule=("reference/block_pool.py: cow_if_not_appendable",),
        ),
        Option(
            "pool_null_block",
            ("true", "false"),
            "whether a pool keeps its first block for itself",
            {
                "false": "pagedkv: a pool gives every block; the manager takes a null block",
                "true": "vLLM v1: `BlockPool` takes its first block as the null block when made",
            },
            rule=(
                "reference/block_pool.py: _with_own_null_block",
                "reference/pool_state.py: callers_count",
                "reference/block_pool.py: reset_prefix_cache",
            ),
        ),
        Option(
            "keep_freed_cache",
            ("true", "false"),
            "whether a cached block nobody holds stays cached",
            {
                "true": "pagedkv: it waits, evictable, for a later hit",
                "false": "nano-vllm (the published fork): its hash is dropped when freed",
            },
            rule=("reference/block_pool.py: _release",),
        ),
        Option(
            "groups",
            _values(Groups),
            "how many sequences a request starts with",
            {
                "many_sequences": "pagedkv: a group's sequences share the prompt's blocks",
                "one_sequence": "nano-vllm: one (parallel samples are separate requests)",
            },
            rule=("reference/block_manager.py: allocate",),
        ),
        Option(
            "lookup",
            _values(Lookup),
            "which prompt blocks are looked up in the cache",
            {
                "every_block": "pagedkv: every full block",
                "stop_at_first_miss": "nano-vllm: after the first miss, every later block is a"
                " miss",
            },
            rule=("reference/block_table.py: allocate_prompt",),
        ),
        Option(
            "admission",
            _values(Admission),
            "how `can_allocate` answers",
            {
                "watermark": "pagedkv: OK / LATER / NEVER with the watermark (vLLM's rule)",
                "free_blocks": "nano-vllm: OK when the prompt's blocks are free, else LATER;"
                " no watermark, no NEVER",
            },
            rule=("reference/block_manager.py: can_allocate",),
        ),
        Option(
            "cached_tokens",
            _values(CachedTokens),
            "what `get_num_cached_tokens` counts",
            {
                "computed_marks": "pagedkv: the tokens of the leading run of computed blocks",
                "hits_at_allocate": "nano-vllm: the tokens of the prompt's leading cache hits"
                " when it was allocated",
            },
            rule=(
                "reference/block_manager.py: allocate",
                "reference/block_manager.py: get_num_cached_tokens",
            ),
        ),
        Option(
            "lookahead",
            ("true", "false"),
            "whether lookahead slots are offered",
            {
                "true": "pagedkv: `num_lookahead_slots` empty slots follow the tokens (never"
                " hashed)",
                "false": "nano-vllm: a lookahead is UnsupportedError",
            },
            rule=("reference/block_manager.py: _offered_lookahead",),
        ),
        Option(
            "encoder",
            ("true", "false"),
            "whether encoder prompts (cross-attention tables) are offered",
            {
                "true": "pagedkv: a group with an encoder prompt gets a cross-attention table",
                "false": "nano-vllm: an encoder prompt is UnsupportedError",
            },
            rule=("reference/block_manager.py: _prompt_blocks",),
        ),
        Option(
            "atomic",
            ("true", "false"),
            "whether a call that fails is refused before it changes anything",
            {
                "true": "pagedkv: every operation checks its worst case up front",
                "false": "vLLM 0.6.3, nano-vllm: only the `can_*` promise protects a call;"
                " without it a call may fail midway, and the run ends there (the reference, pure,"
                " changes nothing, but a target's state is then undefined)",
            },
            rule=(
                "reference/block_manager.py: allocate",
                "reference/block_manager.py: append_slots",
                "reference/swap.py: check_room",
            ),
        ),
        Option(
            "request_hit_cap",
            _values(RequestHitCap),
            "how long a request-level hit may be (`get_computed_blocks`)",
            {
                "n_minus_1": "pagedkv, vLLM v1: at most `num_tokens - 1` tokens, so the last"
                " token is always computed for its logits and a fully cached prompt recomputes"
                " its last block",
                "n": "every full block of the request may hit",
            },
            rule=("reference/request_hits.py: hit_cap",),
        ),
        Option(
            "request_release_before_fit",
            ("true", "false"),
            "whether `allocate_slots` keeps a sliding window's release when it answers None",
            {
                "true": "pagedkv, vLLM v1: blocks that left the window are given back first and"
                " stay given back even when the new blocks do not fit",
                "false": "a None changes nothing; the release happens only with an allocation",
            },
            rule=("reference/request_manager.py: allocate_slots",),
        ),
        Option(
            "request_free_order",
            _values(RequestFreeOrder),
            "the order `free` gives a request's blocks back in, per group",
            {
                "tail_first": "pagedkv, vLLM v1: the table reversed, so a chain's tail is"
                " evicted before its head and an uncached tail is reused first",
                "head_first": "the table in order",
            },
            rule=("reference/request_manager.py: free",),
        ),
        Option(
            "request_window_retention",
            _values(RequestWindowRetention),
            "which newly full blocks a sliding-window group caches",
            {
                "dense": "pagedkv: every full block of committed tokens that is not the null"
                " block (vLLM with `prefix_cache_retention_interval=None`)",
                "replay_boundary": "vLLM v1 (its default `prefix_cache_retention_interval=0`):"
                " only the `cdiv(W - 1, B)` blocks a hit at the prompt's replay boundary"
                " (`num_prompt_tokens - 1`) or at the request's shared-prefix boundary reads;"
                " the others count as cached and are never cached (full-attention groups cache"
                " every block)",
            },
            rule=(
                "reference/request_retention.py: retained",
                "reference/request_retention.py: shared_prefix_boundary",
                "reference/request_manager.py: cache_full_blocks",
            ),
        ),
        Option(
            "request_clear_event",
            _values(RequestClearEvent),
            "when `reset_prefix_cache` reports `AllBlocksCleared`",
            {
                "with_caching": "pagedkv: only with caching on (without it there are no events)",
                "always": "vLLM v1 (KV events on without prefix caching): at every reset that"
                " succeeds",
            },
            rule=("reference/request_manager.py: reset_prefix_cache",),
        ),
        Option(
            "request_eviction",
            _values(RequestEviction),
            "which free block a request-level allocation takes (and evicts, if cached)",
            {
                "free_queue": "pagedkv, vLLM v1: the front of the free queue, whatever extends"
                " it: a sliding window's early blocks, given back first, go before the blocks"
                " chained on them",
                "leaf_lru": "SGLang's radix cache (`RadixCache.evict`): the first block of the"
                " free queue that leaves every cached chain whole (uncached, or its key kept by"
                " another block, or no free cached block chained on it), so a cached block's"
                " parent stays cached (`specs/radix_cache.md` §4)",
            },
            rule=(
                "reference/request_eviction.py: next_to_take",
                "reference/request_eviction.py: may_evict",
                "reference/free_queue.py: take_from_front",
            ),
        ),
        Option(
            "request_cache_timing",
            _values(RequestCacheTiming),
            "when a request's full blocks become hits",
            {
                "at_schedule": "pagedkv, vLLM v1: inside the `allocate_slots` that schedules"
                " their tokens, before the engine computes them (request §4.7)",
                "after_compute": "once computed: each `allocate_slots` caches the full blocks of"
                " the tokens computed before it (`num_computed_tokens` and the hit), so a chunk's"
                " blocks become hits at the request's next call, and a request's last step is"
                " never cached",
                "at_checkpoint": "SGLang's radix cache (`checkpoint_kv_cache` after every prefill"
                " chunk, `release_kv_cache(checkpoint=True)` at finish): while a request's"
                " prefill lasts (its computed tokens within the tokens it was admitted with),"
                " `allocate_slots` caches the full blocks of the tokens computed before it;"
                " nothing while it decodes; `free` caches the committed tokens the request's"
                " last `allocate_slots` scheduled, then gives its blocks back"
                " (`specs/radix_cache.md` §3)",
            },
            rule=("reference/request_manager.py: tokens_to_cache",),
        ),
        Option(
            "request_duplicates",
            _values(RequestDuplicates),
            "a request's block whose key another block is cached under already, when caching",
            {
                "keep": "pagedkv, vLLM v1: cached too, behind the first (a lookup finds the"
                " first); the request keeps its own block (request §1)",
                "free_at_insert": "SGLang's radix cache (`RadixCache.insert` answers the length"
                " already cached and `checkpoint` frees the request's pages there and rewrites"
                " its row): the request's table takes the cached block instead, its own block"
                " goes back uncached, and no event names it (`specs/radix_cache.md` §3)",
            },
            rule=("reference/request_manager.py: cache_full_blocks",),
        ),
        Option(
            "unsupported",
            (),
            "operations the engine does not offer (comma-separated)",
            {
                "": "the reference raises UnsupportedError for them, at either level, before"
                " it reads an argument"
            },
            rule=("reference/offered.py: offered",),
        ),
    )
}

PAGEDKV = Policy()

PROFILES: dict[str, Policy] = {
    "pagedkv": PAGEDKV,
    "vllm-v0": Policy(
        null_block="at_first_append",
        window_release="computed_blocks",
        append_worst_case="token_chunks",
        swap_pairs="every_entry",
        common_prefix="nonempty_runs",
        cow_pairs="as_recorded",
        promotion="copy_then_dedup",
        computed_marks="promoted_batch",
        revival_access="reset",
        access_time="at_free",
        computed_list="cached_per_sequence",
        computed_list_swap="kept",
        swap_worst_case="table_entries",
        swap_never="without_watermark",
        swap_out_answer="ok_or_later",
        swap_cross_tables="kept_on_gpu",
        append_order="slots_first",
        atomic=False,
        unsupported=frozenset({"get_num_cached_tokens", "reset_prefix_cache"}),
    ),
}

APPEND_ONLY = Policy(promotion="keep", eviction="release_order", copy_on_write=False)

PROFILES["append-only"] = APPEND_ONLY
PROFILES["vllm-v1"] = replace(
    APPEND_ONLY,
    pool_null_block=True,
    request_window_retention="replay_boundary",
    request_clear_event="always",
    unsupported=frozenset({"cow_if_not_appendable", "common_computed_prefix", "hit_rate"}),
)
PROFILES["nano-vllm"] = replace(
    APPEND_ONLY,
    duplicates="latest_replaces",
    keep_freed_cache=False,
    groups="one_sequence",
    lookup="stop_at_first_miss",
    admission="free_blocks",
    append_worst_case="new_blocks",
    cached_tokens="hits_at_allocate",
    lookahead=False,
    encoder=False,
    atomic=False,
    unsupported=frozenset(
        {
            "fork",
            "can_swap_out",
            "can_swap_in",
            "swap_out",
            "swap_in",
            "get_common_computed_block_ids",
            "get_prefix_cache_hit_rate",
            "reset_prefix_cache",
        }
    ),
)

PROFILES["nano-vllm-upstream"] = replace(
    PROFILES["nano-vllm"], keep_freed_cache=True, eviction="free_list"
)

PROFILES["sglang"] = Policy(
    request_hit_cap="n_minus_1",
    request_eviction="leaf_lru",
    request_cache_timing="at_checkpoint",
    request_duplicates="free_at_insert",
)
"""SGLang 0.5.23's radix cache at the request level (``specs/radix_cache.md``): its hit cap is
``input_len - 1`` (``Req._compute_max_prefix_len``), its eviction leaf-only LRU, and it inserts
computed tokens after each prefill chunk and at finish (``request_cache_timing``), freeing a
request's duplicates of pages the tree holds already (``request_duplicates``). Its page size
(1 by default) is the configuration's block size, not a policy."""

PROFILE_LEVELS: dict[str, tuple[str, ...]] = {
    "pagedkv": ("manager", "pool", "request", "defrag"),
    "vllm-v1": ("pool", "request"),
    "sglang": ("request",),
}
"""Which levels each profile's engine is checked at (every other profile: the manager and the
pool). vLLM v1's ``BlockPool`` has no block manager of the protocol's kind (its pool keeps a null
block a manager knows nothing of); its ``KVCacheManager`` is the request level
(``specs/request_level.md``), whose semantics are pagedkv's own there."""

SAFETY = "safety"
"""The profile that compares no policy: only the safety tier (``specs/safety.md``). Written
``safety:NAME``, the machine draws only what profile NAME's engine offers (its operations, its
copy-on-write, groups, lookahead, encoder), and still compares nothing."""

PROFILE_NAMES: tuple[str, ...] = (*PROFILES, SAFETY, *(f"{SAFETY}:{name}" for name in PROFILES))


@dataclass(frozen=True, slots=True)
class Profile:
    """What a check holds a target to: the reference under ``policy``, or (``safety``) only
    what every correct allocator guarantees. A safety profile's policy says nothing but which
    operations the target lacks."""

    name: str
    policy: Policy = PAGEDKV
    safety: bool = False
    levels: tuple[str, ...] = ("manager", "pool")

    def check_level(self, level: str) -> None:
        """ValueError with one line if the profile does not serve ``level``."""
        if level not in self.levels:
            raise ValueError(
                f"profile {self.name} is for the {' and '.join(self.levels)} level only,"
                f" not {level}"
            )

    def describe(self) -> str:
        """The profile's name, followed by the ``--policy`` overrides it was given, once each."""
        return self.name


def profile(name: str, overrides: dict[str, str] | None = None) -> Profile:
    """The named profile (``safety:NAME`` included) with ``--policy`` overrides applied;
    ValueError with one line."""
    tier, _, of = name.partition(":")
    safety = tier == SAFETY
    policy_name = of if safety and of else ("pagedkv" if safety else name)
    if name not in PROFILE_NAMES or policy_name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILE_NAMES)})")
    policy = PROFILES[policy_name]
    levels = tuple(PROFILE_LEVELS.get(policy_name, ("manager", "pool")))
    label = name
    if overrides:
        policy = policy.overridden(overrides)
        label = name + " " + " ".join(f"{k}={v}" for k, v in overrides.items())
    return Profile(label, policy, safety, levels)


POLICY_TESTS = "model_tests/tests/test_policy.py"
"""Where each option's test lives: ``test_<option>``, one per option."""


def _shown(value: object) -> str:
    if isinstance(value, frozenset):
        return ", ".join(f"`{name}`" for name in sorted(value)) or "none"
    return f"`{value_text(value)}`"


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def markdown_table() -> str:
    """The options as ``specs/policy.md``'s table: what each changes, each profile's value, where
    the reference implements it and the test that holds it there."""
    profiles = [
        f"`{name}`" + (" (default)" if PROFILES[name] == PAGEDKV else "") for name in PROFILES
    ]
    header = ["option", "what it changes", *profiles, "rule", "test"]
    rows = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for option in OPTIONS.values():
        cells = [
            f"`{option.name}`",
            _capitalized(option.what),
            *(_shown(getattr(policy, option.name)) for policy in PROFILES.values()),
            "<br>".join(f"`{citation}`" for citation in option.rule),
            f"`test_{option.name}`",
        ]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def markdown_values() -> str:
    """Each option's values, what each means and the profiles that choose it, as
    ``specs/policy.md`` shows them below the table."""
    sections = []
    for option in OPTIONS.values():
        lines = [f"### `{option.name}`", "", _capitalized(option.what) + "."]
        if option.values:
            lines.append("")
        else:  # a set of names: the meaning is one, the value per profile
            lines[-1] += f" {_capitalized(option.meaning[''])}."
            lines += [
                "",
                *(f"- `{n}`: {_shown(getattr(p, option.name))}." for n, p in PROFILES.items()),
            ]
        for value in option.values:
            chosen = [
                n for n, p in PROFILES.items() if value_text(getattr(p, option.name)) == value
            ]
            profiles = ", ".join(f"`{name}`" for name in chosen) or "none"
            lines.append(f"- `{value}` — {option.meaning[value]}. Profiles: {profiles}.")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def policy_json(policy: Policy) -> dict[str, object]:
    """The options that differ from pagedkv's, as JSON (``unsupported`` as a sorted list)."""
    out: dict[str, object] = {}
    for name, (value, _) in policy.differences(PAGEDKV).items():
        out[name] = sorted(value) if isinstance(value, frozenset) else value
    return out


def policy_from_json(value: object) -> Policy:
    """The inverse of ``policy_json``; ValueError naming what is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"a policy is an object of options, got {value!r}")
    text: dict[str, str] = {}
    for name, option_value in value.items():
        if isinstance(option_value, list) and all(isinstance(v, str) for v in option_value):
            text[name] = ",".join(option_value)
        elif isinstance(option_value, bool):
            text[name] = "true" if option_value else "false"
        elif isinstance(option_value, str):
            text[name] = option_value
        else:
            raise ValueError(f"policy option {name}: {option_value!r} is not a value")
    return PAGEDKV.overridden(text)
