"""``make peers``: hold each real peer to the reference under its engine's profile, and to the
safety tier, and print one table.

    python -m pagedkv.model_tests.peers.run fetch
    python -m pagedkv.model_tests.peers.run check [--peer NAME ...] [--steps N] [--seed S]
                                          [--switch NAME ...] [--policy NAME=VALUE ...]
                                          [--groups LAYOUTS] [--traces DIR] [--known [FILE]]

``check`` runs ``pagedkv check``'s search (``run_check``) on each peer at its level: under
its profile (``vllm-v0``, ``vllm-v1``, ``nano-vllm``, ``nano-vllm-upstream``;
``specs/policy.md``), where the reference
makes the engine's choices, and under ``safety:<profile>`` (``specs/safety.md``), where nothing is
compared and only hazards count; then, for an engine with known defects, both again with the
switches that paper over them on, to show what lies behind. The profile names the operations the
engine lacks (never
called) and the adapter declines the configurations it does not serve (``UnsupportedError`` from
its factory: the search draws another), so nothing needs masking. The table gives, per peer and
tier: the verdict, the calls it took to find the first failure, the shrunk trace's length and
the finding. Each trace is written to ``DIR/<peer>.<tier>.jsonl`` (default ``.peers/traces``);
``pagedkv replay`` replays it. ``--switch`` turns on adapter switches (each papers over one known
defect, ``specs/peers.md``), ``--policy`` overrides an option of every peer's profile. Exit code
0 when every peer ran (whatever its verdict), 2 when a peer's files are not fetched or an argument
is wrong.

``--known`` steps past each peer's known defects instead of switching them off (``pagedkv check
--known``, ``specs/oracle.md`` §9): every check runs once, as the engine is, with the peer's
file in ``known/`` (``known/<peer>.toml``, none for a peer without defects; ``--known FILE``
takes one file for every peer chosen), and the table counts the runs that ended on each defect
before giving the next unknown divergence (traces ``DIR/<peer>.<tier>.stepping.jsonl``, each
defect's example ``DIR/<peer>.<tier>.stepping.known-<defect>.jsonl``). ``make peers`` runs both.

A request-level peer is checked once per group layout (``full``, ``window``, ``hybrid``:
``request_layouts.py``), each its own row (``groups`` column) and trace
(``DIR/<peer>.<tier>[...].<layout>.jsonl``): a defect of one layout shows in its row on every
seed instead of in whichever runs happened to draw that layout. ``--groups`` picks the layouts.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pagedkv.model_tests.machines.request_base import RequestMachineBase
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle.check import CheckResult, run_check
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.known import KnownDifferences, KnownError
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS, parse_layouts
from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.nano_vllm_manager import NanoVllmManager
from pagedkv.model_tests.peers.nano_vllm_manager import Switches as NanoSwitches
from pagedkv.model_tests.peers.sglang_radix import factory as sglang_token_radix
from pagedkv.model_tests.peers.sglang_radix import paged_factory as sglang_paged_radix
from pagedkv.model_tests.peers.vllm_v0_manager import Switches as V0ManagerSwitches
from pagedkv.model_tests.peers.vllm_v0_manager import VllmV0Manager
from pagedkv.model_tests.peers.vllm_v0_pool import Switches as V0PoolSwitches
from pagedkv.model_tests.peers.vllm_v0_pool import VllmV0Pool
from pagedkv.model_tests.peers.vllm_v1_manager import Switches as V1ManagerSwitches
from pagedkv.model_tests.peers.vllm_v1_manager import VllmV1Manager
from pagedkv.model_tests.peers.vllm_v1_pool import Switches as V1PoolSwitches
from pagedkv.model_tests.peers.vllm_v1_pool import VllmV1Pool
from pagedkv.specs.operations import LEVELS
from pagedkv.specs.policy import SAFETY, Profile, profile

KNOWN = Path(__file__).resolve().parent / "known"
"""Each peer's known differences, ``<peer>.toml``: its defects of ``specs/peers.md``."""


@dataclass(frozen=True)
class Peer:
    name: str
    level: Level
    profile: str
    """The profile of the engine's choices (``pagedkv.specs.policy.PROFILES``)."""
    adapter: Any
    switches: Any
    """The adapter's ``Switches`` class (all off by default), or None."""
    source: sources.Source
    defects: tuple[tuple[str, str], ...] = ()
    """(defect, switch): the switches that paper over the engine's known defects, named as in
    ``specs/peers.md``. A second round runs with them on, to find what lies behind."""
    always: tuple[str, ...] = ()
    """Switches on in every round: what makes the adapter this peer (upstream nano-vllm is the
    fork's wheel with the fork's one change undone)."""
    known_name: str = ""
    """The known-differences file, ``known/<known_name or name>.toml``."""
    adapt_case: Callable[[Any], Any] | None = None
    """Narrows the machine to the inputs the engine's callers make (its contract:
    ``specs/peers.md``), as ``run_check``'s ``adapt_case``."""
    layouts: tuple[GroupKind, ...] = tuple(LAYOUTS)
    """The request-level group layouts the engine serves (the others it declines)."""

    def rounds(self, switched: Sequence[str]) -> list[tuple[str, ...]]:
        """The switch sets to check with: as the engine is, then past its known defects (or
        just the switches asked for)."""
        if switched:
            return [tuple(switched)]
        past = tuple(switch for _, switch in self.defects)
        return [(), past] if past else [()]

    def label(self, switches: Sequence[str]) -> str:
        names = dict((switch, defect) for defect, switch in self.defects)
        return " ".join(names.get(switch, switch) for switch in switches) or "-"

    def factory(self, switched: Sequence[str] = ()) -> Callable[[Any], Any]:
        if self.switches is None:
            return self.adapter  # type: ignore[no-any-return]
        names = {f.name for f in fields(self.switches)}
        on = (*self.always, *switched)
        chosen = replace(self.switches(), **{n: True for n in on if n in names})
        return functools.partial(self.adapter, switches=chosen)

    def profiles(self, overrides: dict[str, str]) -> list[Profile]:
        """Its engine's profile, then the safety tier drawing what the engine offers."""
        return [profile(self.profile, overrides), profile(f"{SAFETY}:{self.profile}", overrides)]

    @property
    def known_file(self) -> Path:
        return KNOWN / f"{self.known_name or self.name}.toml"


def disjoint_placeholders(case: type[RequestMachineBase]) -> type[RequestMachineBase]:
    """The request machine drawing only multimodal placeholders that share no token: vLLM's
    block hasher walks them in order and takes a block's inputs up to the first that runs past
    it (``kv_cache_utils._gen_mm_extra_hash_keys``), as its input processor makes them (C1 of
    ``specs/peers.md``)."""
    return type(case.__name__, (case,), {"disjoint_multimodal": True})


def pages_of(*sizes: int) -> Callable[[type[RequestMachineBase]], type[RequestMachineBase]]:
    """The request machine drawing blocks of ``sizes`` tokens only: the page sizes one of
    SGLang's allocators serves, so that no run is spent on a configuration it declines."""

    def adapted(case: type[RequestMachineBase]) -> type[RequestMachineBase]:
        return type(case.__name__, (case,), {"block_sizes": sizes})

    return adapted


pages_of_16 = pages_of(16)
"""SGLang's paged allocator at the page size its servers run with (``specs/radix_cache.md``)."""


SGLANG_PROFILE = "sglang"
"""The profile SGLang's peer is held to beside the safety tier: ``sglang`` (SGLang's choices,
``specs/radix_cache.md``) once that profile is in ``PROFILES``; ``pagedkv`` before, the
differences classified on ``specs/peers.md``."""

PEERS = (
    Peer(
        "vllm-0.6.3-manager",
        "manager",
        "vllm-v0",
        VllmV0Manager,
        V0ManagerSwitches,
        sources.VLLM_V0,
        (
            ("D1", "never_without_null"),
            ("D2", "no_window_cap"),
            ("D4", "hash_extra_key"),
            ("D8", "forget_cpu_access"),
        ),
    ),
    Peer(
        "vllm-0.6.3-pool",
        "pool",
        "vllm-v0",
        VllmV0Pool,
        V0PoolSwitches,
        sources.VLLM_V0,
        (("D4", "hash_extra_key"),),
    ),
    Peer("vllm-v1-pool", "pool", "vllm-v1", VllmV1Pool, V1PoolSwitches, sources.VLLM_V1),
    Peer(
        "vllm-0.33.0-manager",
        "request",
        "vllm-v1",
        VllmV1Manager,
        V1ManagerSwitches,
        sources.VLLM_V1,
        # No rounds: P1 and P2 are options of the vllm-v1 profile, and D1 has no switch (its
        # known file steps past it). The switches configure vLLM as pagedkv's profile chooses.
        adapt_case=disjoint_placeholders,
    ),
    Peer(
        "nano-vllm-manager",
        "manager",
        "nano-vllm",
        NanoVllmManager,
        NanoSwitches,
        sources.NANO_VLLM,
        (("D6", "hash_extra_key"),),
    ),
    Peer(
        "nano-vllm-upstream-manager",
        "manager",
        "nano-vllm-upstream",
        NanoVllmManager,
        NanoSwitches,
        sources.NANO_VLLM,
        (("D6", "hash_extra_key"),),
        always=("upstream_deallocate",),
        known_name="nano-vllm-manager",
    ),
    Peer(
        "sglang-0.5.23-radix",
        "request",
        SGLANG_PROFILE,
        sglang_token_radix,
        None,
        sources.SGLANG,
        layouts=("full",),
        adapt_case=pages_of(1),
    ),
    Peer(
        "sglang-0.5.23-radix-paged",
        "request",
        SGLANG_PROFILE,
        sglang_paged_radix,
        None,
        sources.SGLANG,
        layouts=("full",),
        known_name="sglang-0.5.23-radix",
        adapt_case=pages_of(2, 3, 4),
    ),
    Peer(
        "sglang-0.5.23-radix-16",
        "request",
        SGLANG_PROFILE,
        sglang_paged_radix,
        None,
        sources.SGLANG,
        layouts=("full",),
        known_name="sglang-0.5.23-radix",
        adapt_case=pages_of_16,
    ),
)


@dataclass
class Row:
    peer: Peer
    switched: tuple[str, ...]
    result: CheckResult

    @property
    def groups(self) -> str:
        """The group layout checked (request level), else ``-``."""
        return ",".join(self.result.layouts) if self.result.level == "request" else "-"

    @property
    def tier(self) -> str:
        return "safety" if self.result.profile.safety else "profile"

    @property
    def verdict(self) -> str:
        return "pass" if self.result.passed else "FAIL"

    @property
    def found_after(self) -> str:
        found = self.result.found_after
        return "-" if found is None else str(found[1])

    @property
    def shrunk_steps(self) -> str:
        trace = self.result.trace
        return "-" if trace is None or self.result.passed else str(len(trace.ops))

    @property
    def stepped_past(self) -> str:
        """``D4x9 D1x3``: the runs that ended on each known difference."""
        stepped = self.result.stepped
        return "-" if stepped is None else stepped.short()


def check_peer(
    peer: Peer,
    steps: int,
    seed: int,
    switched: Sequence[str],
    overrides: dict[str, str],
    traces: Path | None,
    known: KnownDifferences | None = None,
    layouts: Sequence[GroupKind] = LAYOUTS,
) -> list[Row]:
    """The peer's checks: each round of switches under each tier (at the request level, each
    of ``layouts`` alone); with ``known``, one round as the engine is, stepping past its known
    differences."""
    rows: list[Row] = []
    if peer.level not in LEVELS:
        print(
            f"peers: {peer.name}: not checked: the oracle has no {peer.level} level yet",
            file=sys.stderr,
        )
        return rows
    rounds = [tuple(switched)] if known is not None else peer.rounds(switched)
    each = [(layout,) for layout in layouts if layout in peer.layouts]
    for switches in rounds:
        for chosen in peer.profiles(overrides):
            for layout in each if peer.level == "request" else [tuple(LAYOUTS)]:
                tier = "safety" if chosen.safety else "profile"
                parts = [peer.name, tier, *(["switched"] if switches else [])]
                parts += ["stepping"] if known is not None else []
                parts += list(layout) if peer.level == "request" else []
                trace_out = None if traces is None else traces / f"{'.'.join(parts)}.jsonl"
                if trace_out is not None:
                    trace_out.parent.mkdir(parents=True, exist_ok=True)
                result = run_check(
                    peer.factory(switches),
                    peer.level,
                    steps=steps,
                    seed=seed,
                    trace_out=trace_out,
                    profile=chosen,
                    known=known,
                    layouts=layout,
                    adapt_case=peer.adapt_case,
                )
                rows.append(Row(peer, switches, result))
    return rows


def table(rows: Sequence[Row]) -> str:
    """One line per check; the column of known defects stepped past only when there were any
    to step past (``--known``)."""
    stepping = any(row.result.stepped is not None for row in rows)
    grouped = any(row.result.level == "request" for row in rows)
    head = ("peer", "past defects", "checked under", *(["groups"] if grouped else []))
    head += ("stepped past",) if stepping else ()
    head += ("verdict", "found after", "shrunk", "finding")
    lines = [head]
    for row in rows:
        lines.append(
            (
                row.peer.name,
                row.peer.label(row.switched),
                row.result.profile.describe(),
                *([row.groups] if grouped else []),
                *([row.stepped_past] if stepping else []),
                row.verdict,
                row.found_after,
                row.shrunk_steps,
                row.result.message or "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        out.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(out)


def _overrides(assignments: Sequence[str]) -> dict[str, str]:
    out = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not name:
            raise ValueError(f"--policy takes name=value, got {assignment!r}")
        out[name] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedkv.model_tests.peers.run")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download the peers' wheels and unpack their files")
    check = commands.add_parser("check", help="check every peer: its profile, then safety")
    check.add_argument("--peer", action="append", default=[], help="only this peer (repeatable)")
    check.add_argument("--steps", type=int, default=2000)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--switch", action="append", default=[], help="an adapter switch")
    check.add_argument("--policy", action="append", default=[], help="NAME=VALUE, every profile")
    check.add_argument(
        "--groups",
        default=",".join(LAYOUTS),
        metavar="LAYOUTS",
        help=f"request level: the group layouts, each checked alone ({', '.join(LAYOUTS)})",
    )
    check.add_argument("--traces", type=Path, default=sources.cache_root() / "traces")
    check.add_argument(
        "--known",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="step past known defects: each peer's known/<peer>.toml, or FILE for every peer",
    )
    args = parser.parse_args(argv)
    if args.command == "fetch":
        try:
            for source in sources.SOURCES:
                sources.fetch(source)
        except sources.PeerSourceError as error:
            print(f"peers: error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.steps < 1:
        print("peers: error: --steps must be at least 1", file=sys.stderr)
        return 2
    known = {peer.name: peer for peer in PEERS}
    unknown = [name for name in args.peer if name not in known]
    if unknown:
        print(
            f"peers: error: unknown peer {unknown[0]} (known: {', '.join(known)})", file=sys.stderr
        )
        return 2
    chosen = [known[name] for name in args.peer] if args.peer else list(PEERS)
    try:
        overrides = _overrides(args.policy)
        layouts = parse_layouts(args.groups)
        for peer in chosen:
            peer.profiles(overrides)
    except ValueError as error:
        print(f"peers: error: {error}", file=sys.stderr)
        return 2
    missing = [peer.source.name for peer in chosen if not peer.source.fetched]
    if missing:
        print(f"peers: error: {missing[0]} is not fetched: {sources.FETCH_HINT}", file=sys.stderr)
        return 2
    try:
        stepping = {peer.name: _known(peer, args.known) for peer in chosen}
    except KnownError as error:
        print(f"peers: error: {error}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    for peer in chosen:
        found = check_peer(
            peer,
            args.steps,
            args.seed,
            args.switch,
            overrides,
            args.traces,
            stepping[peer.name],
            layouts,
        )
        for row in found:
            groups = "" if row.groups == "-" else f", groups {row.groups}"
            what = f"{row.peer.name} ({row.peer.label(row.switched)}, {row.result.profile.name}"
            what += f"{groups})"
            print(f"peers: {what}: {row.verdict}", file=sys.stderr, flush=True)
        rows += found
    print(table(rows))
    for row in rows:
        if row.result.trace_path is not None:
            print(f"{row.peer.name} ({row.tier}{groups_of(row)}): trace {row.result.trace_path}")
        traces = {} if row.result.stepped is None else row.result.stepped.traces
        for name, path in sorted(traces.items()):
            print(f"{row.peer.name} ({row.tier}{groups_of(row)}): {name} example {path}")
    return 0


def groups_of(row: Row) -> str:
    return "" if row.groups == "-" else f", {row.groups}"


def _known(peer: Peer, chosen: str | None) -> KnownDifferences | None:
    """The known differences a check of ``peer`` steps past: none (``chosen`` None, or ``""``
    for a peer without a file: nothing known), its own file (``""``), or the file named."""
    if chosen is None or (chosen == "" and not peer.known_file.exists()):
        return None
    if peer.level not in LEVELS:  # not checked yet (check_peer says so)
        return None
    return load_known(chosen or peer.known_file, peer.level)


if __name__ == "__main__":
    sys.exit(main())
