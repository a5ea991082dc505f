"""The request level's figure: a serving-like stream of ``RequestKVManager`` calls replayed on
the optimized manager and on the reference, interleaved, and the ratio of their times.

The stream: 64 requests, each a shared system prompt (one of 8) and its own user turn, admitted
through ``get_computed_blocks`` + ``allocate_slots`` (so most hit the cache), their prompts
prefilled in chunks under a per-step token budget, then 200 decode steps each (a fifth of them
speculative: a few draft tokens and lookahead slots a step, some drafts accepted), then freed;
half way, every request is admitted. It is recorded once, by a small scheduler driving the
optimized manager, and the recording is checked on both managers (every answer equal) before it
is timed. Per repetition each manager replays it once (CPU time, the collector kept off the
recording), one after the other, so both see the same machine; the ratio of each repetition
is kept. A separate pass times the single-token decode ``allocate_slots`` calls alone.

    python -m pagedkv.model_tests.bench.requests_level [--repeat 5] [--groups full|hybrid]

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pagedkv.model_tests.bench.replay import stream_frozen
from pagedkv.model_tests.bench.report import Spread
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls
from pagedkv.specs.interface import RequestKVManager
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_types import AttentionKind, KVGroup, Request, RequestConfig

GROUPS: dict[str, tuple[KVGroup, ...]] = {
    "full": (KVGroup(),),
    "hybrid": (KVGroup(), KVGroup(AttentionKind.SLIDING_WINDOW, 256)),
}
BLOCK_SIZE = 16
NUM_REQUESTS = 64
DECODE_STEPS = 200
STEP_TOKEN_BUDGET = 2048
MAX_CHUNK = 512


@dataclass
class _Running:
    request: Request
    decoded: int = 0
    speculative: bool = False


def _prompts(rng: random.Random, num_requests: int) -> list[tuple[int, ...]]:
    systems = [
        tuple(rng.randrange(100, 32_000) for _ in range(rng.randint(128, 384))) for _ in range(8)
    ]
    return [
        rng.choice(systems)
        + tuple(rng.randrange(100, 32_000) for _ in range(int(rng.lognormvariate(5.3, 0.5))))
        for _ in range(num_requests)
    ]


def record(
    groups: str,
    seed: int = 0,
    num_requests: int = NUM_REQUESTS,
    decode_steps: int = DECODE_STEPS,
) -> tuple[RequestConfig, list[RequestCall[Any]]]:
    """The stream, as the calls a small v1-style scheduler made to the optimized manager."""
    rng = random.Random(seed)
    config = RequestConfig(num_blocks=8192, block_size=BLOCK_SIZE, groups=GROUPS[groups])
    manager = RequestManager(config)
    calls: list[RequestCall[Any]] = []

    def run(call: RequestCall[Any]) -> Any:
        calls.append(call)
        return call.method(manager)(*call.args)

    waiting = [
        Request(f"req-{number}", prompt, len(prompt))
        for number, prompt in enumerate(_prompts(rng, num_requests))
    ]
    running: list[_Running] = []
    while waiting or running:
        budget = STEP_TOKEN_BUDGET
        for state in list(running):
            request = state.request
            remaining = request.num_tokens - request.num_computed_tokens
            if remaining > 1:  # prefill, in chunks
                chunk = min(remaining, MAX_CHUNK, budget)
                if chunk <= 0:
                    continue
                assert run(request_calls.allocate_slots(request, chunk)) is not None
                budget -= chunk
                state.request = replace(
                    request, num_computed_tokens=request.num_computed_tokens + chunk
                )
                continue
            drafts = rng.randint(1, 3) if state.speculative else 0
            answer = run(request_calls.allocate_slots(request, 1 + drafts, 0, None, drafts))
            assert answer is not None
            budget -= 1 + drafts
            accepted = rng.randint(0, drafts)
            new = tuple(rng.randrange(100, 32_000) for _ in range(1 + accepted))
            state.request = replace(
                request,
                tokens=request.tokens + new,
                num_computed_tokens=request.num_tokens + accepted,
            )
            state.decoded += 1
            if state.decoded == decode_steps:
                run(request_calls.free(request.request_id))
                running.remove(state)
        while waiting and budget > 0:
            request = waiting.pop(0)
            hit, length = run(request_calls.get_computed_blocks(request))
            chunk = min(request.num_tokens - length, MAX_CHUNK, budget)
            assert run(request_calls.allocate_slots(request, chunk, length, hit)) is not None
            budget -= chunk
            computed = replace(request, num_computed_tokens=length + chunk)
            running.append(_Running(computed, speculative=rng.random() < 0.2))
        run(request_calls.take_events())
    return config, calls


Factory = Callable[[RequestConfig], RequestKVManager]
SIDES: dict[str, Factory] = {"reference": ReferenceRequestKVManager, "optimized": RequestManager}


def check(config: RequestConfig, calls: Sequence[RequestCall[Any]]) -> None:
    """Both managers answer every call of the stream alike and end in equal states."""
    managers = [factory(config) for factory in SIDES.values()]
    for number, call in enumerate(calls):
        answers = [call.method(manager)(*call.args) for manager in managers]
        if answers[0] != answers[1]:
            raise AssertionError(f"call {number} {call.name}: {answers[0]!r} != {answers[1]!r}")
    if managers[0].view().comparable() != managers[1].view().comparable():
        raise AssertionError("the managers end in different states")


def replay_seconds(
    factory: Factory, config: RequestConfig, calls: Sequence[RequestCall[Any]]
) -> float:
    manager = factory(config)
    bound = [(call.method(manager), call.args) for call in calls]
    with stream_frozen():
        start = time.process_time()
        for method, args in bound:
            method(*args)
        return time.process_time() - start


def decode_microseconds(
    factory: Factory, config: RequestConfig, calls: Sequence[RequestCall[Any]]
) -> float:
    """The CPU time of a one-token ``allocate_slots`` of a running request, in µs: the stream
    replayed with this process's CPU clock read around each run of consecutive such calls (a
    step's decodes), the runs' times summed over their calls. Read around each call, the clock
    would cost more than the call."""
    manager = factory(config)
    clock = time.process_time_ns
    spent = 0
    count = 0
    with stream_frozen():
        for decode, run in itertools.groupby(calls, key=is_decode):
            bound = [(call.method(manager), call.args) for call in run]
            start = clock()
            for method, args in bound:
                method(*args)
            if decode:
                spent += clock() - start
                count += len(bound)
    return spent / count / 1e3


def is_decode(call: RequestCall[Any]) -> bool:
    return call.name == "allocate_slots" and call.args[1:] == (1, 0, None, 0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--groups", choices=sorted(GROUPS), default="full")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    config, calls = record(options.groups, options.seed)
    check(config, calls)
    decodes = sum(1 for call in calls if is_decode(call))
    print(
        f"stream ({options.groups}): {len(calls)} calls, {decodes} single-token decodes,"
        f" {NUM_REQUESTS} requests, block size {BLOCK_SIZE}; answers equal on both sides"
    )
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    decode: dict[str, list[float]] = {name: [] for name in SIDES}
    ratios: list[float] = []
    for _ in range(options.repeat):
        for name, factory in SIDES.items():
            times[name].append(replay_seconds(factory, config, calls))
            decode[name].append(decode_microseconds(factory, config, calls))
        ratios.append(times["reference"][-1] / times["optimized"][-1])
    for name in SIDES:
        spread, per_call = Spread.of(times[name]), Spread.of(decode[name])
        print(
            f"  {name:>9}: {spread.median:8.3f} s CPU (min {spread.low:.3f},"
            f" max {spread.high:.3f}); {per_call.median:6.1f} µs CPU per one-token decode"
            f" allocate_slots (min {per_call.low:.1f}, max {per_call.high:.1f})"
        )
    ratio = Spread.of(ratios)
    print(
        f"  reference / optimized: {ratio.median:.1f}x (min {ratio.low:.1f}, max {ratio.high:.1f},"
        f" {ratio.count} interleaved repetitions)"
    )


if __name__ == "__main__":
    main()
