"""Fewer passes of Python's cycle collector while a check searches.

A check allocates millions of short-lived objects (frozen states, views, Hypothesis's choice
nodes) and frees nearly all of them by reference counting; yet the collector, triggered every
700 net allocations by default, ran 2,860 times over the youngest objects and 24 times over the
whole heap (the imported modules, Hypothesis's growing tree of tried choices) in a default-budget
check of the reference (seed 0), 6-8 % of its CPU time (``specs/oracle.md`` §6).
Inside ``fewer_collections`` the objects that exist already (modules, classes, the target's
code) are set aside (``gc.freeze``) and the youngest generation is collected every
``YOUNG_THRESHOLD`` allocations; what is collected is the same garbage, later. Both are undone
on the way out, so that a check run inside a user's own process (the pytest plugin) leaves its
collector as it found it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000
"""Allocations (net of frees) between two collections of the youngest generation (700 by
default); the older generations keep their own counts, scaled to match."""
OLDER_THRESHOLDS = (50, 1_000)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect cycles less often inside the block; the collector's settings are back after."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
