"""A check collects cycles less often while it searches, and leaves the collector as it was."""

from __future__ import annotations

import gc

import pytest

from pagedkv.model_tests.oracle.collector import YOUNG_THRESHOLD, fewer_collections


def test_the_collector_is_as_it_was_after_the_block_even_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() > 0
        raise RuntimeError("a check that fails")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
