"""``make peers``: hold each real peer to the reference and print one line per peer.

    python -m model_tests.peers.run fetch
    python -m model_tests.peers.run check [--peer NAME ...] [--steps N] [--seed S]
                                          [--switch NAME ...] [--traces DIR]

``check`` runs ``pagedkv check``'s machine (``run_check``) on each peer at its level, with the
operations its engine lacks left out (``lacking.py``), and prints a table: the peer, its level,
the verdict, how many calls ran before the first divergence, the shrunk trace's length and the
divergence itself. Each shrunk trace is written to ``DIR/<peer>.jsonl`` (default
``.peers/traces``); ``pagedkv replay`` replays it. ``--switch`` turns on adapter switches (each
papers over one known difference, ``specs/peers.md``). Exit code 0 when every peer ran (whatever
its verdict), 2 when a peer's files are not fetched or a name is unknown.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from model_tests.oracle.check import CheckResult, run_check
from model_tests.oracle.codec import Level
from model_tests.peers import lacking, sources
from model_tests.peers.nano_vllm_manager import NanoVllmManager
from model_tests.peers.nano_vllm_manager import Switches as NanoSwitches
from model_tests.peers.vllm_v0_manager import Switches as V0ManagerSwitches
from model_tests.peers.vllm_v0_manager import VllmV0Manager
from model_tests.peers.vllm_v1_pool import Switches as V1PoolSwitches
from model_tests.peers.vllm_v1_pool import VllmV1Pool


@dataclass(frozen=True)
class Peer:
    name: str
    level: Level
    adapter: Any
    switches: Any
    """The adapter's ``Switches`` class (all off by default), or None."""
    source: sources.Source

    def factory(self, switched: Sequence[str] = ()) -> Callable[[Any], Any]:
        if self.switches is None:
            return self.adapter  # type: ignore[no-any-return]
        names = {f.name for f in fields(self.switches)}
        chosen = replace(self.switches(), **{n: True for n in switched if n in names})
        return functools.partial(self.adapter, switches=chosen)


PEERS = (
    Peer("vllm-0.6.3-manager", "manager", VllmV0Manager, V0ManagerSwitches, sources.VLLM_V0),
    Peer("vllm-v1-pool", "pool", VllmV1Pool, V1PoolSwitches, sources.VLLM_V1),
    Peer("nano-vllm-manager", "manager", NanoVllmManager, NanoSwitches, sources.NANO_VLLM),
)


@dataclass
class Row:
    peer: Peer
    result: CheckResult
    first_divergence_after: int | None
    """Calls run before the first failing run ended (None: none failed)."""

    @property
    def verdict(self) -> str:
        return "pass" if self.result.passed else "DIVERGES"

    @property
    def shrunk_steps(self) -> int | None:
        record = self.result.record
        return None if record is None else len(record.calls)


def check_peer(
    peer: Peer, steps: int, seed: int, switched: Sequence[str], traces: Path | None
) -> Row:
    first: list[int] = []

    def progress(runs: int, calls: int, failing: bool) -> None:
        if failing and not first:
            first.append(calls)

    trace_out = None if traces is None else traces / f"{peer.name}.jsonl"
    if trace_out is not None:
        trace_out.parent.mkdir(parents=True, exist_ok=True)
    factory = peer.factory(switched)
    lacks: frozenset[str] = getattr(peer.adapter, "LACKS", frozenset())
    serves = getattr(peer.adapter, "SERVES", None)
    result = run_check(
        factory,
        peer.level,
        steps=steps,
        seed=seed,
        trace_out=trace_out,
        progress=progress,
        adapt_case=lambda case: lacking.without(case, lacks, serves),
    )
    return Row(peer, result, first[0] if first else None)


def table(rows: Sequence[Row]) -> str:
    head = ("peer", "level", "verdict", "calls to 1st", "shrunk", "divergence")
    lines = [head]
    for row in rows:
        after = "-" if row.first_divergence_after is None else str(row.first_divergence_after)
        shrunk = "-" if row.shrunk_steps is None or row.result.passed else str(row.shrunk_steps)
        lines.append(
            (row.peer.name, row.peer.level, row.verdict, after, shrunk, row.result.message or "")
        )
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line[:5], widths, strict=True)]
        out.append("  ".join([*cells, line[5]]).rstrip())
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_tests.peers.run")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download the peers' wheels and unpack their files")
    check = commands.add_parser("check", help="check every peer against the reference")
    check.add_argument("--peer", action="append", default=[], help="only this peer (repeatable)")
    check.add_argument("--steps", type=int, default=2000)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--switch", action="append", default=[], help="an adapter switch")
    check.add_argument("--traces", type=Path, default=sources.cache_root() / "traces")
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
    missing = [peer.source.name for peer in chosen if not peer.source.fetched]
    if missing:
        print(f"peers: error: {missing[0]} is not fetched: run make peers-fetch", file=sys.stderr)
        return 2
    rows = []
    for peer in chosen:
        rows.append(check_peer(peer, args.steps, args.seed, args.switch, args.traces))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    for row in rows:
        if row.result.trace_path is not None:
            print(f"{row.peer.name}: trace {row.result.trace_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
