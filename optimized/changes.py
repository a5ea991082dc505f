"""What the manager changed since a reader last looked: the sequences and groups its calls
touched, so that a reader keeping its compact state between calls (``pagedkv soak``:
``model_tests/oracle/incremental_compact.py``) rebuilds only their rows.

Nothing is recorded until a reader asks (``OptimizedBlockSpaceManager.record_changes``): a
manager serving requests would otherwise keep every sequence id it ever saw. Recording is
then one set insertion per changing call, made at the public boundary once the call's checks
passed (a failed call changes nothing, and records nothing). The record is a hint, never the
last word: the reader that trusts it builds its compact state fresh at every checkpoint and
holds the kept one equal to it (``specs/oracle.md`` §6).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Changes:
    """Since the reader last emptied it: ``seqs``, the sequences whose row (group, tokens,
    blocks) or pending access may have changed, made or freed ones included; ``groups``, the
    groups whose fields may have changed, made or freed ones included (a group's change may
    change both pools: a swap); ``gpu`` and ``cpu``, counts of changes to each pool that no
    sequence shows (marks, resets). ``detached``: a later reader took the recording over, so
    this one is told nothing more."""

    seqs: set[int] = field(default_factory=set)
    groups: set[int] = field(default_factory=set)
    gpu: int = 0
    cpu: int = 0
    detached: bool = False
