"""The optimized manager's shortcuts take the plain rule's answer at every position: the packed
check of a prompt's tokens (``optimized/tokens.py``) reads the top byte of each token, not of
some. Sampled inputs rarely put the one bad token where a wrong stride skips it (a gap found by
``make mutate``, ``specs/mutation.md``), so every position is tried here."""

from __future__ import annotations

import pytest

from pagedkv.optimized.tokens import plain_tokens
from pagedkv.specs.types import MAX_TOKEN


@pytest.mark.parametrize("bad", [MAX_TOKEN + 1, 2**64 - 1])
def test_one_token_past_the_bound_is_seen_at_every_position(bad: int) -> None:
    for length in range(1, 40):
        assert plain_tokens([MAX_TOKEN] * length)
        for position in range(length):
            tokens: list[object] = [MAX_TOKEN] * length
            tokens[position] = bad
            assert not plain_tokens(tokens), (length, position)
            assert not plain_tokens(tuple(tokens)), (length, position)
