"""The promises a target makes with its ``can_*`` answers, held across the calls that act on them
(invariant I7; ``specs/safety.md`` S7), so that a trace replays a broken promise as it happened.

A scheduler asks, then acts at once: an OK (a yes) is a promise about the calls that follow it
directly, and only those:

- ``can_allocate(prompt, lookahead, encoder)`` OK: the next ``allocate`` of that prompt (and
  encoder prompt) does not run out of blocks;
- ``can_append_slots(group, n, lookahead)`` yes: each of the group's sequences may then append up
  to ``n`` tokens with up to ``lookahead`` slots, once, without running out;
- ``can_swap_out(group)`` OK: the next ``swap_out(group)`` succeeds; NEVER: it cannot;
- ``can_swap_in(group, lookahead)`` OK: the next ``swap_in(group)`` succeeds, and then each of
  the group's sequences has room for ``lookahead`` slots (``append_slots(seq, [], lookahead)``).

Any other call in between ends the promise: the state it was made in is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pagedkv.model_tests.lockstep.show import show_call, show_value
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.types import AllocStatus


@dataclass(frozen=True)
class Promise:
    said: str
    """The answer, as the call and what it said."""
    action: str
    """The call it is about."""
    group: int | None = None
    prompt: tuple[Any, ...] | None = None
    encoder: tuple[Any, ...] | None = None
    tokens: int = 0
    lookahead: int = 0
    members: frozenset[int] = frozenset()
    """For an append: the sequences that may still append under it."""
    never: bool = False
    """A NEVER: the action cannot succeed."""


def _tuple(value: Any) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def made(
    method: str, args: tuple[Any, ...], result: Any, members: Callable[[int], list[int]]
) -> Promise | None:
    """The promise an answer makes, if any."""
    said = f"{show_call(method, args)} said {show_value(result)}"
    if method == "can_allocate" and result is AllocStatus.OK:
        prompt, encoder = args[0], args[2] if len(args) > 2 else None
        return Promise(said, "allocate", prompt=_tuple(prompt), encoder=_tuple(encoder))
    if method == "can_append_slots" and result is True:
        group, tokens = args[0], args[1] if len(args) > 1 else 1
        lookahead = args[2] if len(args) > 2 else 0
        return Promise(
            said,
            "append_slots",
            group,
            tokens=tokens,
            lookahead=lookahead,
            members=frozenset(members(group)),
        )
    if method == "can_swap_out" and result in (AllocStatus.OK, AllocStatus.NEVER):
        return Promise(said, "swap_out", args[0], never=result is AllocStatus.NEVER)
    if method == "can_swap_in" and result is AllocStatus.OK:
        lookahead = args[1] if len(args) > 1 else 0
        return Promise(said, "swap_in", args[0], lookahead=lookahead)
    return None


def _covers(promise: Promise, method: str, args: tuple[Any, ...]) -> bool:
    if method != promise.action:
        return False
    if method == "allocate":
        encoder = args[4] if len(args) > 4 else None
        return _tuple(args[2]) == promise.prompt and _tuple(encoder) == promise.encoder
    if method == "append_slots":
        lookahead = args[2] if len(args) > 2 else 0
        return (
            args[0] in promise.members
            and len(args[1]) <= promise.tokens
            and lookahead <= promise.lookahead
        )
    return bool(args[0] == promise.group)


@dataclass
class Promises:
    """The promise open now, checked against each call's outcome."""

    open: Promise | None = None

    def after(
        self,
        method: str,
        args: tuple[Any, ...],
        outcome: Any,
        members: Callable[[int], list[int]],
    ) -> str | None:
        """Note a call and its outcome (a result or a typed error); a problem if it breaks the
        open promise."""
        promise, self.open = self.open, None
        if promise is not None and _covers(promise, method, args):
            failed = isinstance(outcome, PagedKVError)
            if promise.never and not failed:
                return f"{promise.said}, then {show_call(method, args)} succeeded: a NEVER is final"
            if not promise.never and isinstance(outcome, OutOfBlocksError):
                return (
                    f"{promise.said}, then {show_call(method, args)} raised {outcome!r}:"
                    " a broken promise"
                )
            if not failed:
                self.open = _follow(promise, method, args, members)
            return None
        if not isinstance(outcome, PagedKVError):
            self.open = made(method, args, outcome, members)
        return None


def _follow(
    promise: Promise, method: str, args: tuple[Any, ...], members: Callable[[int], list[int]]
) -> Promise | None:
    """What is still promised after a promised call succeeded."""
    if method == "append_slots":
        left = promise.members - {args[0]}
        return replace(promise, members=left) if left else None
    if method == "swap_in" and promise.lookahead:
        group = promise.group
        assert group is not None
        return Promise(
            f"{promise.said} (room for {promise.lookahead} lookahead slots)",
            "append_slots",
            group,
            lookahead=promise.lookahead,
            members=frozenset(members(group)),
        )
    return None
