"""The prompts a manager has already checked, so that asking about the same prompt again costs a
comparison in C instead of a second look at every token.

A scheduler asks ``can_allocate`` about the request at the head of its queue at every step until
it fits, and then allocates it: the same prompt, passed again and again, as a tuple or as a list.
A tuple cannot change, so the same object needs no second look. A list can: the caller may have
changed it since, and a changed prompt must be checked again. So each remembered list keeps a
copy of its tokens (the very same objects), and the list passes again only when

- it is equal to the copy (``==`` on two lists: a C loop that finds the unchanged elements by
  identity, about a nanosecond a token, so a changed value, a changed length or a removed token
  shows at once);
- the positions that held 0 or 1 still hold the very same objects: ``True`` and ``False`` are
  equal to 1 and 0 (and the small ints are one object each in CPython, so a plain 0 or 1 put
  back is the same object; if not, the list is only checked again).

What ``==`` cannot see is a token replaced by an equal number of another type that is not a
bool (``7.0`` or ``Decimal(7)`` for ``7``): a type check costs ten to twenty times the
comparison (``sum``, ``map(type, ...)``, ``marshal``: each looks at every object in C), which
would put a long prompt's ``can_allocate`` behind vLLM's. Such a list is read as the tokens it
equals (its checked copy is what the manager uses); ``specs/block_manager.md`` §5.1 says so.
Anything else is checked in full. The memo holds ``CAPACITY`` prompts, the oldest going first, and
keeps them alive: an id is never reused while its prompt is remembered.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.optimized.tokens import plain_tokens
from pagedkv.specs.types import Token
from pagedkv.specs.validation import check_tokens

CAPACITY = 64
"""Prompts remembered: a scheduler's waiting queue asks about a few at each step."""

Remembered = tuple[object, tuple[Token, ...] | list[Token], tuple[int, ...]]
"""(the caller's prompt, its tokens as checked, positions of 0 and 1 in a list)."""


class CheckedPrompts:
    """``check_tokens`` over prompts (never empty), remembered by identity."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[int, Remembered] = {}

    def tokens(self, prompt: object) -> Sequence[Token]:
        """The prompt's tokens, checked; raises ``InvalidArgumentError`` as ``check_tokens``.
        Do not change what it returns: it is the caller's tuple or the memo's copy."""
        found = self._known.get(id(prompt))
        if found is not None and found[0] is prompt:
            known = found[1]
            if type(prompt) is tuple or (
                prompt == known and _same_small_ints(prompt, known, found[2])  # type: ignore[arg-type]
            ):
                return known
        return self._first_sight(prompt)

    def _first_sight(self, prompt: object) -> Sequence[Token]:
        if type(prompt) is tuple and prompt and plain_tokens(prompt):
            self._remember(prompt, prompt, ())
            return prompt
        if type(prompt) is list and prompt and plain_tokens(prompt):
            copy: list[Token] = prompt.copy()
            small: tuple[int, ...] = ()
            if copy.count(0) or copy.count(1):
                small = tuple(i for i, token in enumerate(copy) if token < 2)
            self._remember(prompt, copy, small)
            return copy
        return tuple(check_tokens(prompt))  # refuses an empty prompt; an int subclass passes

    def _remember(
        self, prompt: object, tokens: tuple[Token, ...] | list[Token], small: tuple[int, ...]
    ) -> None:
        known = self._known
        if len(known) >= CAPACITY:
            del known[next(iter(known))]
        known[id(prompt)] = (prompt, tokens, small)


def _same_small_ints(prompt: list[object], known: list[Token], small: tuple[int, ...]) -> bool:
    return not small or all(prompt[index] is known[index] for index in small)
