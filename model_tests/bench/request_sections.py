"""The request level in ``pagedkv bench``: the serving-like stream of ``requests_level.py``
replayed through pagedkv's optimized request manager and through each other request-level
manager the caller hands in (vLLM 0.33.0's own ``KVCacheManager``, driven as vLLM's scheduler
drives it: ``model_tests/peers/vllm_v1_replay.py``), interleaved, with the ratio of their times.

Each side builds its manager and whatever its replay needs before the clock starts (a fresh one
every repetition), then replays every call once on this process's CPU clock, keeping each
answer (both sides alike). The answers are compared with pagedkv's, call by call (block ids per
group, hit lengths, the kinds and sizes of the events): a side that answers otherwise is timed
all the same, its differences counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pagedkv.model_tests.bench import requests_level
from pagedkv.model_tests.bench.replay import stream_frozen
from pagedkv.model_tests.bench.report import Section, Spread, Table, load_average
from pagedkv.model_tests.bench.sections import Context
from pagedkv.model_tests.oracle import targets
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_types import RequestConfig

Replay = Callable[[], list[Any]]
"""One replay of the stream, timed: each call's answer, as the manager gave it."""


class RequestSide(Protocol):
    """A request-level manager the stream is replayed through."""

    name: str

    def prepare(self, config: RequestConfig, calls: Sequence[RequestCall[Any]]) -> Replay:
        """A fresh manager and all a replay needs, built before the clock starts."""
        ...

    def digest(self, name: str, answer: Any) -> Any:
        """The answer to call ``name`` as ``digest`` shapes pagedkv's."""
        ...


def digest(name: str, answer: Any) -> Any:
    """What the sides are compared on: block ids per group (and the hit's length), and per
    event its kind and how many blocks it names (each engine names blocks by its own hashes)."""
    if answer is None or name == "free":
        return None
    if name == "get_computed_blocks":
        blocks, length = answer
        return tuple(map(tuple, blocks)), length
    if name == "take_events":
        return tuple((type(e).__name__, len(getattr(e, "block_hashes", ()))) for e in answer)
    return tuple(map(tuple, answer))


class PagedkvSide:
    """pagedkv's optimized request manager (``optimized/request_manager.py``)."""

    name = "pagedkv optimized"

    def prepare(self, config: RequestConfig, calls: Sequence[RequestCall[Any]]) -> Replay:
        manager = RequestManager(config)
        bound = [(call.method(manager), call.args) for call in calls]
        return lambda: [method(*args) for method, args in bound]

    def digest(self, name: str, answer: Any) -> Any:
        return digest(name, answer)


def _seconds(side: RequestSide, config: RequestConfig, calls: Sequence[RequestCall[Any]]) -> float:
    replay = side.prepare(config, calls)
    with stream_frozen():
        start = time.process_time()
        replay()
        return time.process_time() - start


def requests_section(context: Context) -> Section:
    options = context.options
    section = Section("requests")
    if not options.requests:
        return section
    quick = options.quick
    config, calls = requests_level.record(
        "full",
        options.seed,
        num_requests=8 if quick else requests_level.NUM_REQUESTS,
        decode_steps=20 if quick else requests_level.DECODE_STEPS,
    )
    pagedkv = PagedkvSide()
    sides: list[RequestSide] = [pagedkv]
    names = [call.name for call in calls]
    expected = [digest(n, a) for n, a in zip(names, pagedkv.prepare(config, calls)(), strict=True)]
    agreement: dict[str, tuple[int, str]] = {}
    skipped: list[str] = []
    for spec in options.request_sides:
        try:
            make: Any = targets.load(spec, "request")
            side: RequestSide = make()
            answers = side.prepare(config, calls)()
        except Exception as error:  # its engine's files missing, or it cannot replay
            skipped.append(f"{spec}: not timed: {error}")
            continue
        sides.append(side)
        differing = [
            number
            for number, (name, mine, theirs) in enumerate(
                zip(names, expected, answers, strict=True), 1
            )
            if side.digest(name, theirs) != mine
        ]
        first = f"; first: call {differing[0]}, {names[differing[0] - 1]}" if differing else ""
        shown = f"{len(differing)} differ{first}" if differing else "alike"
        agreement[side.name] = (len(differing), shown)
    repetitions = options.repetitions
    seconds: dict[str, list[float]] = {side.name: [] for side in sides}
    for round_ in range(repetitions):
        for side in sides if round_ % 2 == 0 else reversed(sides):
            seconds[side.name].append(_seconds(side, config, calls))
    load = load_average()
    decodes = sum(1 for call in calls if requests_level.is_decode(call))
    table = Table(
        f"request level: {len(calls)} calls ({decodes} one-token decodes,"
        f" {8 if quick else requests_level.NUM_REQUESTS} requests, full attention, block size"
        f" {config.block_size}); median [min, max] of {repetitions} interleaved repetition(s)",
        ["manager", "calls", "CPU s", "µs/call", "× pagedkv optimized", "answers", "load"],
    )
    data: dict[str, Any] = {"calls": len(calls), "managers": {}}
    base = seconds[pagedkv.name]
    for side in sides:
        mine = seconds[side.name]
        ratio = Spread.of([t / b for t, b in zip(mine, base, strict=True)])
        spread = Spread.of(mine)
        differ, shown = agreement.get(side.name, (0, "(the recording)"))
        table.rows.append(
            [side.name, len(calls), spread, spread.scaled(1e6 / len(calls)), ratio, shown, load]
        )
        data["managers"][side.name] = {
            "seconds": spread.as_json(),
            "ratio_to_pagedkv": ratio.as_json(),
            "answers_differ": differ,
        }
    table.notes.append(
        "each side's manager and replay are built before the clock starts; the replay keeps"
        " every answer on both sides; vLLM's side times what its engine does for the requests:"
        " each Request made when it arrives (its prompt's block hashes), its new tokens appended"
        " (their block hashes), then the KVCacheManager calls"
    )
    table.notes.extend(skipped)
    section.tables.append(table)
    section.data = data
    context.facts["requests"] = data
    return section
