"""What a report says (``specs/oracle.md`` §6): a sentence a person can act on for each kind of
divergence, prefixes abbreviated as in the step list, a target's own exception with where it
was raised. Each case pins one message a person once could not use (issue: "model block 3 would
correspond to target block 2, but they already correspond to 3 and 2"; a ``Prefix`` as 32 raw
bytes; a bare ``AssertionError()``)."""

from __future__ import annotations

import re
from typing import Any

from pagedkv.model_tests.corpus.pools import AssertsItNeverCopies, KeepsItsBlockWhenFilled
from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.lockstep.show import show_call, show_error, show_value
from pagedkv.model_tests.oracle import trace
from pagedkv.specs.content_hash import ROOT, Prefix
from pagedkv.specs.types import ExtraKey, ManagerConfig, PoolConfig

POOL = PoolConfig(num_blocks=2, block_size=1, enable_caching=True)
MANAGER = ManagerConfig(1, 4, 1, 0.0, enable_caching=True)


def replayed(level: Any, config: Any, calls: list[tuple[str, tuple[Any, ...]]], target: Any) -> str:
    verdict = trace.replay(trace.trace_of_calls(level, config, calls), target)
    assert verdict.status == "divergence" and verdict.step == len(calls), verdict.describe()
    return verdict.message


def test_a_block_answered_in_the_wrong_place_is_said_in_words() -> None:
    """Not the bijection's bookkeeping: which block the target answered, what it is, and what
    the answer must be, and why."""
    message = replayed(
        "pool",
        POOL,
        [
            ("allocate_immutable", (Prefix(), [0])),
            ("allocate_mutable", ()),
            ("append_tokens", (1, Prefix(), [0])),
        ],
        KeepsItsBlockWhenFilled,
    )
    assert "would correspond" not in message and "already correspond" not in message
    assert "the target answered its block 1, the block the caller passed" in message, message
    assert "the block already cached for this content (the model's 0, the target's 0)" in message
    assert "content already cached is not held twice" in message


def test_a_block_shared_across_extra_keys_names_the_places_and_why() -> None:
    message = replayed(
        "manager",
        MANAGER,
        [
            ("allocate", (1, [2], [3], ExtraKey())),
            ("allocate", (3, [4], [3], ExtraKey(lora_id=2))),
        ],
        broken.BrokenHashIgnoresExtraKey,
    )
    assert message.startswith("sequence 4 block 0: the target put its block 3 there"), message
    assert "already stands for the model's block 0 (at sequence 2 block 0)" in message
    assert "under different extra keys (ExtraKey(lora_id=2) and ExtraKey())" in message


def test_a_prefix_is_abbreviated_in_every_message() -> None:
    """As the step list writes it: the hash's first eight hex digits, never 32 raw bytes."""
    message = replayed(
        "pool",
        PoolConfig(num_blocks=3, block_size=2, enable_caching=True),
        [("allocate_mutable", ()), ("fork", ([0],)), ("append_tokens", (0, Prefix(), [5]))],
        AssertsItNeverCopies,
    )
    assert message.startswith(f"append_tokens(0, Prefix({ROOT.hex()[:8]}…, 0, ExtraKey()), [5])")
    assert "b'" not in message and "hash=" not in message, message
    assert show_value(Prefix()) == f"Prefix({ROOT.hex()[:8]}…, 0, ExtraKey())"
    assert show_call("lookup", (ROOT,)) == f"lookup({ROOT.hex()[:8]}…)"


def test_a_targets_own_exception_says_where_it_was_raised() -> None:
    """A bare ``AssertionError()`` names the target's innermost frame: file, line, function,
    and the line's source."""
    message = replayed(
        "pool",
        POOL,
        [("allocate_mutable", ()), ("fork", ([0],)), ("cow_if_not_appendable", (0,))],
        AssertsItNeverCopies,
    )
    # AssertionError() as written, or with its text where pytest rewrote the fixture's assert
    assert re.search(r"target raised AssertionError\((|'[^']*')\) at ", message), message
    assert "corpus/pools.py:" in message and " in _copy_if_shared (assert self._ref_counts" in (
        message
    )


def test_an_exception_raised_in_pagedkv_itself_shows_no_frame_of_the_harness() -> None:
    def inner() -> None:
        raise KeyError(7)

    try:
        inner()
    except KeyError as error:
        shown = show_error(error)
    assert shown.startswith("KeyError(7) at ") and " in inner (raise KeyError(7))" in shown


def test_free_counts_that_differ_say_which_side_holds_more() -> None:
    message = replayed(
        "manager",
        MANAGER,
        [("allocate", (1, [2], [3])), ("free", (2,))],
        broken.BrokenFreeLeaksLastBlock,
    )
    assert message == (
        "after free(2), the target has 3 free gpu blocks, the reference 4: the target holds 1"
        " block more than the reference: one the reference gave back (or never took) is still"
        " in use there (a leak, or an extra block taken)"
    )


def test_a_runaway_recursion_names_the_frame_that_recurses() -> None:
    """Not the frame where the stack happened to run out."""

    def deeper(depth: int) -> int:
        return deeper(depth + 1) + 1

    try:
        deeper(0)
    except RecursionError as error:
        shown = show_error(error)
    assert " in deeper, " in shown and " calls deep (return deeper(depth + 1) + 1)" in shown
