"""The block kernels against a plain clone-and-copy reference, block by block, bit for bit.

Each reference clones the tensors, walks the pairs in Python and copies one block at a time from
the untouched clone, which is the meaning every kernel promises (all reads before all writes).
Comparisons are of the raw bits (``torch.equal`` on an integer view), so a kernel that moved the
right values through a lossy path, or touched a block it was not given, fails.
"""

from __future__ import annotations

import enum
import gc
import mmap
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from pagedkv.optimized import host_bytes, kernels
from pagedkv.optimized.kernels import (
    DEFAULT_PAD_SIZES,
    MAX_RUNS,
    Run,
    _row_view,
    coalesce_runs,
    copy_blocks,
    moves_host_bytes,
    normalize_pairs,
    padded_batches,
    swap_blocks,
    swap_blocks_in_place,
)
from pagedkv.optimized.kv_store import KVStore
from pagedkv.specs.errors import ConfigurationError, ForeignBlockError, InvalidArgumentError

Pairs = list[tuple[int, int]]
ACCELERATOR = torch.accelerator.current_accelerator(check_available=True)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BLOCK_SIZES = [1, 16, 128]
HEAD_SHAPES = [(1, 8), (2, 32)]  # (num_kv_heads, head_dim)
LAYERS = 3

# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture(params=["bytes", "torch"])
def host_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test on each way the host moves blocks: byte copies (torch on one thread) and
    torch's ``copy_`` and index kernels (two threads); ``kernels.moves_host_bytes`` picks."""
    before = torch.get_num_threads()
    torch.set_num_threads(1 if request.param == "bytes" else 2)
    assert moves_host_bytes(torch.device("cpu")) is (request.param == "bytes")
    yield request.param
    torch.set_num_threads(before)


ON_EITHER_PATH = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
"""``host_path`` holds for every example of a test: it only picks a thread count."""


def make_store(
    num_blocks: int,
    *,
    block_size: int = 4,
    heads: int = 2,
    head_dim: int = 8,
    dtype: torch.dtype = torch.float32,
    mla: bool = False,
    layers: int = LAYERS,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> KVStore:
    """A store whose every element is random, so any misplaced block shows."""
    store = KVStore(layers, num_blocks, block_size, heads, head_dim, dtype, device, mla)
    gen = torch.Generator().manual_seed(seed)
    for cache in store.tensors():
        cache.copy_(torch.randn(cache.shape, generator=gen).to(dtype))
    return store


def snapshot(store: KVStore) -> list[torch.Tensor]:
    return [cache.clone() for cache in store.tensors()]


def bits(t: torch.Tensor) -> torch.Tensor:
    word = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(word)


def assert_same(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a.shape == e.shape and a.dtype == e.dtype
        if not torch.equal(bits(a), bits(e)):
            diff = (bits(a) != bits(e)).reshape(a.shape[0], -1).any(dim=1)
            blocks = diff.nonzero().flatten().tolist()
            raise AssertionError(f"tensor {i}: blocks {blocks} differ from the reference")


def ref_copy(before: Sequence[torch.Tensor], pairs: Pairs) -> list[torch.Tensor]:
    after = [t.clone() for t in before]
    for src, dst in pairs:
        for out, old in zip(after, before, strict=True):
            out[dst].copy_(old[src])
    return after


def ref_swap(
    src_before: Sequence[torch.Tensor], dst_before: Sequence[torch.Tensor], pairs: Pairs
) -> list[torch.Tensor]:
    after = [t.clone() for t in dst_before]
    for src, dst in pairs:
        for out, old in zip(after, src_before, strict=True):
            out[dst].copy_(old[src])
    return after


def ref_exchange(before: Sequence[torch.Tensor], pairs: Pairs) -> list[torch.Tensor]:
    after = [t.clone() for t in before]
    for a, b in pairs:
        for out, old in zip(after, before, strict=True):
            out[a].copy_(old[b])
            out[b].copy_(old[a])
    return after


def as_form(pairs: Pairs, form: str) -> torch.Tensor | Pairs:
    if form == "tensor":
        return torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2)
    return list(pairs)


class CountOps(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    """Counts the aten ops a kernel issues (and the index lengths of the index ops)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts: dict[str, int] = {}
        self.index_lengths: list[int] = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = str(func.overloadpacket.__name__)
        self.counts[name] = self.counts.get(name, 0) + 1
        if name in ("index_select", "index_copy_"):  # (self, dim, index, ...)
            self.index_lengths.append(int(args[2].numel()))
        return func(*args, **(kwargs or {}))


# --- KVStore ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mla", [False, True])
def test_store_layout_and_accessors(mla: bool) -> None:
    store = KVStore(3, 10, 16, 4, 64, torch.float16, torch.device("cpu"), mla)
    assert store.num_blocks == 10 and store.block_size == 16 and store.num_layers == 3
    assert store.device == torch.device("cpu") and store.is_mla is mla
    assert store.dtype == torch.float16
    caches = store.caches
    assert len(caches) == 3
    slab_elements = store.block_bytes // 2  # a block of every layer: the blocks' stride
    for k, v in caches:
        assert k.shape == (10, 16, 4, 64) and k.dtype == torch.float16
        assert k[3].is_contiguous() and k.stride(0) == slab_elements
        assert not k.any()
        assert k.is_pinned() == torch.cuda.is_available()
        if mla:
            assert v is None
        else:
            assert v is not None and v.shape == k.shape and v.data_ptr() != k.data_ptr()
    per_tensor = 16 * 4 * 64 * 2
    assert store.block_bytes == per_tensor * 3 * (1 if mla else 2)
    assert len(store.tensors()) == 3 * (1 if mla else 2)


@pytest.mark.parametrize(
    ("kwargs", "bad"),
    [
        ({"num_layers": 0}, "0"),
        ({"num_blocks": -3}, "-3"),
        ({"block_size": True}, "True"),
        ({"num_kv_heads": 2.0}, "2.0"),
        ({"head_dim": "64"}, "'64'"),
        ({"dtype": torch.int32}, "torch.int32"),
        ({"dtype": torch.bool}, "torch.bool"),
        ({"dtype": "float16"}, "'float16'"),
        ({"device": "nonsense"}, "nonsense"),
        ({"device": 3.5}, "3.5"),
        ({"device": "cuda:99"}, "cuda:99"),  # no such device, with or without CUDA
        ({"mla": "yes"}, "'yes'"),
    ],
)
def test_store_rejects_bad_configuration(kwargs: dict[str, object], bad: str) -> None:
    args: dict[str, Any] = {
        "num_layers": 2,
        "num_blocks": 4,
        "block_size": 2,
        "num_kv_heads": 1,
        "head_dim": 4,
        "dtype": torch.float32,
        "device": "cpu",
        "mla": False,
    }
    args.update(kwargs)
    with pytest.raises(ConfigurationError, match=bad.replace(".", r"\.")):
        KVStore(**args)


def test_store_names_a_device_torch_cannot_parse() -> None:
    """A string torch does not parse as a device is named as such, not as a wrong type."""
    with pytest.raises(ConfigurationError, match="is not a torch device"):
        KVStore(1, 2, 2, 1, 4, torch.float32, "nonsense")


@pytest.mark.parametrize("mla", [False, True])
def test_store_layout_is_one_allocation_block_by_block(mla: bool) -> None:
    """``blocks`` holds every block of the layers' tensors in turn (K then V per layer), and
    nothing else: ``blocks[b]`` is block ``b`` of every tensor, one contiguous slab."""
    store = KVStore(3, 4, 2, 1, 4, torch.float32, "cpu", mla)
    per_layer = 1 if mla else 2
    assert store.blocks.shape == (4, 3 * per_layer, 2, 1, 4) and store.blocks.is_contiguous()
    for block in range(4):
        for layer, (k, v) in enumerate(store.caches):
            assert k[block].data_ptr() == store.blocks[block, per_layer * layer].data_ptr()
            if v is not None:
                assert v[block].data_ptr() == store.blocks[block, 2 * layer + 1].data_ptr()
        tensors = store.tensors()
        assert [t[block].data_ptr() for t in tensors] == [t.data_ptr() for t in store.blocks[block]]
    assert store.block_bytes == store.blocks[0].numel() * store.blocks.element_size()


@pytest.mark.parametrize("mla", [False, True])
def test_store_write_then_read_round_trip(mla: bool) -> None:
    """Token ``i`` of every layer lands in ``slots[i]`` (block 0 and offset 0 included), K and
    V apart; a read returns them, and every other slot stays zero."""
    store = KVStore(2, 4, 3, 2, 4, torch.float32, "cpu", mla)
    slots = [(0, 0), (3, 2), (2, 1)]
    shape = (len(slots), 2, 4)
    keys = [torch.full(shape, 1.0 + layer) + torch.arange(3.0).reshape(3, 1, 1) for layer in (0, 1)]
    values: list[torch.Tensor | None] = (
        [None, None] if mla else [-key for key in keys]  # V differs from K
    )
    store.write(slots, keys, values)
    read = store.read(slots)
    assert len(read) == 2
    for layer, (k, v) in enumerate(read):
        assert torch.equal(k, keys[layer])
        if mla:
            assert v is None
        else:
            expected = values[layer]
            assert v is not None and expected is not None and torch.equal(v, expected)
    written = sum(int(t.count_nonzero()) for t in store.tensors())
    assert written == len(store.tensors()) * 3 * 2 * 4  # only the three slots


BAD_SLOTS: list[tuple[object, type[Exception], str]] = [
    ("ab", InvalidArgumentError, "expected a sequence"),
    (5, InvalidArgumentError, "expected a sequence"),
    ([[1, 0]], InvalidArgumentError, "a slot is"),
    ([(1,)], InvalidArgumentError, "a slot is"),
    ([(1, 0, 0)], InvalidArgumentError, "a slot is"),
    ([(1, True)], InvalidArgumentError, "a slot is"),
    ([(1, 0.5)], InvalidArgumentError, "a slot is"),
    ([(4, 0)], ForeignBlockError, "block 4"),
    ([(-1, 0)], ForeignBlockError, "block -1"),
    ([(1, 3)], InvalidArgumentError, "slot 3"),
    ([(1, -1)], InvalidArgumentError, "slot -1"),
]


@pytest.mark.parametrize(("slots", "error", "message"), BAD_SLOTS)
def test_store_read_and_write_refuse_bad_slots(
    slots: object, error: type[Exception], message: str
) -> None:
    store = KVStore(1, 4, 3, 1, 2, torch.float32, "cpu")
    with pytest.raises(error, match=message):
        store.read(slots)  # type: ignore[arg-type]
    ones = [torch.ones((1, 1, 2))]
    with pytest.raises(error, match=message):
        store.write(slots, ones, ones)  # type: ignore[arg-type]
    assert not store.blocks.any()


@pytest.mark.parametrize("mla", [False, True])
def test_store_write_refuses_bad_keys_and_values(mla: bool) -> None:
    """Wrong layer counts, a K or V of the wrong shape, a V where MLA has none (or none where it
    needs one): refused before anything is written."""
    store = KVStore(2, 4, 3, 1, 2, torch.float32, "cpu", mla)
    slots = [(1, 0), (2, 2)]
    good = torch.ones((2, 1, 2))
    bad = torch.ones((2, 1, 3))
    v = None if mla else good
    cases: list[tuple[list[torch.Tensor], list[torch.Tensor | None], str]] = [
        ([good], [v, v], "expected K and V for 2 layers"),
        ([good, good], [v], "expected K and V for 2 layers"),
        ([good, bad], [v, v], "layer 1: K/V must be"),
        ([good, good], [v, good if mla else None], "layer 1: K/V must be"),
    ]
    if not mla:
        cases.append(([good, good], [good, bad], "layer 1: V must be"))
    for keys, values, message in cases:
        with pytest.raises(InvalidArgumentError, match=message):
            store.write(slots, keys, values)
        assert not store.blocks.any()
    store.write(slots, [good, good], [v, v])
    assert int(store.blocks.count_nonzero()) == len(store.tensors()) * 2 * 2


@pytest.mark.parametrize("block_ids", ["ab", 5])
def test_store_gather_refuses_what_is_not_a_sequence(block_ids: object) -> None:
    store = KVStore(1, 4, 3, 1, 2, torch.float32, "cpu")
    with pytest.raises(InvalidArgumentError, match="expected a sequence of block ids"):
        store.gather(block_ids)  # type: ignore[arg-type]


@pytest.mark.parametrize("mla", [False, True])
def test_store_gather_reads_blocks_in_table_order(mla: bool) -> None:
    store = KVStore(2, 6, 3, 2, 4, torch.float32, "cpu", mla)
    for layer, (k, v) in enumerate(store.caches):
        for block in range(6):
            k[block] = 100 * layer + block
            if v is not None:
                v[block] = -(100 * layer + block)
    table = [4, 1, 4, 0]
    gathered = store.gather(table)
    assert len(gathered) == 2
    for layer, (gk, gv) in enumerate(gathered):
        assert gk.shape == (len(table) * 3, 2, 4)
        expected = torch.tensor([100 * layer + b for b in table for _ in range(3)]).float()
        assert torch.equal(gk[:, 0, 0], expected)
        assert torch.equal(gk, gk[:, :1, :1].expand_as(gk))
        if mla:
            assert gv is None
        else:
            assert gv is not None and torch.equal(gv[:, 0, 0], -expected)
    empty_k, _ = store.gather([])[0]
    assert empty_k.shape == (0, 2, 4)
    with pytest.raises(ForeignBlockError, match="6"):
        store.gather([0, 6])
    with pytest.raises(ForeignBlockError, match="-1"):
        store.gather([-1])
    with pytest.raises(InvalidArgumentError, match="True"):
        store.gather([True])


# --- copy_blocks --------------------------------------------------------------------------------

COPY_PAIRS: Pairs = [
    (0, 1),  # chain 0 -> 1 -> 2 -> 3: every link copies the *old* value
    (1, 2),
    (2, 3),
    (4, 0),  # 0 is a source above and a destination here
    (8, 12),  # a run of three
    (9, 13),
    (10, 14),
    (6, 15),  # one source forked to two destinations
    (6, 7),
    (5, 5),  # onto itself
]


@pytest.mark.parametrize("mla", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "head_dim"), HEAD_SHAPES)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_copy_blocks_matches_reference(
    block_size: int, heads: int, head_dim: int, dtype: torch.dtype, mla: bool, host_path: str
) -> None:
    store = make_store(
        16, block_size=block_size, heads=heads, head_dim=head_dim, dtype=dtype, mla=mla
    )
    before = snapshot(store)
    copy_blocks(store, COPY_PAIRS)
    assert_same(store.tensors(), ref_copy(before, COPY_PAIRS))
    # the chain really read old values: block 3 now holds the original block 2
    assert torch.equal(bits(store.tensors()[0][3]), bits(before[0][2]))


@pytest.mark.parametrize("form", ["list", "tensor"])
@pytest.mark.parametrize(
    "pairs",
    [
        [],
        [(3, 3)],
        [(i, i + 1) for i in range(10)],  # one long overlapping run (a shift by one)
        [(i + 1, i) for i in range(10)],  # the shift the other way
        [(i, 19 - i) for i in range(20)],  # reversal: every block source and destination
        [(0, 10), (1, 11), (2, 12), (5, 13), (6, 14), (3, 15)],  # runs broken up
    ],
)
def test_copy_blocks_overlaps_runs_and_forms(pairs: Pairs, form: str, host_path: str) -> None:
    store = make_store(20, seed=1)
    before = snapshot(store)
    copy_blocks(store, as_form(pairs, form))
    assert_same(store.tensors(), ref_copy(before, pairs))


@st.composite
def run_pairs(draw: st.DrawFn, src_blocks: int, dst_blocks: int) -> Pairs:
    """Pairs built from a few runs, so coalescing, overlaps and chains all come up often."""
    pairs: Pairs = []
    used: set[int] = set()
    for _ in range(draw(st.integers(0, 6))):
        length = draw(st.integers(1, 5))
        src = draw(st.integers(0, src_blocks - 1))
        dst = draw(st.integers(0, dst_blocks - 1))
        for i in range(length):
            if src + i < src_blocks and dst + i < dst_blocks and dst + i not in used:
                pairs.append((src + i, dst + i))
                used.add(dst + i)
    return draw(st.permutations(pairs))


@given(
    data=st.data(),
    num_blocks=st.integers(1, 24),
    block_size=st.sampled_from([1, 3]),
    dtype=st.sampled_from(DTYPES),
    mla=st.booleans(),
    form=st.sampled_from(["list", "tensor"]),
)
@ON_EITHER_PATH
def test_copy_blocks_random(
    data: st.DataObject,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    mla: bool,
    form: str,
    host_path: str,
) -> None:
    pairs = data.draw(run_pairs(num_blocks, num_blocks))
    store = make_store(num_blocks, block_size=block_size, dtype=dtype, mla=mla, layers=2)
    before = snapshot(store)
    copy_blocks(store, as_form(pairs, form))
    assert_same(store.tensors(), ref_copy(before, pairs))


# --- swap_blocks --------------------------------------------------------------------------------

SWAP_PAIRS: Pairs = [
    (0, 23),  # the last block of the larger destination
    (15, 0),  # the last block of the smaller source
    (3, 4),  # a run of three
    (4, 5),
    (5, 6),
    (7, 10),  # one source into two destinations
    (7, 11),
]


@pytest.mark.parametrize("mla", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "head_dim"), HEAD_SHAPES)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_swap_blocks_matches_reference(
    block_size: int, heads: int, head_dim: int, dtype: torch.dtype, mla: bool, host_path: str
) -> None:
    shape: dict[str, Any] = {"block_size": block_size, "heads": heads, "head_dim": head_dim}
    src = make_store(16, dtype=dtype, mla=mla, seed=1, **shape)
    dst = make_store(24, dtype=dtype, mla=mla, seed=2, **shape)
    src_before, dst_before = snapshot(src), snapshot(dst)
    swap_blocks(src, dst, SWAP_PAIRS)
    assert_same(dst.tensors(), ref_swap(src_before, dst_before, SWAP_PAIRS))
    assert_same(src.tensors(), src_before)  # the source is only read


@pytest.mark.parametrize("form", ["list", "tensor"])
@pytest.mark.parametrize(
    "pairs",
    [[], [(0, 0)], [(i, i) for i in range(8)], [(i, 9 - i) for i in range(8)], [(2, 9), (2, 8)]],
)
def test_swap_blocks_runs_and_forms(pairs: Pairs, form: str, host_path: str) -> None:
    src, dst = make_store(8, seed=3), make_store(10, seed=4)
    src_before, dst_before = snapshot(src), snapshot(dst)
    swap_blocks(src, dst, as_form(pairs, form))
    assert_same(dst.tensors(), ref_swap(src_before, dst_before, pairs))
    assert_same(src.tensors(), src_before)


def test_swap_blocks_within_one_store_reads_before_writing(host_path: str) -> None:
    store = make_store(6)
    before = snapshot(store)
    pairs = [(0, 1), (1, 2), (2, 3)]
    swap_blocks(store, store, pairs)
    assert_same(store.tensors(), ref_copy(before, pairs))


@given(
    data=st.data(),
    src_blocks=st.integers(1, 20),
    dst_blocks=st.integers(1, 20),
    block_size=st.sampled_from([1, 3]),
    dtype=st.sampled_from(DTYPES),
    mla=st.booleans(),
    form=st.sampled_from(["list", "tensor"]),
)
@ON_EITHER_PATH
def test_swap_blocks_random(
    data: st.DataObject,
    src_blocks: int,
    dst_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    mla: bool,
    form: str,
    host_path: str,
) -> None:
    pairs = data.draw(run_pairs(src_blocks, dst_blocks))
    shape: dict[str, Any] = {"block_size": block_size, "dtype": dtype, "mla": mla, "layers": 2}
    src = make_store(src_blocks, seed=5, **shape)
    dst = make_store(dst_blocks, seed=6, **shape)
    src_before, dst_before = snapshot(src), snapshot(dst)
    swap_blocks(src, dst, as_form(pairs, form))
    assert_same(dst.tensors(), ref_swap(src_before, dst_before, pairs))
    assert_same(src.tensors(), src_before)


# --- swap_blocks_in_place -----------------------------------------------------------------------

EXCHANGE_PAIRS: Pairs = [(0, 15), (3, 4), (5, 9), (6, 10), (7, 11)]  # 5, 6, 7 -> 9, 10, 11: a run


@pytest.mark.parametrize(
    "pairs", [EXCHANGE_PAIRS, [(0, 15)], [(15, 0)]], ids=["batch", "one", "back"]
)
@pytest.mark.parametrize("mla", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "head_dim"), HEAD_SHAPES)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_swap_blocks_in_place_matches_reference(
    block_size: int,
    heads: int,
    head_dim: int,
    dtype: torch.dtype,
    mla: bool,
    pairs: Pairs,
    host_path: str,
) -> None:
    """A batch, and a batch of one pair (which the byte path trades without planning)."""
    store = make_store(
        16, block_size=block_size, heads=heads, head_dim=head_dim, dtype=dtype, mla=mla
    )
    before = snapshot(store)
    swap_blocks_in_place(store, pairs)
    assert_same(store.tensors(), ref_exchange(before, pairs))
    # both directions: the destination's old contents were kept, not overwritten
    assert torch.equal(bits(store.tensors()[-1][0]), bits(before[-1][15]))
    assert torch.equal(bits(store.tensors()[-1][15]), bits(before[-1][0]))


def test_swap_blocks_in_place_on_a_store_of_one_tensor(host_path: str) -> None:
    """One MLA layer is one cache tensor: the exchange buffer is shaped from the only row view
    (shaping it from a second one was a gap found by ``make mutate``)."""
    store = make_store(6, mla=True, layers=1, seed=3)
    assert len(store.tensors()) == 1
    before = snapshot(store)
    swap_blocks_in_place(store, [(0, 5), (1, 2)])
    assert_same(store.tensors(), ref_exchange(before, [(0, 5), (1, 2)]))


@pytest.mark.parametrize(
    ("dtype", "head_dim", "word"),
    [
        (torch.float32, 2, torch.int64),  # 8-byte rows: too narrow for complex128
        (torch.float32, 6, torch.int64),  # 24 bytes: 8 tiles them, 16 does not
        (torch.float16, 3, torch.int16),  # 6 bytes
        (torch.float8_e4m3fn, 3, torch.uint8),  # 3 bytes: only single bytes tile them
    ],
)
def test_swap_blocks_in_place_on_rows_no_wide_word_tiles(
    dtype: torch.dtype, head_dim: int, word: torch.dtype, host_path: str
) -> None:
    """Blocks of one token and one head: the rows are viewed as the widest word that divides
    them, never a wider one, and the exchange moves them as it does wide rows."""
    store = make_store(6, block_size=1, heads=1, head_dim=head_dim, dtype=dtype, seed=4)
    assert _row_view(store.tensors()[0]).dtype == word
    before = snapshot(store)
    swap_blocks_in_place(store, [(0, 5), (1, 2)])
    assert_same(store.tensors(), ref_exchange(before, [(0, 5), (1, 2)]))


def test_swap_blocks_in_place_on_rows_too_wide_for_the_buffer(host_path: str) -> None:
    """Rows of 512 KiB: not even the smallest pad size fits the buffer's bound, and the
    exchange still runs, in batches of the smallest size."""
    store = make_store(2, block_size=128, heads=8, head_dim=256, dtype=torch.float16, mla=True)
    # 2 * 8 rows of 512 KiB: 8 MiB, past EXCHANGE_BUFFER_BYTES (4 MiB)
    before = snapshot(store)
    swap_blocks_in_place(store, [(0, 1)])
    assert_same(store.tensors(), ref_exchange(before, [(0, 1)]))


@pytest.mark.parametrize("form", ["list", "tensor"])
@pytest.mark.parametrize("num_pairs", [0, 1, 3, 4, 5, 8, 9, 16, 17, 20])
def test_swap_blocks_in_place_padding_touches_only_listed_pairs(
    num_pairs: int, form: str, host_path: str
) -> None:
    """Pad sizes (4, 8) force padding (1, 3, 5, 9, 17 pairs) and chunking (9+ pairs)."""
    store = make_store(41, seed=7)
    before = snapshot(store)
    ids = torch.randperm(41, generator=torch.Generator().manual_seed(num_pairs)).tolist()
    pairs = [(ids[2 * i], ids[2 * i + 1]) for i in range(num_pairs)]
    swap_blocks_in_place(store, as_form(pairs, form), pad_sizes=(8, 4))
    expected = ref_exchange(before, pairs)
    assert_same(store.tensors(), expected)
    listed = {b for pair in pairs for b in pair}
    for after, old in zip(store.tensors(), before, strict=True):
        for block in range(41):
            if block not in listed:
                assert torch.equal(bits(after[block]), bits(old[block]))
            else:
                assert not torch.equal(bits(after[block]), bits(old[block]))


@pytest.mark.parametrize(
    ("num_pairs", "pad_sizes", "sizes"),
    [
        (1, DEFAULT_PAD_SIZES, [8]),
        (8, DEFAULT_PAD_SIZES, [8]),
        (9, DEFAULT_PAD_SIZES, [16]),
        (300, DEFAULT_PAD_SIZES, [512]),
        (513, DEFAULT_PAD_SIZES, [512, 8]),
        (1100, DEFAULT_PAD_SIZES, [512, 512, 128]),
        (9, (4, 2), [4, 4, 2]),
        (5, (3,), [3, 3]),
    ],
)
def test_padded_batches_shapes_and_padding(
    num_pairs: int, pad_sizes: Sequence[int], sizes: list[int]
) -> None:
    pairs = [(2 * i, 2 * i + 1) for i in range(num_pairs)]
    batches = padded_batches(pairs, pad_sizes)
    assert [len(b) for b in batches] == sizes
    largest = max(pad_sizes)
    real = [pairs[i : i + largest] for i in range(0, num_pairs, largest)]
    for batch, chunk in zip(batches, real, strict=True):
        assert batch[: len(chunk)] == chunk  # the real pairs, in order
        assert all(pad == chunk[0] for pad in batch[len(chunk) :])  # padding repeats a real pair


@pytest.mark.parametrize("host_path", ["torch"], indirect=True)
def test_swap_blocks_in_place_issues_one_fixed_shape_batch_per_tensor(host_path: str) -> None:
    """Off the byte path (as on an accelerator) a batch is padded to a fixed shape."""
    store = make_store(32, layers=3, mla=False)
    pairs = [(2 * i, 2 * i + 1) for i in range(5)]
    with CountOps() as ops:
        swap_blocks_in_place(store, pairs)
    assert ops.counts.get("index_select") == 6 and ops.counts.get("index_copy_") == 6
    assert set(ops.index_lengths) == {16}  # 5 pairs padded to 8, both directions


@pytest.mark.parametrize("host_path", ["torch"], indirect=True)
@pytest.mark.parametrize("kernel", ["copy", "swap"])
def test_consecutive_runs_are_one_copy_of_every_layer(kernel: str, host_path: str) -> None:
    """A run is one slab of the block-by-block allocation: one slice copy for 3 layers x (K, V)."""
    src, dst = make_store(40, layers=3, seed=8), make_store(40, layers=3, seed=9)
    pairs = [(i, 20 + i) for i in range(16)]
    with CountOps() as ops:
        if kernel == "copy":
            copy_blocks(src, pairs)
        else:
            swap_blocks(src, dst, pairs)
    assert ops.counts.get("copy_") == 1


# --- the byte path ------------------------------------------------------------------------------


@pytest.mark.parametrize("host_path", ["bytes"], indirect=True)
@pytest.mark.parametrize("kernel", ["copy", "swap"])
def test_byte_path_copies_each_run_once_and_stages_only_what_is_written(
    kernel: str, host_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs reach the byte copy coalesced; only a run whose source this call also writes is
    read aside first (and only within one store); no torch op runs at all."""
    calls: list[tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]] = []
    real = host_bytes.copy_runs

    def spy(
        src: host_bytes.HostBlocks,
        dst: host_bytes.HostBlocks,
        direct: Sequence[tuple[int, int, int]],
        staged: Sequence[tuple[int, int, int]],
    ) -> None:
        calls.append((list(direct), list(staged)))
        real(src, dst, direct, staged)

    monkeypatch.setattr(kernels, "copy_runs", spy)
    src, dst = make_store(40, layers=3, seed=8), make_store(40, layers=3, seed=9)
    pairs = [(i, 20 + i) for i in range(16)] + [(37, 38), (36, 37)]  # a chain, itself a run
    before, dst_before = snapshot(src), snapshot(dst)
    with CountOps() as ops:
        if kernel == "copy":
            copy_blocks(src, pairs)
        else:
            swap_blocks(src, dst, pairs)
    assert ops.counts == {}
    if kernel == "copy":
        assert calls == [([Run(0, 20, 16)], [Run(36, 37, 2)])]
        assert_same(src.tensors(), ref_copy(before, pairs))
    else:
        assert calls == [([Run(0, 20, 16), Run(36, 37, 2)], [])]
        assert_same(dst.tensors(), ref_swap(before, dst_before, pairs))


@pytest.mark.parametrize("host_path", ["bytes"], indirect=True)
def test_byte_path_tells_torch_the_store_was_written(host_path: str) -> None:
    """Bytes written through ``host_bytes`` bypass torch's count of in-place writes, so the
    kernels bump it as ``copy_`` would (a tensor saved for backward must see the change)."""
    store, other = make_store(8, seed=26), make_store(8, seed=27)
    moves: list[Callable[[], None]] = [
        lambda: copy_blocks(store, [(0, 1)]),
        lambda: swap_blocks(other, store, [(0, 1)]),
        lambda: swap_blocks_in_place(store, [(0, 1)]),
    ]
    for move in moves:
        version = store.blocks._version
        move()
        assert store.blocks._version > version
        assert store.tensors()[0]._version == store.blocks._version  # views share the count


@pytest.mark.parametrize("host_path", ["bytes"], indirect=True)
@pytest.mark.parametrize("piece_tenths", [3, 10, 25])
def test_byte_exchange_splits_long_runs_into_pieces(
    piece_tenths: int, host_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of exchanges is traded a piece of at most ``EXCHANGE_PIECE_BYTES`` at a time, which
    may end inside a block: pieces of 0.3, 1 and 2.5 blocks over runs of 1, 5 and 7 pairs."""
    store = make_store(40, layers=2, seed=28)
    piece = store.block_bytes * piece_tenths // 10
    monkeypatch.setattr(host_bytes, "EXCHANGE_PIECE_BYTES", piece)
    pairs = [(0, 39)] + [(1 + i, 20 + i) for i in range(5)] + [(10 + i, 30 + i) for i in range(7)]
    assert len(coalesce_runs(pairs)) == 3
    before = snapshot(store)
    with CountOps() as ops:
        swap_blocks_in_place(store, pairs)
        swap_blocks_in_place(store, [(2, 38)])  # a batch of one pair: traded without planning
    assert ops.counts == {}  # no padding, no index kernels: bytes only
    assert_same(store.tensors(), ref_exchange(ref_exchange(before, pairs), [(2, 38)]))


def test_host_bytes_are_the_store_allocation() -> None:
    store = make_store(4, seed=29)
    memory = store.host_bytes()
    assert memory is store.host_bytes()  # made once
    assert len(memory) == store.blocks.numel() * store.blocks.element_size()
    assert memory.format == "B" and not memory.readonly
    first = store.tensors()[0].reshape(-1)[:1].clone()
    memory[:4] = bytes(4)
    assert float(store.tensors()[0].reshape(-1)[0]) == 0.0 != float(first[0])


def _vm_flags(address: int) -> list[str] | None:
    """The kernel's flags (``VmFlags`` in ``/proc/self/smaps``) of the mapping holding
    ``address``; None where there is no such file."""
    try:
        with open("/proc/self/smaps") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no huge page advice here")
def test_host_store_memory_is_private_and_advised_for_huge_pages() -> None:
    """Scattered slabs copy from 4 KiB pages at a TLB miss a page (``optimized/host_memory.py``):
    the store asks for huge pages (``hg``), in private memory (no ``sh``) it has written."""
    store = KVStore(2, 64, 16, 8, 64, torch.float16, "cpu")  # 8 MiB
    flags = _vm_flags(store.blocks.data_ptr())
    if flags is None:
        pytest.skip("no /proc/self/smaps")
    assert "hg" in flags and "sh" not in flags
    assert store.host_bytes().obj is not None  # the mapping itself, not torch's allocation
    assert not store.blocks.any()


def test_host_blocks_are_forgotten_with_their_store() -> None:
    """The byte layout is kept per live store (by id): a collected store's entry goes, so a new
    store that reuses the id cannot be given the old one's memory."""
    store = make_store(4, seed=30)
    found = host_bytes.HostBlocks.of(store)
    assert host_bytes.HostBlocks.of(store) is found is host_bytes.HostBlocks.known(store)
    key = id(store)
    del store, found
    gc.collect()
    assert key not in host_bytes._LAYOUTS


def test_exchange_scratch_is_kept_but_never_shared() -> None:
    """The exchange's scratch outlives a call (allocating it per call was a tenth of a one-pair
    batch), but two calls at once (threads on disjoint blocks) never get the same buffer."""
    blocks = host_bytes.HostBlocks.of(make_store(4, seed=31))
    first = blocks.take_scratch(64)
    second = blocks.take_scratch(64)  # taken while the first is in use
    assert first.obj is not second.obj
    blocks.give_back(first)
    assert blocks.take_scratch(32).obj is first.obj  # kept, and big enough
    assert len(blocks.take_scratch(128)) >= 128  # none spare now: a new one


def test_only_a_host_store_has_host_bytes() -> None:
    meta = KVStore(1, 2, 2, 1, 4, torch.float32, "meta")
    assert not moves_host_bytes(meta.device)
    with pytest.raises(InvalidArgumentError, match="no host bytes"):
        meta.host_bytes()


def test_coalesce_runs() -> None:
    assert coalesce_runs([]) == []
    assert coalesce_runs([(3, 7), (1, 5), (2, 6), (9, 1), (10, 3), (11, 4)]) == [
        Run(1, 5, 3),
        Run(9, 1, 1),
        Run(10, 3, 2),
    ]
    assert coalesce_runs([(i, 100 + i) for i in range(64)]) == [Run(0, 100, 64)]
    assert coalesce_runs([(5, 1), (6, 0)]) == [Run(5, 1, 1), Run(6, 0, 1)]  # dst runs backwards


@given(
    data=st.data(),
    num_blocks=st.integers(1, 30),
    block_size=st.sampled_from([1, 3]),
    dtype=st.sampled_from(DTYPES),
    mla=st.booleans(),
    form=st.sampled_from(["list", "tensor"]),
    pad_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3),
)
@ON_EITHER_PATH
def test_swap_blocks_in_place_random(
    data: st.DataObject,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    mla: bool,
    form: str,
    pad_sizes: list[int],
    host_path: str,
) -> None:
    ids = data.draw(st.permutations(range(num_blocks)))
    count = data.draw(st.integers(0, num_blocks // 2))
    pairs = [(ids[2 * i], ids[2 * i + 1]) for i in range(count)]
    store = make_store(num_blocks, block_size=block_size, dtype=dtype, mla=mla, layers=2)
    before = snapshot(store)
    swap_blocks_in_place(store, as_form(pairs, form), pad_sizes=pad_sizes)
    assert_same(store.tensors(), ref_exchange(before, pairs))
    swap_blocks_in_place(store, as_form(pairs, form), pad_sizes=pad_sizes)
    assert_same(store.tensors(), before)  # an exchange undoes itself


# --- validation ---------------------------------------------------------------------------------

KernelCall = Callable[[KVStore, KVStore, Any], None]
KERNELS: dict[str, KernelCall] = {
    "copy": lambda store, other, pairs: copy_blocks(store, pairs),
    "swap": lambda store, other, pairs: swap_blocks(store, other, pairs),
    "in_place": lambda store, other, pairs: swap_blocks_in_place(store, pairs),
}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (torch.tensor([[0, 1]], dtype=torch.int32), "int64"),
        (torch.tensor([[0.0, 1.0]]), "int64"),
        (torch.tensor([0, 1]), r"\[N, 2\]"),
        (torch.tensor([[0, 1, 2]]), r"\[N, 2\]"),
        (torch.zeros((0,), dtype=torch.int64), r"\[N, 2\]"),
        (torch.zeros((1, 2), dtype=torch.int64, device="meta"), "CPU"),
        ([(0, 1, 2)], r"\(0, 1, 2\)"),
        ([(0,)], r"\(0,\)"),
        ([(0, True)], "True"),
        ([(0, 1.0)], "1.0"),
        (["01"], "'01'"),
        ([3], "3"),
        ("0,1", "'0,1'"),
        (None, "None"),
    ],
)
def test_malformed_pairs_are_rejected(kernel: str, pairs: object, message: str) -> None:
    store, other = make_store(8, seed=10), make_store(8, seed=11)
    before, other_before = snapshot(store), snapshot(other)
    with pytest.raises(InvalidArgumentError, match=message):
        KERNELS[kernel](store, other, pairs)
    assert_same(store.tensors(), before)
    assert_same(other.tensors(), other_before)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("form", ["list", "tensor"])
@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([(0, 1), (-1, 2)], "source block -1"),
        ([(0, 1), (2, -5)], "destination block -5"),
        ([(0, 1), (8, 2)], "source block 8"),
        ([(0, 1), (2, 3), (4, 8)], "destination block 8"),
    ],
)
def test_foreign_block_ids_are_rejected_before_any_write(
    kernel: str, form: str, pairs: Pairs, message: str
) -> None:
    store, other = make_store(8, seed=12), make_store(8, seed=13)
    before, other_before = snapshot(store), snapshot(other)
    with pytest.raises(ForeignBlockError, match=message):
        KERNELS[kernel](store, other, as_form(pairs, form))
    assert_same(store.tensors(), before)  # the valid pairs listed first were not applied
    assert_same(other.tensors(), other_before)


def test_swap_blocks_checks_ids_against_each_store() -> None:
    src, dst = make_store(4, seed=14), make_store(10, seed=15)
    dst_before = snapshot(dst)
    with pytest.raises(ForeignBlockError, match="source block 5"):
        swap_blocks(src, dst, [(5, 5)])  # in range for dst, not for src
    with pytest.raises(ForeignBlockError, match="destination block 4"):
        swap_blocks(dst, src, [(9, 4)])  # in range for the source, not for the destination
    assert_same(dst.tensors(), dst_before)


@pytest.mark.parametrize("kernel", ["copy", "swap"])
def test_duplicate_destinations_are_rejected(kernel: str) -> None:
    store, other = make_store(8, seed=16), make_store(8, seed=17)
    before, other_before = snapshot(store), snapshot(other)
    with pytest.raises(InvalidArgumentError, match="destination block 3 appears twice"):
        KERNELS[kernel](store, other, [(0, 3), (1, 2), (4, 3)])
    assert_same(store.tensors(), before)
    assert_same(other.tensors(), other_before)


@pytest.mark.parametrize("form", ["list", "tensor"])
@pytest.mark.parametrize(
    ("pairs", "block"),
    [([(1, 2), (2, 3)], 2), ([(1, 2), (3, 1)], 1), ([(4, 4)], 4), ([(0, 5), (6, 7), (7, 0)], 7)],
)
def test_in_place_rejects_pairs_that_share_a_block(pairs: Pairs, block: int, form: str) -> None:
    store = make_store(8, seed=18)
    before = snapshot(store)
    with pytest.raises(InvalidArgumentError, match=f"block {block} appears more than once"):
        swap_blocks_in_place(store, as_form(pairs, form))
    assert_same(store.tensors(), before)


@pytest.mark.parametrize("host_path", ["bytes"], indirect=True)
@pytest.mark.parametrize(
    ("pairs", "error", "message"),
    [
        ([(8, 2)], ForeignBlockError, "source block 8"),
        ([(2, 8)], ForeignBlockError, "destination block 8"),
        ([(-1, 2)], ForeignBlockError, "source block -1"),
        ([(2, -1)], ForeignBlockError, "destination block -1"),
        ([(3, 3)], InvalidArgumentError, "block 3 appears more than once"),
        ([(0, True)], InvalidArgumentError, "True"),
        ([(0, 1.0)], InvalidArgumentError, "1.0"),
        ([(0, 1, 2)], InvalidArgumentError, r"\(0, 1, 2\)"),
    ],
)
def test_in_place_checks_a_lone_pair_on_the_byte_path(
    pairs: Pairs, error: type[Exception], message: str, host_path: str
) -> None:
    """A batch of one pair on the byte path skips the general checks only when it passes them:
    anything else reaches them and raises as a batch would, before any write."""
    store = make_store(8, seed=20)
    before = snapshot(store)
    with pytest.raises(error, match=message):
        swap_blocks_in_place(store, pairs)
    assert_same(store.tensors(), before)


@pytest.mark.parametrize(
    "pad_sizes", [(), (0,), (8, -4), (True,), (2.5,), "8", None, (2**24 + 1,), (8, 2**70)]
)
@pytest.mark.parametrize("threads", [1, 2])
def test_in_place_rejects_bad_pad_sizes(pad_sizes: Any, threads: int) -> None:
    """Whichever way the exchange runs (one thread moves bytes and pads nothing; two pad their
    batches, and a pad size of 2**70 raised an untyped OverflowError there)."""
    store = make_store(8, seed=19)
    before = snapshot(store)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with pytest.raises(InvalidArgumentError, match="pad_sizes"):
            swap_blocks_in_place(store, [(0, 1)], pad_sizes=pad_sizes)
    finally:
        torch.set_num_threads(previous)
    assert_same(store.tensors(), before)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dtype": torch.float16}, "dtype"),
        ({"block_size": 8}, "block_size"),
        ({"mla": True}, "is_mla"),
        ({"layers": 2}, "num_layers"),
        ({"heads": 1}, "num_kv_heads"),
        ({"head_dim": 4}, "head_dim"),
    ],
)
def test_swap_blocks_rejects_stores_of_another_layout(change: dict[str, Any], message: str) -> None:
    src, dst = make_store(8), make_store(8, **change)
    dst_before = snapshot(dst)
    with pytest.raises(InvalidArgumentError, match=message):
        swap_blocks(src, dst, [(0, 0)])
    assert_same(dst.tensors(), dst_before)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_non_store_arguments_are_rejected(kernel: str) -> None:
    store = make_store(4)
    with pytest.raises(InvalidArgumentError, match="KVStore"):
        KERNELS[kernel](store.caches, store, [(0, 1)])  # type: ignore[arg-type]


def test_swap_blocks_rejects_a_destination_that_is_not_a_store() -> None:
    """The destination is checked as the source is, before its layout is compared."""
    store = make_store(4)
    with pytest.raises(InvalidArgumentError, match="dst must be a KVStore"):
        swap_blocks(store, store.caches, [(0, 1)])  # type: ignore[arg-type]


class Slot(enum.IntEnum):
    FIRST = 1
    LAST = 3


def test_normalize_pairs_forms_agree() -> None:
    pairs = [(3, 0), (1, 2)]
    tensor = torch.tensor(pairs, dtype=torch.int64)
    assert normalize_pairs(pairs, 4, 4) == normalize_pairs(tensor, 4, 4) == pairs
    assert normalize_pairs([[3, 0]], 4, 1) == [(3, 0)]
    assert normalize_pairs(torch.zeros((0, 2), dtype=torch.int64), 1, 1) == []
    # past the fast path for plain tuples and lists: any sequence of two ints, int subclasses
    # (but not bool) included
    assert normalize_pairs([range(2, 4), (Slot.FIRST, Slot.LAST)], 4, 4) == [(2, 3), (1, 3)]


@pytest.mark.skipif(ACCELERATOR is None, reason="no accelerator on this machine")
def test_kernels_on_an_accelerator_and_across_devices() -> None:
    assert ACCELERATOR is not None
    host = make_store(12, seed=20)
    device = make_store(10, seed=21, device=ACCELERATOR)
    assert device.device.type == ACCELERATOR.type
    host_before, device_before = snapshot(host), snapshot(device)
    swap_in = [(0, 9), (1, 0), (2, 1), (11, 5)]
    swap_blocks(host, device, swap_in)
    expected = ref_swap(host_before, device_before, swap_in)
    assert_same(device.tensors(), expected)
    swap_out = [(9, 3), (0, 4), (5, 11)]
    swap_blocks(device, host, swap_out)
    assert_same(host.tensors(), ref_swap(expected, host_before, swap_out))
    cow = [(0, 1), (1, 2), (3, 7)]
    copy_blocks(device, cow)
    expected = ref_copy(expected, cow)
    assert_same(device.tensors(), expected)
    exchange = [(0, 9), (2, 3), (4, 5)]
    swap_blocks_in_place(device, exchange)
    assert_same(device.tensors(), ref_exchange(expected, exchange))


SCATTERED: Pairs = [(0, 9), (9, 2), (2, 4), (7, 6), (5, 0), (3, 8)]
"""Six runs, a chain among them: more than ``MAX_RUNS``, so an accelerator gathers and scatters."""


@pytest.mark.skipif(ACCELERATOR is None, reason="no accelerator on this machine")
def test_scattered_pairs_on_an_accelerator_and_across_devices() -> None:
    """Past ``MAX_RUNS`` runs an accelerator moves the pairs by one gather and one scatter per
    tensor (reads before writes, so the chain copies the old blocks); between the host and the
    device the runs are copied one by one, whatever their number."""
    assert ACCELERATOR is not None
    device = make_store(10, seed=22, device=ACCELERATOR)
    other = make_store(10, seed=23, device=ACCELERATOR)
    host = make_store(10, seed=24)
    source = make_store(10, seed=25)
    device_before, other_before, host_before = snapshot(device), snapshot(other), snapshot(host)
    assert len(coalesce_runs(SCATTERED)) > MAX_RUNS
    copy_blocks(device, SCATTERED)
    copied = ref_copy(device_before, SCATTERED)
    assert_same(device.tensors(), copied)
    swap_blocks(device, other, SCATTERED)
    assert_same(other.tensors(), ref_swap(copied, other_before, SCATTERED))
    swap_blocks(device, host, SCATTERED)
    assert_same(host.tensors(), ref_swap(copied, host_before, SCATTERED))
    swap_blocks(source, device, SCATTERED)
    assert_same(device.tensors(), ref_swap(snapshot(source), copied, SCATTERED))


@pytest.mark.skipif(
    ACCELERATOR is None or ACCELERATOR.type != "cuda", reason="needs a CUDA device to hold back"
)
def test_swap_blocks_returns_only_when_the_host_side_is_done() -> None:
    """The promise of ``swap_blocks``: on return the host side may be reused (to the device) or
    read (from it). The device's stream is held back by a sleep kernel, so the copies queue
    behind it: a call that returned without waiting (a gap found by ``make mutate``, which a
    host-only machine cannot see) would let the host buffer change before the copy reads it, and
    be read before the copy writes it."""
    assert ACCELERATOR is not None
    hold_back = 1 << 28  # GPU clock cycles: a tenth of a second or more
    host = make_store(4, seed=30)
    device = make_store(4, seed=31, device=ACCELERATOR)
    expected_device = ref_swap(snapshot(host), snapshot(device), [(0, 1)])
    torch.cuda._sleep(hold_back)  # type: ignore[no-untyped-call]  # torch leaves it untyped
    swap_blocks(host, device, [(0, 1)])
    for cache in host.tensors():
        cache.zero_()  # reuse the host side at once
    assert_same(device.tensors(), expected_device)
    expected_host = ref_swap(expected_device, snapshot(host), [(1, 2)])
    torch.cuda._sleep(hold_back)  # type: ignore[no-untyped-call]  # torch leaves it untyped
    swap_blocks(device, host, [(1, 2)])
    assert_same(host.tensors(), expected_host)  # read the host side at once
