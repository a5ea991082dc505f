"""Block data movement over ``KVStore`` tensors: copy-on-write, swap between devices, defrag.

The block managers decide *which* blocks move; these functions move the bytes. Every function
validates all of its pairs before it touches a tensor, so an error leaves both stores as they were.
Pairs come either as a CPU ``[N, 2]`` int64 tensor (what a scheduler batches up) or as a sequence
of ``(src, dst)`` int pairs (what a block manager hands out); both go through ``normalize_pairs``.

Small blocks are limited by per-call overhead, not by bandwidth. ``copy_blocks`` and
``swap_blocks`` coalesce pairs into runs of consecutive ids (``coalesce_runs``). The store is laid
out block by block (``KVStore.blocks``), so a run is one contiguous slab of every layer, K and V,
and one copy moves it. How a run is copied depends on where the store lives and how torch runs
there:

- on the host with one torch thread (``moves_host_bytes``): one ``memcpy`` per run, as a
  ``memoryview`` slice assignment over the store's single allocation, with no tensor view or
  kernel dispatch per block (``optimized/host_bytes.py``); ``swap_blocks_in_place`` trades each
  pair's slabs the same way, unpadded;
- on the host with several threads, torch's ``copy_`` (which splits a large copy over them): each
  run one ``copy_`` of the single allocation;
- on an accelerator, and between two devices, a few runs are one slice ``copy_`` of the single
  allocation per run; many runs on one accelerator (scattered pairs) one gather
  (``index_select``) and one scatter (``index_copy_``) per tensor through a buffer, two kernel
  launches per tensor whatever the number of pairs, the buffer one tensor's blocks.

``swap_blocks_in_place`` off the byte path exchanges through a gathered buffer per tensor, in
batches padded to a few fixed sizes so that a compiled or graphed kernel sees only a handful of
shapes, and small enough that the buffer stays in cache. The index kernels move rows as the
widest word that tiles them (``_row_view``): their cost grows with the number of elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias, TypeVar

import torch

from pagedkv.optimized.host_bytes import HostBlocks, copy_runs, exchange_one, exchange_runs
from pagedkv.optimized.kv_store import KVStore
from pagedkv.specs.defrag_rule import padded_size
from pagedkv.specs.errors import ForeignBlockError, InvalidArgumentError
from pagedkv.specs.types import DEFRAG_PAD_SIZES
from pagedkv.specs.validation import MAX_BLOCKS

PairsLike: TypeAlias = torch.Tensor | Sequence[Sequence[int]]
"""``[N, 2]`` int64 CPU tensor, or a sequence of ``(src, dst)`` pairs."""

DEFAULT_PAD_SIZES: tuple[int, ...] = DEFRAG_PAD_SIZES

MAX_RUNS = 4
"""On an accelerator, pairs that coalesce into at most this many runs are copied run by run (each
one ``copy_`` of every layer); more runs are moved as the scattered pairs they are (see above)."""

EXCHANGE_BUFFER_BYTES = 4 * 2**20
"""A batch of the exchange holds at most about this much of one tensor in its buffer (never
fewer rows than the smallest pad size), so that the scatter reads it back from cache."""


class Run(NamedTuple):
    """``length`` consecutive blocks ``src..`` that map onto ``dst..``: one slice copy."""

    src: int
    dst: int
    length: int


RunT = TypeVar("RunT", bound=tuple[int, int, int])
"""A ``Run``, or the plain tuple the byte path uses for one."""


# --- input --------------------------------------------------------------------------------------


def _check_store(store: object, name: str) -> KVStore:
    if not isinstance(store, KVStore):
        raise InvalidArgumentError(f"{name} must be a KVStore, got {type(store).__name__}")
    return store


def normalize_pairs(pairs: object, src_blocks: int, dst_blocks: int) -> list[tuple[int, int]]:
    """Both accepted forms of a pair list as Python ints, range-checked against the two stores.

    Python ints are what the run planning needs anyway, and checking everything here (rather than
    letting an index kernel fail halfway) is what keeps a rejected call from changing anything.
    """
    rows: Sequence[object]
    if type(pairs) is list:  # tested first: asking isinstance of torch.Tensor costs a batch of
        rows = pairs  # one pair as much as checking the pair itself
    elif isinstance(pairs, torch.Tensor):
        if pairs.device.type != "cpu":
            raise InvalidArgumentError(f"pair tensor must be on the CPU, got device {pairs.device}")
        if pairs.dtype != torch.int64:
            raise InvalidArgumentError(f"pair tensor must be int64, got {pairs.dtype}")
        if pairs.dim() != 2 or pairs.shape[1] != 2:
            raise InvalidArgumentError(f"pair tensor must be [N, 2], got {list(pairs.shape)}")
        rows = pairs.tolist()
    elif isinstance(pairs, Sequence) and not isinstance(pairs, str | bytes):
        rows = pairs
    else:
        raise InvalidArgumentError(
            f"pairs must be an [N, 2] int64 tensor or a sequence of (src, dst), got {pairs!r}"
        )
    out: list[tuple[int, int]] = []
    in_range = True
    for pair in rows:
        # A tuple or list of two plain ints is nearly every pair: tested by exact type first,
        # for a fraction of what the general test costs, and its range with it.
        if (type(pair) is tuple or type(pair) is list) and len(pair) == 2:
            src, dst = pair
            if type(src) is int and type(dst) is int:
                out.append(pair if type(pair) is tuple else (src, dst))
                in_range = in_range and 0 <= src < src_blocks and 0 <= dst < dst_blocks
                continue
        src, dst = _checked_pair(pair)
        out.append((src, dst))
        in_range = in_range and 0 <= src < src_blocks and 0 <= dst < dst_blocks
    for src, dst in [] if in_range else out:  # the first pair out of range, to name it
        if not 0 <= src < src_blocks:
            raise ForeignBlockError(
                f"source block {src} of pair ({src}, {dst}) is not in the store "
                f"(0..{src_blocks - 1})"
            )
        if not 0 <= dst < dst_blocks:
            raise ForeignBlockError(
                f"destination block {dst} of pair ({src}, {dst}) is not in the store "
                f"(0..{dst_blocks - 1})"
            )
    return out


def _checked_pair(pair: object) -> tuple[int, int]:
    if (
        isinstance(pair, str | bytes)
        or not isinstance(pair, Sequence)
        or len(pair) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
    ):
        raise InvalidArgumentError(f"each pair must be two ints (src, dst), got {pair!r}")
    return pair[0], pair[1]


def _check_distinct_destinations(pairs: Sequence[tuple[int, int]]) -> None:
    """Two sources for one destination would make the result depend on write order."""
    if len({dst for _, dst in pairs}) == len(pairs):
        return
    seen: set[int] = set()
    for src, dst in pairs:
        if dst in seen:
            raise InvalidArgumentError(
                f"destination block {dst} appears twice (pair ({src}, {dst}))"
            )
        seen.add(dst)


def coalesce_runs(pairs: Sequence[tuple[int, int]]) -> list[Run]:
    """Pairs merged into runs of consecutive ids, so each run costs one ``copy_`` call.

    Pairs are sorted first: with distinct destinations (which the callers enforce) the order of
    the copies cannot matter, and sorting finds runs however the caller happened to list them.
    """
    return [Run(src, dst, length) for src, dst, length in _spans(pairs)]


def _spans(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``coalesce_runs`` as plain tuples, for the byte path, where building a ``Run`` per
    scattered pair would cost as much as copying its block."""
    if len(pairs) == 1:  # nothing to sort or merge
        src, dst = pairs[0]
        return [(src, dst, 1)]
    spans: list[tuple[int, int, int]] = []
    ordered = sorted(pairs)
    if not ordered:
        return spans
    first_src, first_dst = ordered[0]
    length = 1
    for src, dst in ordered[1:]:
        if src == first_src + length and dst == first_dst + length:
            length += 1
            continue
        spans.append((first_src, first_dst, length))
        first_src, first_dst, length = src, dst, 1
    spans.append((first_src, first_dst, length))
    return spans


def moves_host_bytes(device: torch.device) -> bool:
    """Whether blocks on ``device`` are moved as byte copies (``optimized/host_bytes.py``): on
    the host while torch runs one intra-op thread. With more, torch's ``copy_`` splits each
    large copy over them, which a ``memcpy`` loop cannot."""
    return device.type == "cpu" and torch.get_num_threads() == 1


def _byte_blocks(store: KVStore) -> HostBlocks | None:
    """The store as bytes when ``moves_host_bytes`` holds for it, else None. After a store's
    first call this is a dictionary look-up: asking a ``torch.device`` its type alone cost a
    batch of one pair as much as its range checks."""
    if torch.get_num_threads() != 1:
        return None
    found = HostBlocks.known(store)
    if found is None and moves_host_bytes(store.device):
        found = HostBlocks.of(store)
    return found


def _split_staged(runs: Sequence[RunT], written: set[int]) -> tuple[list[RunT], list[RunT]]:
    """(runs none of whose sources is written in this call, runs with one that is)."""
    if not written:
        return list(runs), []
    direct: list[RunT] = []
    staged: list[RunT] = []
    for run in runs:
        src, _, length = run
        (direct if written.isdisjoint(range(src, src + length)) else staged).append(run)
    return direct, staged


# --- copy-on-write ------------------------------------------------------------------------------


def copy_blocks(store: KVStore, pairs: PairsLike) -> None:
    """Copy block ``src`` onto block ``dst`` for every pair, in every layer, K and V.

    The result is as if every source were read before any destination is written, so a block may
    be both a source and a destination in one call (chains ``1->2, 2->3`` copy the *old* 2 to 3).
    Only runs whose source blocks are also written in this call are staged in a temporary (or, on
    an accelerator, go through the gathered buffer); the rest cannot change before they are read
    and are copied directly, which halves their traffic. A staged run is held aside in every
    layer at once: its blocks' ``block_bytes`` each.
    """
    _check_store(store, "store")
    num_blocks = store.num_blocks
    plan = normalize_pairs(pairs, num_blocks, num_blocks)
    _check_distinct_destinations(plan)
    plan = [(src, dst) for src, dst in plan if src != dst]  # a copy onto itself is a no-op
    if not plan:
        return
    _copy_within_device(store, store, plan)


def _copy_within_device(src: KVStore, dst: KVStore, plan: Sequence[tuple[int, int]]) -> None:
    """Every pair's block, all layers, from ``src`` to ``dst`` on one device; reads before
    writes when the two are the same store. Destinations are distinct."""
    written = {d for _, d in plan} if src is dst else set()
    if written.isdisjoint([s for s, _ in plan]):
        written = set()  # no source is also written: nothing has to be read aside
    source_bytes = _byte_blocks(src)
    if source_bytes is not None:
        destination_bytes = source_bytes if src is dst else HostBlocks.of(dst)
        copy_runs(source_bytes, destination_bytes, *_split_staged(_spans(plan), written))
        # Bytes written this way bypass torch's count of in-place writes: bumped as a torch op
        # would, so that anything that saved a store tensor sees it changed.
        torch.autograd.graph.increment_version(destination_bytes.written)
        return
    runs = coalesce_runs(plan)
    if len(runs) > MAX_RUNS and src.device.type != "cpu":
        _gather_scatter(src.tensors(), dst.tensors(), plan, src.device)
        return
    # A run is one slab of every layer (``KVStore.blocks``): one copy_ moves it all.
    source, destination = src.blocks, dst.blocks
    direct, staged = _split_staged(runs, written)
    temps = [source[r.src : r.src + r.length].clone() for r in staged]
    for r in direct:
        destination[r.dst : r.dst + r.length].copy_(source[r.src : r.src + r.length])
    for r, temp in zip(staged, temps, strict=True):
        destination[r.dst : r.dst + r.length].copy_(temp)


def _gather_scatter(
    sources: Sequence[torch.Tensor],
    destinations: Sequence[torch.Tensor],
    plan: Sequence[tuple[int, int]],
    device: torch.device,
) -> None:
    """For each tensor pair: every source row into one buffer, then the buffer into the
    destination rows (one device; destinations distinct)."""
    src_index = torch.tensor([s for s, _ in plan], dtype=torch.int64).to(device)
    dst_index = torch.tensor([d for _, d in plan], dtype=torch.int64).to(device)
    for source, destination in zip(sources, destinations, strict=True):
        gathered = _row_view(source).index_select(0, src_index)
        _row_view(destination).index_copy_(0, dst_index, gathered)


# --- swap between devices -----------------------------------------------------------------------


def _wait_for(device: torch.device) -> None:
    """Block the host until ``device``'s current stream has drained (no-op for host devices)."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None and device.type == accelerator.type:
        torch.accelerator.current_stream(device).synchronize()


def swap_blocks(src: KVStore, dst: KVStore, pairs: PairsLike) -> None:
    """Copy block ``s`` of ``src`` into block ``d`` of ``dst`` for every pair, all layers, K and V.

    Copies between devices are issued ``non_blocking`` so that the runs queue up back to back
    instead of each waiting for the one before; when a host buffer takes part, the call waits
    once at the end, so that on return the host side may be read (GPU->CPU) or reused (CPU->GPU).
    Copies to a device are ordered on its current stream like any other kernel.
    """
    _check_store(src, "src")
    _check_store(dst, "dst")
    mismatch = src.same_layout(dst)
    if mismatch is not None:
        raise InvalidArgumentError(f"src and dst stores have different layouts: {mismatch}")
    plan = normalize_pairs(pairs, src.num_blocks, dst.num_blocks)
    _check_distinct_destinations(plan)
    if src is dst:
        copy_blocks(src, plan)  # same tensors: needs copy_blocks' read-before-write staging
        return
    if not plan:
        return
    if src.device == dst.device:
        _copy_within_device(src, dst, plan)
        return
    source, destination = src.blocks, dst.blocks
    for r in coalesce_runs(plan):  # one contiguous slab of every layer on each side
        destination[r.dst : r.dst + r.length].copy_(
            source[r.src : r.src + r.length], non_blocking=True
        )
    if src.device.type == "cpu":
        _wait_for(dst.device)
    elif dst.device.type == "cpu":
        _wait_for(src.device)


# --- in-place exchange (defragmentation) --------------------------------------------------------


def _check_pad_sizes(pad_sizes: object) -> tuple[int, ...]:
    if pad_sizes is DEFAULT_PAD_SIZES:  # a tuple: checked once, below
        return _DEFAULT_PAD_SIZES_SORTED
    if (
        isinstance(pad_sizes, str | bytes)
        or not isinstance(pad_sizes, Sequence)
        or not pad_sizes
        or not all(
            isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= MAX_BLOCKS
            for p in pad_sizes
        )
    ):  # a batch holds at most half a store's blocks, and a store at most MAX_BLOCKS
        raise InvalidArgumentError(
            f"pad_sizes must be a non-empty sequence of ints from 1 to {MAX_BLOCKS},"
            f" got {pad_sizes!r}"
        )
    return tuple(sorted(set(pad_sizes)))


_DEFAULT_PAD_SIZES_SORTED = _check_pad_sizes(list(DEFAULT_PAD_SIZES))


def _check_disjoint(pairs: Sequence[tuple[int, int]]) -> None:
    """An exchange batch is a set of disjoint transpositions; anything else has no single answer
    (``(1, 2), (2, 3)`` gives a different result per order) and breaks the padding argument."""
    if len(pairs) == 1 and pairs[0][0] != pairs[0][1]:  # one pair: no set to build
        return
    if len({block for pair in pairs for block in pair}) == 2 * len(pairs):
        return
    seen: set[int] = set()
    for a, b in pairs:
        for block in (a, b):
            if block in seen:
                raise InvalidArgumentError(
                    f"block {block} appears more than once (pair ({a}, {b})); exchange pairs "
                    "must be disjoint"
                )
            seen.add(block)


def padded_batches(
    pairs: Sequence[tuple[int, int]], pad_sizes: Sequence[int]
) -> list[list[tuple[int, int]]]:
    """Chunks of at most the largest pad size, each padded to the smallest size that holds it.

    Padding repeats the chunk's first pair. The exchange gathers every block of the batch before
    scattering any, so a repeated ``(a, b)`` writes the old ``b`` to ``a`` and the old ``a`` to
    ``b`` again: the same bytes to the same place as the real pair, whichever write lands last.
    It is therefore a no-op without needing a scratch block. (Padding with ``(x, x)`` for a
    listed ``x`` would *not* be: it would race the old ``x`` against the pair's new value.)
    """
    sizes = sorted(pad_sizes)
    largest = sizes[-1]
    batches: list[list[tuple[int, int]]] = []
    for start in range(0, len(pairs), largest):
        chunk = list(pairs[start : start + largest])
        target = padded_size(len(chunk), sizes)
        batches.append(chunk + [chunk[0]] * (target - len(chunk)))
    return batches


def _row_view(cache: torch.Tensor) -> torch.Tensor:
    """``cache`` as ``[num_blocks, words]`` of the widest word that tiles a block.

    The index kernels copy element by element, so wide words make them fast. The widest is
    ``complex128`` (16 bytes): the kernels only assign elements, never compute with them, and an
    assignment moves the bits as they are whatever they would mean as a number. Moving bits
    rather than values is also what makes every dtype work, those whose index kernels are
    missing included (float8 on CPU).
    """
    rows = cache.view(cache.shape[0], -1).view(torch.uint8)
    for word in (torch.complex128, torch.int64, torch.int32, torch.int16):
        if rows.shape[1] % word.itemsize == 0:
            return rows.view(word)
    return rows


def exchange_batch(
    rows: Sequence[torch.Tensor], gather: torch.Tensor, scatter: torch.Tensor, buffer: torch.Tensor
) -> None:
    """The fixed-shape kernel: ``rows[scatter] = rows[gather]`` with all reads before all writes.

    ``gather`` is ``srcs ++ dsts`` and ``scatter`` is ``dsts ++ srcs``; its shapes depend only on
    the padded batch size, which is what a compiled or graphed version needs.
    """
    for cache in rows:
        torch.index_select(cache, 0, gather, out=buffer)
        cache.index_copy_(0, scatter, buffer)


def _lone_pair_bytes(store: object, pairs: object, pad_sizes: object) -> HostBlocks | None:
    """The store's bytes when the call is a batch of one valid pair of plain ints with the
    default padding on the byte path, else None (the general path then checks, and raises in its
    order). A defragmenter hands out many one-pair batches, for which the general checks and
    planning cost half as much as the three slab copies themselves."""
    if type(pairs) is not list or len(pairs) != 1 or pad_sizes is not DEFAULT_PAD_SIZES:
        return None
    pair = pairs[0]
    if type(pair) is not tuple or len(pair) != 2 or type(store) is not KVStore:
        return None
    a, b = pair
    if type(a) is int and type(b) is int and a != b and 0 <= a < store.num_blocks > b >= 0:
        return _byte_blocks(store)
    return None


def swap_blocks_in_place(
    store: KVStore,
    pairs: PairsLike,
    pad_sizes: Sequence[int] = DEFAULT_PAD_SIZES,
) -> None:
    """Exchange the contents of blocks ``a`` and ``b`` for every pair, all layers, K and V.

    A true exchange, not a one-way move: the block a defragmenter moves a live block onto may be
    free but still hold cached KV that a later prefix hit will read, so both must survive.
    """
    as_bytes = _lone_pair_bytes(store, pairs, pad_sizes)
    if as_bytes is not None:
        exchange_one(as_bytes, *pairs[0])
        torch.autograd.graph.increment_version(as_bytes.written)
        return
    _check_store(store, "store")
    sizes = _check_pad_sizes(pad_sizes)
    num_blocks = store.num_blocks
    plan = normalize_pairs(pairs, num_blocks, num_blocks)
    _check_disjoint(plan)
    if not plan:
        return
    as_bytes = _byte_blocks(store)
    if as_bytes is not None:
        exchange_runs(as_bytes, _spans(plan))
        torch.autograd.graph.increment_version(as_bytes.written)
        return
    rows = [_row_view(cache) for cache in store.tensors()]
    row_bytes = rows[0].shape[1] * rows[0].element_size()
    fitting = [size for size in sizes if 2 * size * row_bytes <= EXCHANGE_BUFFER_BYTES]
    buffers: dict[int, torch.Tensor] = {}
    for batch in padded_batches(plan, fitting or sizes[:1]):
        srcs = [a for a, _ in batch]
        dsts = [b for _, b in batch]
        index = torch.tensor([srcs + dsts, dsts + srcs], dtype=torch.int64).to(store.device)
        size = len(batch)
        if size not in buffers:
            buffers[size] = rows[0].new_empty((2 * size, rows[0].shape[1]))
        exchange_batch(rows, index[0], index[1], buffers[size])
