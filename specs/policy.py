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

NullBlockWhen = Literal["at_creation", "at_first_append"]
WindowRelease = Literal["token_exact", "computed_blocks"]
AppendWorstCase = Literal["touched_blocks", "token_chunks"]
SwapPairs = Literal["copies", "every_entry"]
CommonPrefix = Literal["every_run", "nonempty_runs"]
CowPairs = Literal["pending", "as_recorded"]
Promotion = Literal["dedup", "copy_then_dedup"]


@dataclass(frozen=True, slots=True)
class Policy:
    null_block: NullBlockWhen = "at_creation"
    window_release: WindowRelease = "token_exact"
    append_worst_case: AppendWorstCase = "touched_blocks"
    swap_pairs: SwapPairs = "copies"
    common_prefix: CommonPrefix = "every_run"
    cow_pairs: CowPairs = "pending"
    promotion: Promotion = "dedup"
    atomic: bool = True
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
        shown = []
        for name, (mine, _) in self.differences(PAGEDKV).items():
            value = ",".join(sorted(mine)) if isinstance(mine, frozenset) else str(mine).lower()
            shown.append(f"{name}={value}")
        return " ".join(shown) or "(pagedkv's own)"


@dataclass(frozen=True, slots=True)
class Option:
    """One policy option: its values, what each means, and which engines choose which."""

    name: str
    values: tuple[str, ...]
    what: str
    meaning: dict[str, str]

    def parse(self, text: str) -> object:
        if self.name == "unsupported":
            names = frozenset(t for t in text.split(",") if t)
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
            },
        ),
        Option(
            "swap_pairs",
            _values(SwapPairs),
            "which (source, destination) pairs a swap reports",
            {
                "copies": "pagedkv: each distinct block once, only real copies (no cache hit,"
                " no empty block)",
                "every_entry": "vLLM 0.6.3: every entry of every table, sequence by sequence",
            },
        ),
        Option(
            "common_prefix",
            _values(CommonPrefix),
            "how the common computed prefix treats a sequence with nothing computed",
            {
                "every_run": "pagedkv: an empty run makes the common prefix empty",
                "nonempty_runs": "vLLM 0.6.3: empty runs are dropped before the common prefix",
            },
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
        ),
        Option(
            "promotion",
            _values(Promotion),
            "an append that fills a block whose content is cached elsewhere",
            {
                "dedup": "pagedkv: switch straight to the cached block, no copy",
                "copy_then_dedup": "vLLM 0.6.3: copy-on-write first (a shared block), then"
                " switch to the cached block",
            },
        ),
        Option(
            "atomic",
            ("true", "false"),
            "whether a call that fails is refused before it changes anything",
            {
                "true": "pagedkv: every operation checks its worst case up front",
                "false": "vLLM 0.6.3: only the `can_*` promise protects a call; without it a"
                " call may fail midway, and the run ends there",
            },
        ),
        Option(
            "unsupported",
            (),
            "operations the engine does not offer (comma-separated)",
            {"": "the reference raises UnsupportedError for them"},
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
        atomic=False,
        unsupported=frozenset({"reset_prefix_cache"}),
    ),
}

SAFETY = "safety"
"""The profile that compares no policy: only the safety tier (``specs/safety.md``)."""

PROFILE_NAMES: tuple[str, ...] = (*PROFILES, SAFETY)


def profile(name: str) -> Policy:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILE_NAMES)})")
    return PROFILES[name]
