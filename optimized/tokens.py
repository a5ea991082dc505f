"""A prompt's tokens checked in C loops: a scheduler admits prompts of thousands of tokens, and
asks ``can_allocate`` about each before it allocates it.

``specs.validation.check_tokens`` looks at one token at a time in Python. For a list or tuple of
plain ints the same verdict comes from three passes that run in C: the elements' types are
counted (every one must be ``int`` itself, so a ``bool`` or any other subclass fails), then the
tokens are packed as signed and as unsigned 64-bit integers, which ``struct`` refuses for a value
outside ``[-2**63, 2**63)`` or ``[0, 2**64)``: both succeed exactly for ``[0, MAX_TOKEN]``. When
this says no, the caller runs ``check_tokens``, which accepts what is fine after all (an int
subclass) or raises its error for the first bad token.
"""

from __future__ import annotations

import struct
from operator import countOf

from specs.types import MAX_TOKEN

assert MAX_TOKEN == 2**63 - 1, "the signed 64-bit pack is the upper bound"


def plain_tokens(tokens: list[object] | tuple[object, ...]) -> bool:
    """Whether every element is an ``int`` (not a subclass) in ``[0, MAX_TOKEN]``."""
    count = len(tokens)
    if countOf(map(type, tokens), int) != count:
        return False
    try:
        struct.pack(f"<{count}q", *tokens)
        struct.pack(f"<{count}Q", *tokens)
    except struct.error:
        return False
    return True
