"""``pagedkv record``: a corpus of conformance traces from the reference.

The isomorphic machine runs with the reference on both sides; every run becomes a trace. Batches
go on until the corpus holds at least the asked number of traces and covers every operation and
every error type of the level (or a batch limit is reached); a few configurations the reference
refuses add traces for ``ConfigurationError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings

from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.machines.hypothesis_internals import run_search
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.check import machine_case
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.specs.operations import required
from pagedkv.specs.request_types import AttentionKind, KVGroup, RequestConfig
from pagedkv.specs.types import DefragConfig, ManagerConfig, PoolConfig

REFUSED_CONFIGS: dict[Level, list[Any]] = {
    "manager": [
        ManagerConfig(block_size=2, num_gpu_blocks=0, num_cpu_blocks=2),
        ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2, watermark=1.0),
        ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2, sliding_window=0),
    ],
    "pool": [
        PoolConfig(num_blocks=0, block_size=2),
        PoolConfig(num_blocks=2, block_size=0),
        PoolConfig(num_blocks=2, block_size=2, enable_caching=1),  # type: ignore[arg-type]
    ],
    "request": [
        RequestConfig(num_blocks=1, block_size=2),
        RequestConfig(num_blocks=4, block_size=0),
        RequestConfig(num_blocks=4, block_size=2, groups=(KVGroup(AttentionKind.SLIDING_WINDOW),)),
    ],
    "defrag": [
        DefragConfig(num_blocks=0),
        DefragConfig(num_blocks=4, threshold=-1),
        DefragConfig(num_blocks=4, pad_sizes=(4, 2)),
    ],
}
MAX_BATCHES = 10
STEPS_PER_RUN = 60


class CorpusError(ValueError):
    """A corpus directory that cannot be written (the message is one line)."""


def check_out(directory: Path, levels: list[Level], force: bool = False) -> None:
    """``directory`` can take the corpus of ``levels``: checked before any recording. Traces
    already there are replaced only with ``force``."""
    if directory.exists() and not directory.is_dir():
        raise CorpusError(f"{directory}: exists and is not a directory")
    existing = sorted(p for level in levels for p in directory.glob(f"{level}-*.jsonl"))
    if existing and not force:
        raise CorpusError(
            f"{directory} already holds {len(existing)} {'/'.join(levels)} trace(s)"
            f" ({existing[0].name}, ...); --force replaces them"
        )
    parent = directory
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CorpusError(f"{directory}: {parent} is not a directory")


@dataclass
class Corpus:
    level: Level
    directory: Path
    files: list[Path] = field(default_factory=list)
    operations: int = 0
    missing_ops: set[str] = field(default_factory=set)
    missing_errors: set[str] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        return not self.missing_ops and not self.missing_errors

    def summary(self) -> str:
        ops, errors = required(self.level), codec.ERRORS[self.level]
        text = (
            f"{self.level}: {len(self.files)} traces, {self.operations} operations in"
            f" {self.directory}; operations covered {len(ops) - len(self.missing_ops)}/{len(ops)},"
            f" error types {len(errors) - len(self.missing_errors)}/{len(errors)}"
        )
        missing = sorted(self.missing_ops) + sorted(self.missing_errors)
        return text + (f"; not covered: {', '.join(missing)}" if missing else "")


def reference_factory(level: Level) -> Callable[[Any], Any]:
    def make(config: Any) -> Any:
        return trace.make_reference(level, config)

    make.__name__ = "reference"
    return make


def collect_runs(level: Level, runs: int, seed: int) -> list[RunRecord]:
    """``runs`` runs of the isomorphic machine, the reference on both sides."""
    case = machine_case(reference_factory(level), level)
    records: list[RunRecord] = []
    case.on_run_end = staticmethod(records.append)
    chosen = settings(
        max_examples=runs,
        stateful_step_count=STEPS_PER_RUN,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    run_search(case, seed=seed, settings=chosen)
    return records


def record_level(
    level: Level,
    directory: Path,
    *,
    runs: int = 40,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> Corpus:
    check_out(directory, [level], force)
    refused = [trace.trace_of_calls(level, config, []) for config in REFUSED_CONFIGS[level]]
    traces: list[trace.Trace] = []
    for batch in range(MAX_BATCHES):
        wanted = runs if batch == 0 else max(10, runs // 2)
        for record in collect_runs(level, wanted, seed + batch):
            if record.config is not None and record.calls:
                traces.append(trace.trace_of_run(record))
        missing_ops, missing_errors = trace.summarize(traces + refused, level)
        if progress is not None:
            progress(f"{level}: {len(traces)} traces; missing {len(missing_ops | missing_errors)}")
        if len(traces) >= runs and not missing_ops and not missing_errors:
            break
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{level}-*.jsonl"):
            stale.unlink()
    except OSError as error:
        raise CorpusError(f"cannot write {directory}: {error.strerror or error}") from None
    corpus = Corpus(level, directory, missing_ops=missing_ops, missing_errors=missing_errors)
    for number, one in enumerate(traces, 1):
        corpus.files.append(trace.write(one, directory / f"{level}-{number:04d}.jsonl"))
        corpus.operations += len(one.ops)
    for number, one in enumerate(refused, 1):
        corpus.files.append(trace.write(one, directory / f"{level}-config-{number}.jsonl"))
    return corpus
