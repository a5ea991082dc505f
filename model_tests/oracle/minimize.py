"""Delete steps from a failing trace while it still fails the same way (delta debugging).

Hypothesis shrinks the *choices* that drive a machine, and some steps survive that it cannot
delete without changing how the rest is drawn (a no-op ``defragment``, a ``bad_configuration``
check, a query whose answer nothing uses). This post-pass works on the recorded calls instead:
Zeller and Hildebrandt's ddmin over every step but the failing one, each candidate replayed
through the same isomorphic session as ``trace.replay`` (expectations recomputed by a fresh
reference, since deleting a step changes what later steps return). A candidate counts only if it
fails the same way: at its last step (the original failing call, kept as it is) and with the same
kind of divergence (``Verdict.kind``); any other failure is a different bug. ddmin ends with
every single-step deletion tried, so the result is 1-minimal: no one step can be removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pagedkv.model_tests.lockstep.capture import RecordedCall
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.codec import CodecError
from pagedkv.model_tests.oracle.trace import Trace, Verdict

MAX_REPLAYS = 2000
"""A bound on the replays one minimization may take (ddmin is quadratic at worst)."""

Item = TypeVar("Item")


def ddmin(items: Sequence[Item], fails: Callable[[list[Item]], bool]) -> list[Item]:
    """A 1-minimal sublist of ``items`` (order kept) for which ``fails`` holds, given that it
    holds for ``items``: remove ever smaller chunks while ``fails`` still holds."""
    kept = list(items)
    granularity = 2
    while kept:
        granularity = min(granularity, len(kept))
        chunks = _split(kept, granularity)
        for index in range(len(chunks)):
            complement = [item for j, chunk in enumerate(chunks) if j != index for item in chunk]
            if fails(complement):
                kept = complement
                granularity = max(granularity - 1, 2)
                break
        else:
            if granularity == len(kept):
                return kept
            granularity = min(len(kept), 2 * granularity)
    return kept


def _split(items: list[Item], parts: int) -> list[list[Item]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks


@dataclass(frozen=True)
class Minimized:
    trace: Trace
    verdict: Verdict
    """The minimized trace's replay: a divergence at its last step."""
    before: int
    """Steps before deleting."""
    replays: int
    complete: bool
    """False if the replay budget ran out first (the trace is smaller, maybe not 1-minimal)."""


def minimize(
    failing: Trace,
    factory: Callable[[Any], Any],
    *,
    budget: int = MAX_REPLAYS,
    same: Callable[[Trace, Verdict], bool] | None = None,
) -> Minimized | None:
    """``failing`` with every step deleted that it can fail without, the same way; None if the
    trace does not fail at its last step when replayed (then there is nothing to keep). ``same``
    narrows what counts as the same way (a check stepping past known differences keeps a
    candidate only if its failure is not one of them, or, for a known class's example, still
    is that one)."""
    original = trace.replay_target(failing, factory)
    count = len(failing.ops)
    if original.status != "divergence" or count == 0 or original.step != count:
        return None
    if same is not None and not same(failing, original):
        return None
    calls: list[RecordedCall] = [(op.op, op.args) for op in failing.ops]
    head, last = calls[:-1], calls[-1]
    replays = 0
    verdicts: dict[int, tuple[Trace, Verdict]] = {}

    def fails(kept: list[RecordedCall]) -> bool:
        nonlocal replays
        if replays >= budget:
            return False
        replays += 1
        try:
            candidate = trace.trace_of_calls(
                failing.level, failing.config, [*kept, last], failing.policy, safety=failing.safety
            )
        except (trace.TraceError, CodecError):
            return False
        verdict = trace.replay_target(candidate, factory)
        alike = (
            verdict.status == "divergence"
            and verdict.step == len(candidate.ops)
            and verdict.kind == original.kind
            and (same is None or same(candidate, verdict))
        )
        if alike:
            verdicts[len(kept)] = (candidate, verdict)
        return alike

    kept = ddmin(head, fails)
    if len(kept) == len(head):
        return Minimized(failing, original, count, replays, replays < budget)
    smallest, verdict = verdicts[len(kept)]
    return Minimized(smallest, verdict, count, replays, replays < budget)
