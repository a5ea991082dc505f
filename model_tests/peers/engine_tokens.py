"""The token ids an engine that hashes tokens only is given, shared by the manager-level adapters
(switch ``hash_extra_key``, ``specs/peers.md``): with the switch on, each extra key gets its own
token ids inside the engine, so that requests with different extra keys never share a block."""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.specs.types import NO_EXTRA_KEY, ExtraKey, Token

KEYS_PER_TOKEN = 64
"""Extra keys told apart (beyond that two keys share ids, which a check's few keys never reach)."""


class EngineTokens:
    """Turns the protocol's tokens under an extra key into the engine's token ids."""

    def __init__(self, distinct_per_key: bool) -> None:
        self.distinct_per_key = distinct_per_key
        self._keys: dict[ExtraKey, int] = {NO_EXTRA_KEY: 0}

    def __call__(self, tokens: Sequence[Token], key: ExtraKey) -> list[Token]:
        """The protocol's tokens, or (``distinct_per_key``) the protocol's made distinct per key."""
        if not self.distinct_per_key:
            return list(tokens)
        index = self._keys.setdefault(key, len(self._keys))
        return [token * KEYS_PER_TOKEN + index for token in tokens]
