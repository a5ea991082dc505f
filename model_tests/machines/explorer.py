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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pagedkv.model_tests.lockstep.calls import assert_same_state, call_both
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
from pagedkv.specs.types import NEVER_ACCESSED, AllocStatus, BlockId, Device, ManagerConfig, Token

T = TypeVar("T")

TOKENS: tuple[Token, ...] = (0, 1)
MAX_SEQS = 2

Step = tuple[Any, ...]
"""``(kind, *arguments)``: one step of the scheduler, replayable by ``apply``."""


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


def scopes(kind: str = "full") -> list[ManagerConfig]:
    """The tiny configurations: every combination for ``full``, four corners for ``quick``."""
    if kind == "quick":
        return [
            ManagerConfig(1, 2, 2, 0.0, None, False),
            ManagerConfig(2, 3, 2, 0.0, None, True),
            ManagerConfig(1, 3, 2, 0.0, 2, True),
            ManagerConfig(2, 3, 3, 0.0, 2, False),
        ]
    return [
        ManagerConfig(block_size, blocks, blocks, 0.0, window, caching)
        for block_size, blocks, window, caching in itertools.product(
            (1, 2), (2, 3, 4), (None, 2), (False, True)
        )
    ]


def prompts(config: ManagerConfig) -> list[tuple[Token, ...]]:
    """Every prompt over the alphabet up to one token past a block (so a block fills)."""
    longest = config.block_size + 1
    return [p for n in range(1, longest + 1) for p in itertools.product(TOKENS, repeat=n)]


def clock(view: ManagerView) -> float:
    """The latest access time any block holds (0 before any)."""
    times = [
        v.last_accessed
        for device in Device
        for v in view.pool(device).blocks.values()
        if v.last_accessed != NEVER_ACCESSED
    ]
    return max(times, default=0.0)


def steps(view: ManagerView) -> Iterator[Step]:
    """Every step the scheduler could take from ``view``. A group of two sequences is allocated
    with prompts of one repeated token only (fork makes the others)."""
    seq_ids = sorted(view.seqs)
    free_seq_ids = [s for s in range(1, MAX_SEQS + 1) if s not in view.seqs]
    free_group_ids = [g for g in range(1, MAX_SEQS + 1) if g not in view.groups]
    if free_seq_ids:
        for prompt in prompts(view.config):
            yield ("allocate", free_group_ids[0], (free_seq_ids[0],), prompt)
            if len(free_seq_ids) == MAX_SEQS and set(prompt) == {TOKENS[0]}:
                yield ("allocate", free_group_ids[0], tuple(free_seq_ids), prompt)
        for parent in seq_ids:
            yield ("fork", parent, free_seq_ids[0])
    now = clock(view)
    for seq_id in seq_ids:
        for token in TOKENS:
            yield ("append", seq_id, (token,), 0)
        yield ("append", seq_id, (), 1)
        yield ("free", seq_id)
        yield ("access", seq_id, now)
        yield ("access", seq_id, now + 1.0)
    for group_id in sorted(view.groups):
        yield ("swap_out", group_id)
        yield ("swap_in", group_id)
        yield ("mark_computed", group_id)
    yield ("reset",)


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
            return call_both(self.model, target, call)

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
            call_both(self.model, target, query)

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


def exact_form(view: ManagerView) -> tuple[object, ...]:
    """The state as it is, less the hit counters."""
    pools = tuple((sorted(view.pool(d).blocks.items()), view.pool(d).pending_cows) for d in Device)
    return (pools, sorted(view.seqs.items()), sorted(view.groups.items(), key=repr))


def canonical_form(view: ManagerView, kv: KVModel, order: Sequence[int]) -> tuple[object, ...]:
    """The state with sequences taken in ``order`` and every id renamed by first appearance."""
    names: dict[tuple[Device, BlockId], object] = {}

    def name(device: Device, block: BlockId) -> object:
        if device is Device.GPU and block == view.null_block:
            return "null"
        return names.setdefault((device, block), len(names))

    group_names: dict[int, int] = {}
    seqs = []
    for seq_id in order:
        seq = view.seqs[seq_id]
        group = view.groups[seq.group_id]
        group_index = group_names.setdefault(seq.group_id, len(group_names))
        blocks = tuple(name(group.device, b) for b in seq.blocks)
        seqs.append((group_index, seq.tokens, blocks))
    seq_names = {seq_id: index for index, seq_id in enumerate(order)}
    groups = []
    for group_id in sorted(group_names, key=group_names.__getitem__):
        group = view.groups[group_id]
        members = tuple(seq_names[s] for s in group.seq_ids)
        cross = tuple(name(group.device, b) for b in group.cross_blocks)
        groups.append((members, group.device.value, group.extra_key, group.encoder_tokens, cross))
    times = sorted(
        {
            v.last_accessed
            for d in Device
            for v in view.pool(d).blocks.values()
            if v.last_accessed != NEVER_ACCESSED
        }
    )
    rank = {t: i for i, t in enumerate(times)}
    rank[NEVER_ACCESSED] = -1
    pools = []
    for device in Device:
        pool = view.pool(device)
        cached = sorted(
            (b for b in pool.blocks if b not in pool.free and b not in pool.used),
            key=lambda b: pool.blocks[b].content_hash or b"",
        )
        for block in cached:
            name(device, block)
        held = [b for b in pool.blocks if b not in pool.free]
        pools.append(
            sorted(
                (
                    str(name(device, b)),
                    pool.blocks[b].ref_count,
                    pool.blocks[b].tokens,
                    pool.blocks[b].content_hash,
                    pool.blocks[b].computed,
                    rank[pool.blocks[b].last_accessed],
                )
                for b in held
            )
        )
    slots = sorted(
        (repr((device.value, name(device, block), slot)), content)
        for (device, block, slot), content in kv.items()
        if block not in view.pool(device).free
    )
    return (tuple(seqs), tuple(groups), tuple(map(tuple, pools)), tuple(slots))


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
