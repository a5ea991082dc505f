"""The prompts a manager has already checked, so that asking about the same prompt again costs one
pass in C instead of a type and range check of every token in Python.

A scheduler asks ``can_allocate`` about the request at the head of its queue at every step until
it fits, and then allocates it: the same prompt, passed again and again, as a tuple or as a list.
A tuple cannot change, so the same object needs no second look. A list can: the caller may have
changed it since, and a changed prompt must be checked again. So each remembered list keeps a
copy of its tokens (the very same objects, in a tuple), and the list passes again only when it
has the same length and holds the same object at every position (``same_objects``: one memory
comparison of the two pointer arrays, so a long prompt asked about again costs about what a
short one does). Equality would not
do: ``7.0``, ``True`` and ``Decimal(7)`` equal ``7`` but are refused by ``check_tokens``, and an
exact int put back (a new object) is merely checked again. The memo holds ``CAPACITY`` prompts,
the oldest going first, and keeps them alive: an id is never reused while its prompt is
remembered (``specs/block_manager.md`` §5.1).
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.optimized.same_objects import same_objects
from pagedkv.optimized.tokens import plain_tokens
from pagedkv.specs.types import Token
from pagedkv.specs.validation import check_tokens

CAPACITY = 64
"""Prompts remembered: a scheduler's waiting queue asks about a few at each step."""

Remembered = tuple[object, tuple[Token, ...]]
"""(the caller's prompt, its tokens as checked)."""


class CheckedPrompts:
    """``check_tokens`` over prompts (never empty), remembered by identity."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[int, Remembered] = {}

    def tokens(self, prompt: object) -> Sequence[Token]:
        """The prompt's tokens, checked; raises ``InvalidArgumentError`` as ``check_tokens``.
        It is the caller's tuple or the memo's copy of the caller's list."""
        found = self._known.get(id(prompt))
        if found is not None and found[0] is prompt:
            known = found[1]
            if type(prompt) is tuple or same_objects(prompt, known):  # type: ignore[arg-type]
                return known
        return self._first_sight(prompt)

    def _first_sight(self, prompt: object) -> Sequence[Token]:
        if type(prompt) is tuple and prompt and plain_tokens(prompt):
            self._remember(prompt, prompt)
            return prompt
        if type(prompt) is list and prompt and plain_tokens(prompt):
            copy: tuple[Token, ...] = tuple(prompt)
            self._remember(prompt, copy)
            return copy
        return tuple(check_tokens(prompt))  # refuses an empty prompt; an int subclass passes

    def _remember(self, prompt: object, tokens: tuple[Token, ...]) -> None:
        known = self._known
        if len(known) >= CAPACITY:
            del known[next(iter(known))]
        known[id(prompt)] = (prompt, tokens)
