"""The scheduler-side checks of a new group, shared by the manager-level adapters: the group id
and the sequence ids must be ints not in use (``specs/block_manager.md`` §5.3 ``allocate``)."""

from __future__ import annotations

from collections.abc import Container

from pagedkv.specs.errors import DuplicateSequenceError
from pagedkv.specs.validation import check_id, check_seq_ids


def new_ids(
    groups: Container[int], seqs: Container[int], group_id: object, seq_ids: object
) -> tuple[int, list[int]]:
    gid = check_id("group", group_id)
    if gid in groups:
        raise DuplicateSequenceError(f"group {gid} already exists")
    ids = check_seq_ids(seq_ids, non_empty=True)
    for seq_id in ids:
        if seq_id in seqs or ids.count(seq_id) > 1:
            raise DuplicateSequenceError(f"sequence {seq_id} already exists")
    return gid, ids
