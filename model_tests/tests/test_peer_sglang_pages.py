"""SGLang's ``RadixCache`` at page size 16 (the request machines draw block sizes 1 to 4, so
``make peers`` never reaches it): a worked scenario through ``SglangRadixManager`` with SGLang's
paged allocator, read against the spec's hit rule (``specs/radix_cache.md`` §2): whole pages
only, the hit capped at ``num_tokens - 1`` and then cut to pages.

Skipped when ``.peers/`` lacks SGLang's files, failed under ``CI=true`` (as ``test_peers.py``).
"""

from __future__ import annotations

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.sglang_radix import paged_factory
from pagedkv.model_tests.tests.test_peers import needs
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import BlockRemoved, BlockStored, Request, RequestConfig

PAGE = 16
PROMPT = tuple(range(40))


@needs(sources.SGLANG)
def test_pages_of_16_hit_whole_pages_under_the_cap() -> None:
    manager = paged_factory(RequestConfig(num_blocks=6, block_size=PAGE))
    first = Request("a", PROMPT, len(PROMPT))
    assert manager.allocate_slots(first, len(PROMPT)) == [[1, 2, 3]]
    manager.preempt("a")  # a retract (checkpoint=False): nothing inserted
    assert manager.take_events() == []

    again = Request("a2", PROMPT, len(PROMPT))
    manager.allocate_slots(again, len(PROMPT))
    done = Request("a2", (*PROMPT, 7), len(PROMPT), len(PROMPT))
    new = manager.allocate_slots(done, 1)
    assert new == [[]]  # the third page has room for token 40
    manager.free("a2")  # the prefill's checkpoint inserted the two full pages; the third goes
    (stored,) = manager.take_events()
    assert isinstance(stored, BlockStored)
    assert list(stored.block_hashes) == request_block_hashes(done, PAGE)[:2]
    assert stored.token_ids == PROMPT[: 2 * PAGE] and stored.block_size == PAGE
    held = manager.view().blocks
    assert [b for b, seen in held.items() if seen.cached] == [1, 2]  # a's pages, reused first
    assert manager.num_free_blocks() == 5

    # 40 tokens: the cap (39) leaves two whole pages; 32 tokens: the cap (31) leaves one.
    assert manager.get_computed_blocks(Request("b", PROMPT, 40)) == ([[1, 2]], 32)
    assert manager.get_computed_blocks(Request("c", PROMPT[:32], 32)) == ([[1]], 16)
    assert manager.get_computed_blocks(Request("d", PROMPT[:15], 15)) == ([[]], 0)

    # Pressure: a request of 5 pages evicts the cached leaf first, then its parent (c's lookup
    # split the two-page node at 16 tokens: match_prefix changes the tree's shape).
    other = Request("e", tuple(range(100, 180)), 80)
    assert manager.allocate_slots(other, 80) is not None
    removed = [event for event in manager.take_events() if isinstance(event, BlockRemoved)]
    assert [h for event in removed for h in event.block_hashes] == list(
        reversed(request_block_hashes(done, PAGE)[:2])
    )


@needs(sources.SGLANG)
def test_a_retract_inserts_nothing_and_a_finish_what_ran() -> None:
    """``preempt`` is SGLang's ``release_kv_cache(checkpoint=False)``, ``free`` its finish."""
    stored = {}
    for release in ("preempt", "free"):
        manager = paged_factory(RequestConfig(num_blocks=6, block_size=PAGE))
        assert manager.allocate_slots(Request("a", PROMPT, len(PROMPT)), len(PROMPT))
        if release == "free":
            manager.free("a")
        else:
            manager.preempt("a")
        stored[release] = [e for e in manager.take_events() if isinstance(e, BlockStored)]
    assert stored["preempt"] == []
    assert [len(e.block_hashes) for e in stored["free"]] == [2]
