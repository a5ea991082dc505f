"""A read-only list of block ids: a result the manager may hand out more than once.

``get_common_computed_block_ids`` answers the same question at every scheduler step, and its
answer (a sequence's computed prefix) changes only when a block is newly computed. Copying the
prefix into a fresh list at every call costs O(blocks); handing out one list that nobody can
change costs nothing. The protocol's result kind is ``blocks`` (``specs/operations.py``): a list
of ids, compared with ``==`` by the lockstep sessions and written as a JSON array by the codec,
both of which a ``list`` subclass satisfies. What it refuses is a change: every method that would
change it raises ``TypeError``, as a tuple's would, so a caller can never alter the manager's
answer for the next caller. ``list(ids)`` (or ``ids.copy()``, a slice, ``+``) is a plain list.
"""

from __future__ import annotations

from typing import Any, NoReturn, SupportsIndex

from pagedkv.specs.types import BlockId


class BlockIds(list[BlockId]):
    """Block ids that cannot be changed once made."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "these block ids are the manager's answer to every caller and cannot be changed:"
            " copy them first (list(ids))"
        )

    append = extend = insert = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        self._refuse()

    @classmethod
    def prefix(cls, blocks: list[BlockId], length: int) -> BlockIds:
        """``blocks[:length]``, read-only. The ids are copied once (a slice, then the new list,
        would copy them twice): what is past ``length`` is dropped from the copy."""
        if length < len(blocks) // 2:
            return cls(blocks[:length])
        ids = cls(blocks)
        list.__delitem__(ids, slice(length, None))
        return ids

    def __reduce__(self) -> tuple[type[BlockIds], tuple[list[BlockId]]]:
        """Copies and pickles are made from the ids, not by appending them one by one."""
        return (BlockIds, (list(self),))


NO_BLOCK_IDS = BlockIds()
"""The empty answer, shared."""
