"""The rule a divergence broke, named for a reader: which comparison of the isomorphic session
(``specs/oracle.md`` §1) failed, and what the spec promises there.

The sessions (``model_tests/lockstep/``) raise ``Divergence`` with a sentence; this module reads
which of their checks it came from by the sentence's shape (each check words its message its own
way, and ``test_teaching`` holds each shape to a real divergence). A message of no known shape
still gets the general rule, and the message itself is always shown beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pagedkv.reference.allocation import EVICTION_ORDER


@dataclass(frozen=True)
class Rule:
    name: str
    cite: str
    says: str


GENERAL = Rule(
    "agree with the reference",
    "oracle §1",
    "The target must do what the reference does, call by call, up to the choices the spec leaves"
    " open.",
)
ERRORS = Rule(
    "same errors",
    "oracle §1.2; semantics 14",
    "Both raise the same typed error from specs/errors.py, or neither does.",
)
ATOMIC = Rule(
    "a failed call changes nothing",
    "oracle §1.2; invariant I6",
    "After an operation raises, the target must look exactly as before it.",
)
TABLES = Rule(
    "tables match",
    "oracle §1.3; invariants I1, I4",
    "Every live sequence's block table matches the reference's position by position, through the"
    " one-to-one map of block ids.",
)
CHOICES = Rule(
    "allowed choices only",
    "oracle §1.4; pool §4",
    "A new block comes from the free list first; only when it is empty is a cached block evicted:"
    f" {EVICTION_ORDER}.",
)
RESULTS = Rule(
    "same results",
    "oracle §1.5",
    "Results must equal the reference's, block ids translated into the target's.",
)
PROMISES = Rule(
    "can_* answers are promises",
    "oracle §1.5; manager §5.2; invariant I7",
    "AllocStatus and can_append_slots answers follow the watermark rule and must equal the"
    " reference's: OK promises the action succeeds, NEVER is final.",
)
SWAP_PAIRS = Rule(
    "swap mappings list exactly the copies",
    "oracle §1.5; manager §6",
    "swap_out / swap_in return every (source, destination) copy the swap kernel must run for each"
    " sequence's data to be intact: none for a cache hit on the destination or an empty block.",
)
COW_PAIRS = Rule(
    "copy-on-write pairs",
    "oracle §1.5; semantics 7",
    "Appending to a shared block takes a new block and reports the (source, destination) copy the"
    " kernel must run before the model writes.",
)
COMPUTED = Rule(
    "computed marks belong to the data",
    "oracle §1.5; semantics 8",
    "Only mark_blocks_as_computed sets the mark; the common computed prefix and the cached-token"
    " count read it.",
)
FREE_COUNTS = Rule(
    "free counts",
    "oracle §1.6; invariants I1, I2",
    "The free count equals the reference's free + cached-evictable blocks: a block leaked or"
    " counted twice shows here.",
)
CREATE = Rule(
    "configurations",
    "oracle §2; manager §2",
    "The target accepts exactly the configurations the reference accepts, and refuses the others"
    " with ConfigurationError.",
)
STALE = Rule(
    "a stale trace",
    "oracle §4",
    "The trace's recorded outcome is not what this pagedkv's reference gives: it was recorded by a"
    " pagedkv that behaves differently.",
)

RESULT_RULES: dict[str, Rule] = {
    "can_allocate": PROMISES,
    "can_append_slots": PROMISES,
    "can_swap_in": PROMISES,
    "can_swap_out": PROMISES,
    "swap_in": SWAP_PAIRS,
    "swap_out": SWAP_PAIRS,
    "append_slots": COW_PAIRS,
    "cow_if_not_appendable": COW_PAIRS,
    "clear_copy_on_writes": COW_PAIRS,
    "get_common_computed_block_ids": COMPUTED,
    "get_num_cached_tokens": COMPUTED,
    "common_computed_prefix": COMPUTED,
}

_SHAPES: tuple[tuple[re.Pattern[str], Rule | None], ...] = (
    (re.compile(r"raised .* but changed the"), ATOMIC),
    (re.compile(r"the spec does not allow taking|the target's choice is not allowed"), CHOICES),
    (
        re.compile(
            r": the model returned|has no counterpart in the target|the target answered its"
        ),
        None,  # by operation
    ),
    (re.compile(r"free (gpu |cpu )?blocks?, the reference \d+:"), FREE_COUNTS),
    (re.compile(r"^\w+.*: (model raised|model returned .*, target raised|both raised)"), ERRORS),
    (
        re.compile(
            r"table has \d+ blocks|cannot give sequence|cross-attention tables differ"
            r"|: the target (put|kept) its block \d+ there|already stands for the"
        ),
        TABLES,
    ),
    (re.compile(r"the reference (accepts|refuses) the configuration"), CREATE),
)


# --- the safety tier (specs/safety.md): the target alone, no reference --------------------------

S1 = Rule(
    "no aliasing",
    "safety S1",
    "A block held by several tables holds the same data for each: the same position, extra key,"
    " prefix and tokens. A shared block is copied before it is written.",
)
S2 = Rule(
    "accounting",
    "safety S2",
    "On each device the free count is the total minus the distinct blocks the tables hold (and"
    " the null block): a block is never leaked nor counted free while held.",
)
S3 = Rule(
    "placement",
    "safety S3",
    "Every table has a slot for every token, in blocks of its group's device.",
)
S4 = Rule(
    "copy and swap pairs",
    "safety S4",
    "Copy-on-write pairs land in the sequence's own new blocks; swap pairs run from the group's"
    " old blocks to its new ones; no block receives two sources.",
)
S5 = Rule(
    "KV data",
    "safety S5",
    "Running the target's pairs and writing each scheduled token, every readable slot holds its"
    " prefix's KV.",
)
S6 = Rule(
    "typed errors, atomic failures",
    "safety S6",
    "A refused call raises a typed error from specs/errors.py; a target that declares itself"
    " atomic shows no trace of it.",
)
S7 = Rule(
    "can_* answers are promises",
    "safety S7; invariant I7",
    "OK promises the action succeeds (with its lookahead slots); NEVER is final, even for an"
    " empty manager.",
)

SAFETY = Rule(
    "the safety tier",
    "safety",
    "What every correct allocator guarantees, whatever its policy: no aliasing, exact accounting,"
    " placement, sound copy and swap pairs, intact KV, typed errors, kept promises.",
)

_SAFETY_SHAPES: tuple[tuple[re.Pattern[str], Rule], ...] = (
    (re.compile(r"said (OK|NEVER|yes)|NEVER swap|broken promise|NEVER is final"), S7),
    (re.compile(r"untyped|declares itself atomic|which declares"), S6),
    (re.compile(r"is shared by|held twice|in place while|nobody holds|still hold"), S1),
    (re.compile(r"free (gpu |cpu )?blocks, but|a block is leaked|counted free"), S2),
    (re.compile(r"tokens but a table|which is not a \w+ block|cross table|too short"), S3),
    (re.compile(r"copied into twice|copies into|two sources|do not run from|pairs"), S4),
    (re.compile(r"\bKV\b"), S5),
)


def rule_of(message: str, op: str = "", safety: bool = False) -> Rule:
    """The rule a divergence message of the sessions reports, for a call of ``op`` (under the
    safety tier, ``safety``: the rule of ``specs/safety.md`` it broke)."""
    if safety:
        return next((rule for pattern, rule in _SAFETY_SHAPES if pattern.search(message)), SAFETY)
    for pattern, rule in _SHAPES:
        if pattern.search(message):
            return RESULT_RULES.get(op, RESULTS) if rule is None else rule
    return GENERAL
