"""An exhaustive small-scope check: every sequence of steps up to a depth, over tiny managers.

Hypothesis samples; this visits. For each tiny configuration (a few blocks per device, blocks of
one or two tokens, the sliding window on or off, prefix caching on or off) the explorer goes
breadth first over every step a scheduler could take from each state, with two sequences at most
and a two-token alphabet: allocate a prompt, append a token (or a lookahead slot), fork, free,
swap out and in, mark computed, access at the current or the next time, reset the prefix cache.
Every step runs on the reference and on the optimized manager (exact mode, ``call_both``: the
same result or the same typed error, and an error changes nothing), and after it both must show
the same state and satisfy I1-I4 (``pagedkv.specs.invariants``, ``mapping_problems``,
``held_references``); I5 is checked on the reference's abstract KV, written by the same stand-in
model as the machine's; I7's promises are checked at each ``can_*`` step.

States are deduplicated by a canonical form: block ids up to renaming (first appearance through
the tables, then cached blocks by hash; free blocks are blank and unnamed), sequence and group ids
up to renaming, access times up to an order-preserving renaming, and the hit counters left out
(they steer nothing). Each transition is compared before its state is deduplicated, so a merged
state was still checked; what merging gives up is exploring its successors under other ids, which
the spec's rules (lowest free id aside) do not tell apart.

    python -m pagedkv.model_tests.machines.explorer [--seconds S] [--max-depth D] [--scope
    full|quick]
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pagedkv.model_tests.lockstep.calls import assert_same_state, call_both
from pagedkv.model_tests.machines.explorer_forms import canonical_form, exact_form
from pagedkv.model_tests.machines.explorer_space import Step, scopes, steps
from pagedkv.model_tests.machines.kv_harness import (
    AbstractKV,
    CachedPrefixes,
    Writer,
    expected_kv,
    kv_problems,
)
from pagedkv.model_tests.machines.manager_machine import (
    held_references,
    mapping_problems,
    pair_problems,
)
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.reference.kv_model import EMPTY, KVModel
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.manager_state import ManagerState
from pagedkv.specs import invariants
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.types import AllocStatus, Device, ManagerConfig

T = TypeVar("T")

__all__ = [
    "Explorer",
    "Figures",
    "Finding",
    "Node",
    "Step",
    "describe",
    "main",
    "positive",
    "run",
    "scopes",
    "steps",
]


class Finding(AssertionError):
    """A divergence or a broken invariant, with the steps that reach it from a new manager."""

    def __init__(self, config: ManagerConfig, path: Sequence[Step], problem: str) -> None:
        steps = "\n".join(f"  {i + 1}. {step}" for i, step in enumerate(path))
        super().__init__(f"{config}\n{steps}\n{problem}")
        self.path = list(path)


@dataclass
class Node:
    """One explored state: both managers, the reference's KV, and how it was reached."""

    state: ManagerState
    target: BlockSpaceManager
    kv: KVModel
    path: tuple[Step, ...]


@dataclass
class Explorer:
    """Breadth-first exploration of one configuration; ``make_target`` builds the manager under
    test (the optimized one unless a test plants another)."""

    config: ManagerConfig
    make_target: Callable[[ManagerConfig], BlockSpaceManager] = OptimizedBlockSpaceManager
    renaming: bool = True
    seen: set[str] = field(default_factory=set)
    transitions: int = 0
    depth: int = 0
    closed: bool = False
    prefixes: CachedPrefixes = field(default_factory=CachedPrefixes)

    def __post_init__(self) -> None:
        self.model = ReferenceBlockSpaceManager(self.config)
        root = Node(self.model.state, self.make_target(self.config), EMPTY, ())
        self.check(root, self.model.view())
        self.seen.add(self.key(self.model.view(), EMPTY))
        self.frontier = [root]

    # --- one step --------------------------------------------------------------------------

    def apply(self, node: Node, step: Step) -> Node:
        """Run ``step`` on copies of ``node``'s managers, checking every promise on the way."""
        self.model.state = node.state
        target = pickle.loads(pickle.dumps(node.target, pickle.HIGHEST_PROTOCOL))  # a deep copy
        side = AbstractKV(self.config, kv=node.kv)
        kind, *args = step

        def both(call: ManagerCall[T]) -> T | PagedKVError:
            return call_both(self.model, target, call, "manager")

        if kind == "allocate":
            group_id, seq_ids, prompt = args
            status = both(calls.can_allocate(list(prompt)))
            result = both(calls.allocate(group_id, list(seq_ids), list(prompt)))
            self.promise(
                status is not AllocStatus.OK or not isinstance(result, PagedKVError),
                node,
                step,
                f"can_allocate OK, then {result!r}",
            )
            if status is AllocStatus.NEVER:
                fresh = ReferenceBlockSpaceManager(self.config).can_allocate(list(prompt))
                self.promise(
                    fresh is AllocStatus.NEVER,
                    node,
                    step,
                    "a NEVER that an empty manager would not say",
                )
            if not isinstance(result, PagedKVError):
                view = self.model.view()
                for seq_id in seq_ids:
                    Writer(side).write_tokens(view, seq_id, range(len(prompt)))
        elif kind == "append":
            seq_id, tokens, lookahead = args
            group_id = self.model.view().seqs[seq_id].group_id
            allowed = both(calls.can_append_slots(group_id, len(tokens), lookahead))
            start = len(self.model.view().seqs[seq_id].tokens)
            pairs = both(calls.append_slots(seq_id, list(tokens), lookahead))
            self.promise(
                allowed is not True or not isinstance(pairs, PagedKVError),
                node,
                step,
                f"can_append_slots yes, then {pairs!r}",
            )
            if isinstance(pairs, list):
                self.promise(
                    not pair_problems(pairs, "copy-on-write", each_block_once=False),
                    node,
                    step,
                    f"copy pairs {pairs}",
                )
                side.run_copies(pairs)
                Writer(side).write_tokens(
                    self.model.view(), seq_id, range(start, start + len(tokens))
                )
        elif kind in ("swap_out", "swap_in"):
            (group_id,) = args
            if kind == "swap_out":
                status, to = both(calls.can_swap_out(group_id)), Device.CPU
                swap = calls.swap_out(group_id)
            else:
                status, to = both(calls.can_swap_in(group_id)), Device.GPU
                swap = calls.swap_in(group_id)
            pairs = both(swap)
            if status is AllocStatus.OK:
                self.promise(isinstance(pairs, list), node, step, f"{kind}: OK, then {pairs!r}")
            if status is AllocStatus.NEVER and kind == "swap_out":
                self.promise(
                    isinstance(pairs, OutOfBlocksError), node, step, "a NEVER swap out succeeded"
                )
            if isinstance(pairs, list):
                self.promise(
                    not pair_problems(pairs, kind, each_block_once=True),
                    node,
                    step,
                    f"swap pairs {pairs}",
                )
                side.run_swap(pairs, to)
        elif kind == "fork":
            both(calls.fork(*args))
        elif kind == "free":
            both(calls.free(*args))
        elif kind == "access":
            both(calls.access_all_blocks_in_seq(*args))
        elif kind == "mark_computed":
            both(calls.mark_blocks_as_computed(*args))
        elif kind == "reset":
            both(calls.reset_prefix_cache(None))
        else:  # pragma: no cover - steps() yields only the kinds above
            raise ValueError(f"unknown step {step}")
        return Node(self.model.state, target, side.kv, (*node.path, step))

    def promise(self, kept: bool, node: Node, step: Step, problem: str) -> None:
        if not kept:
            raise Finding(self.config, (*node.path, step), f"broken promise (I7): {problem}")

    def check(self, node: Node, view: ManagerView) -> None:
        """Exact sameness, I1-I5 and the queries, in ``node``'s state."""
        target = node.target
        assert_same_state(self.model.view(), target.view(), "manager state")
        problems = mapping_problems(view)
        for device in Device:
            pool = view.pool(device)
            problems += invariants.ref_counts(pool, held_references(view, device))
            problems += invariants.pool_invariants(pool)
        self.prefixes.record(view)
        problems += kv_problems(
            AbstractKV(self.config, kv=node.kv), expected_kv(view, self.prefixes)
        )
        if problems:
            raise Finding(self.config, node.path, "; ".join(problems))
        queries: list[ManagerCall[object]] = [
            calls.get_num_free_gpu_blocks(),
            calls.get_num_free_cpu_blocks(),
            calls.get_prefix_cache_hit_rate(Device.GPU),
            calls.get_prefix_cache_hit_rate(Device.CPU),
            calls.get_common_computed_block_ids(sorted(view.seqs)),
        ]
        for seq_id in sorted(view.seqs):
            queries += [calls.get_block_table(seq_id), calls.get_num_cached_tokens(seq_id)]
        for group_id in sorted(view.groups):
            queries.append(calls.get_cross_block_table(group_id))
        for query in queries:
            call_both(self.model, target, query, "manager")

    # --- breadth first ---------------------------------------------------------------------

    def explore(self, deadline: float, max_depth: int | None = None) -> None:
        """Expand whole levels until the deadline, ``max_depth``, or no new state is left."""
        while self.frontier and (max_depth is None or self.depth < max_depth):
            next_level: list[Node] = []
            for node in self.frontier:
                if time.monotonic() > deadline:
                    return
                self.model.state = node.state
                for step in list(steps(self.model.view())):
                    try:
                        child = self.visit(node, step)
                    except Finding:
                        raise
                    except Exception as error:  # a divergence, or a crash of either side
                        raise Finding(self.config, (*node.path, step), repr(error)) from error
                    if child is not None:
                        next_level.append(child)
            self.frontier = next_level
            self.depth += 1
        self.closed = not self.frontier

    def visit(self, node: Node, step: Step) -> Node | None:
        """Take ``step`` from ``node``; the new state, checked, or None when it was seen."""
        child = self.apply(node, step)
        self.transitions += 1
        self.model.state = child.state
        view = self.model.view()
        key = self.key(view, child.kv)
        if key in self.seen:
            return None
        self.check(child, view)
        self.seen.add(key)
        return child

    # --- canonical form --------------------------------------------------------------------

    def key(self, view: ManagerView, kv: KVModel) -> str:
        if not self.renaming:
            return repr((exact_form(view), sorted(kv.items(), key=repr)))
        orders = itertools.permutations(sorted(view.seqs))
        return min(repr(canonical_form(view, kv, order)) for order in orders)


# --- the command -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    config: ManagerConfig
    states: int
    transitions: int
    depth: int
    closed: bool
    seconds: float


def run(
    config: ManagerConfig,
    seconds: float,
    max_depth: int | None = None,
    renaming: bool = True,
    make_target: Callable[[ManagerConfig], BlockSpaceManager] = OptimizedBlockSpaceManager,
) -> Figures:
    started = time.monotonic()
    explorer = Explorer(config, make_target, renaming)
    explorer.explore(started + seconds, max_depth)
    return Figures(
        config,
        len(explorer.seen),
        explorer.transitions,
        explorer.depth,
        explorer.closed,
        time.monotonic() - started,
    )


def positive(kind: Callable[[str], float]) -> Callable[[str], Any]:
    """An argparse type for a number > 0 (a budget of 0 would check nothing and pass)."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def describe(config: ManagerConfig) -> str:
    window = "-" if config.sliding_window is None else str(config.sliding_window)
    return (
        f"bs={config.block_size} gpu={config.num_gpu_blocks} cpu={config.num_cpu_blocks}"
        f" window={window:<2} caching={'on ' if config.enable_caching else 'off'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="exhaustive small-scope check")
    parser.add_argument(
        "--seconds", type=positive(float), default=20.0, help="time per configuration"
    )
    parser.add_argument("--max-depth", type=positive(int), default=None)
    parser.add_argument("--scope", choices=["full", "quick"], default="full")
    parser.add_argument("--exact-ids", action="store_true", help="no renaming of block ids")
    args = parser.parse_args(argv)
    print(
        f"breadth first, {args.seconds:g} s per configuration"
        f"{'' if args.max_depth is None else f', depth <= {args.max_depth}'},"
        f" dedup {'by exact state' if args.exact_ids else 'up to renaming'}"
    )
    print(f"{'configuration':<44} {'states':>8} {'transitions':>12} {'depth':>6}  closed  seconds")
    totals = [0, 0]
    for config in scopes(args.scope):
        try:
            figures = run(config, args.seconds, args.max_depth, not args.exact_ids)
        except Finding as finding:
            print(f"FAIL {describe(config)}\n{finding}")
            return 1
        totals[0] += figures.states
        totals[1] += figures.transitions
        print(
            f"{describe(config):<44} {figures.states:>8} {figures.transitions:>12}"
            f" {figures.depth:>6}  {'yes' if figures.closed else 'no ':<6}  {figures.seconds:7.1f}"
        )
    print(f"{'all':<44} {totals[0]:>8} {totals[1]:>12}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
