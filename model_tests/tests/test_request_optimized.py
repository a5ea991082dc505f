"""The optimized request-level manager (``optimized/request_manager.py``) and its parts.

- The free queue against a plain list: every operation, in any order, leaves the same order.
- The cache map against a list of (key, block) pairs: the earliest still cached is found.
- The kept block hashes against ``specs.request_hashes.request_block_hashes``: growing,
  changed and multimodal requests.
- The manager against the reference, call for call, under random call sequences (exact mode:
  every answer, every error type, and ``view().comparable()`` after every call).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.optimized.block_hash_map import BlockHashMap
from pagedkv.optimized.free_queue import FreeQueue
from pagedkv.optimized.incremental_hashes import IncrementalBlockHashes
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import MultimodalInput, Request
from pagedkv.specs.types import ExtraKey

CAPACITY = 8

_queue_operations = st.lists(
    st.one_of(
        st.tuples(st.just("popleft"), st.just(0)),
        st.tuples(st.just("popleft_n"), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, CAPACITY - 1)),
        st.tuples(st.just("append"), st.integers(0, CAPACITY - 1)),
        st.tuples(st.just("append_n"), st.lists(st.integers(0, CAPACITY - 1), max_size=3)),
        st.tuples(st.just("prepend_n"), st.lists(st.integers(0, CAPACITY - 1), max_size=3)),
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(
    initial=st.permutations(range(CAPACITY)), size=st.integers(0, CAPACITY), steps=_queue_operations
)
def test_the_free_queue_keeps_a_plain_lists_order(
    initial: list[int], size: int, steps: list[tuple[str, object]]
) -> None:
    model = list(initial[:size])
    queue = FreeQueue(CAPACITY, model)
    for name, argument in steps:
        if name == "popleft" and model:
            assert queue.popleft() == model.pop(0)
        elif name == "popleft_n" and isinstance(argument, int) and argument <= len(model):
            assert queue.popleft_n(argument) == model[:argument]
            del model[:argument]
        elif name == "remove" and argument in model:
            assert isinstance(argument, int)
            queue.remove(argument)
            model.remove(argument)
        elif name == "append" and isinstance(argument, int) and argument not in model:
            queue.append(argument)
            model.append(argument)
        elif name in ("append_n", "prepend_n") and isinstance(argument, list):
            run = [block for block in dict.fromkeys(argument) if block not in model]
            if name == "append_n":
                queue.append_n(run)
                model.extend(run)
            else:
                queue.prepend_n(run)
                model[:0] = run
        assert list(queue) == model
        assert len(queue) == len(model)
        assert [block for block in range(CAPACITY) if block in queue] == sorted(model)


@settings(max_examples=200)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.sampled_from([b"a", b"b"]), st.integers(1, 5)), max_size=30
    )
)
def test_the_cache_map_answers_the_earliest_block_still_cached(
    steps: list[tuple[bool, bytes, int]],
) -> None:
    model: list[tuple[bytes, int]] = []
    cache = BlockHashMap()
    for insert, key, block in steps:
        if insert and (key, block) not in model:
            cache.insert(key, block)
            model.append((key, block))
        elif not insert and (key, block) in model:
            cache.remove(key, block)
            model.remove((key, block))
        for probe in (b"a", b"b"):
            held = [b for k, b in model if k == probe]
            assert cache.first(probe) == (held[0] if held else None)
            assert all(cache.holds(probe, b) == (b in held) for b in range(1, 6))
        assert len(cache) == len({k for k, _ in model})
    cache.clear()
    assert len(cache) == 0 and cache.first(b"a") is None


_IMAGE = (MultimodalInput(3, 4, "img"),)


@settings(max_examples=200)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    rewrite_at=st.none() | st.integers(0, 19),
    salts=st.lists(st.sampled_from([None, "s"]), min_size=6, max_size=6),
    images=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_kept_hashes_equal_hashing_the_whole_request(
    lengths: list[int], rewrite_at: int | None, salts: list[str | None], images: list[bool]
) -> None:
    tokens: tuple[int, ...] = ()
    kept: IncrementalBlockHashes | None = None
    for step, length in enumerate(sorted(lengths)):
        tokens = tokens + tuple(range(len(tokens), length))
        if rewrite_at is not None and step == 2 and rewrite_at < len(tokens):
            tokens = tokens[:rewrite_at] + (999,) + tokens[rewrite_at + 1 :]
        request = Request(
            "r",
            tokens,
            len(tokens),
            extra_key=ExtraKey(cache_salt=salts[step]),
            multimodal=_IMAGE if images[step] and len(tokens) >= 7 else (),
        )
        if kept is None:
            kept = IncrementalBlockHashes(request, 4)
        else:
            unchanged = kept.unchanged(request)
            assert tokens[:unchanged] == request.tokens[:unchanged]
            kept.update(request, unchanged)
        assert kept.hashes == request_block_hashes(request, 4)
