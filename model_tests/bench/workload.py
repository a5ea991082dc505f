"""A serving workload, generated once from a seed and kept as an operation stream: the manager
calls a vLLM-style scheduler made, in order, which every implementation then replays.

The default is the workload of issue 11: 300 requests, 70 % opening with one of 8 system
prompts, lognormal prompts (median 500 tokens), 50-500 output tokens, 10 % sampling two sequences,
block size 16, 2,048 GPU and 1,024 CPU blocks, prefix caching on, a pool small enough that the
scheduler preempts by swapping. ``scaled`` keeps that shape for a pool of another size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pagedkv.model_tests.bench.requests import RequestShape, generate
from pagedkv.model_tests.bench.scheduler import (
    Call,
    Offered,
    Recorder,
    Scheduler,
    SchedulerLimits,
    Totals,
)
from pagedkv.model_tests.oracle import trace
from pagedkv.optimized.block_manager import OptimizedBlockSpaceManager
from pagedkv.specs.interface import BlockSpaceManager
from pagedkv.specs.types import Device, ManagerConfig

REFERENCE_GPU_BLOCKS = 2048
EVERYTHING = Offered()


@dataclass(frozen=True)
class WorkloadSpec:
    seed: int = 0
    shape: RequestShape = field(default_factory=RequestShape)
    block_size: int = 16
    num_gpu_blocks: int = REFERENCE_GPU_BLOCKS
    num_cpu_blocks: int = 1024
    watermark: float = 0.01
    enable_caching: bool = True
    limits: SchedulerLimits = field(default_factory=SchedulerLimits)

    @property
    def config(self) -> ManagerConfig:
        return ManagerConfig(
            block_size=self.block_size,
            num_gpu_blocks=self.num_gpu_blocks,
            num_cpu_blocks=self.num_cpu_blocks,
            watermark=self.watermark,
            enable_caching=self.enable_caching,
        )

    def scaled(self, num_gpu_blocks: int, max_calls: int | None = None) -> WorkloadSpec:
        """The same shape for a pool of ``num_gpu_blocks``: requests, concurrency, CPU blocks and
        the arrival window grow with it, so the pool is as full and as contended."""
        factor = num_gpu_blocks / self.num_gpu_blocks
        shape = replace(
            self.shape,
            num_requests=max(8, round(self.shape.num_requests * factor)),
            arrival_steps=max(8, round(self.shape.arrival_steps * factor)),
        )
        limits = replace(
            self.limits,
            max_num_seqs=max(4, round(self.limits.max_num_seqs * factor)),
            max_prefill_tokens=max(4096, round(self.limits.max_prefill_tokens * factor)),
            max_calls=max_calls,
        )
        return replace(
            self,
            shape=shape,
            num_gpu_blocks=num_gpu_blocks,
            num_cpu_blocks=max(1, round(self.num_cpu_blocks * factor)),
            limits=limits,
        )


@dataclass
class Workload:
    spec: WorkloadSpec
    calls: list[Call]
    outcomes: list[Any]
    """Each call's result as ``scheduler.digest`` keeps it, for checking a replay."""
    totals: Totals
    hit_rate: float
    profile: str = "pagedkv"
    """The policy whose answers steered the scheduler (``streams.py``)."""

    @property
    def config(self) -> ManagerConfig:
        return self.spec.config

    def describe(self) -> str:
        spec, totals = self.spec, self.totals
        return (
            f"{spec.shape.num_requests} requests (seed {spec.seed}), block size {spec.block_size},"
            f" {spec.num_gpu_blocks} GPU + {spec.num_cpu_blocks} CPU blocks,"
            f" caching {'on' if spec.enable_caching else 'off'}: {totals.steps} steps,"
            f" {len(self.calls)} calls, {totals.scheduled_tokens} scheduled tokens,"
            f" {totals.preempted_by_swap} swap and {totals.preempted_by_recompute} recompute"
            f" preemptions, GPU hit rate {self.hit_rate:.3f}; steered by policy {self.profile}"
        )


Factory = Callable[[ManagerConfig], BlockSpaceManager]


def build(
    spec: WorkloadSpec,
    factory: Factory = OptimizedBlockSpaceManager,
    offered: Offered = EVERYTHING,
    profile: str = "pagedkv",
) -> Workload:
    """Run the scheduler over a manager from ``factory`` (following ``profile``, which
    ``offered`` describes) and keep what it called."""
    manager = factory(spec.config)
    recorder = Recorder(manager)
    requests = generate(spec.shape, spec.seed)
    scheduler = Scheduler(recorder, requests, spec.block_size, spec.limits, offered)
    totals = scheduler.run(lambda: len(recorder.calls))
    hit_rate = float("nan")
    if "get_prefix_cache_hit_rate" in offered:
        hit_rate = manager.get_prefix_cache_hit_rate(Device.GPU)
    return Workload(spec, recorder.calls, recorder.outcomes, totals, hit_rate, profile)


def to_trace(workload: Workload) -> trace.Trace:
    """The workload as a pagedkv trace (expectations from the reference), so that
    ``pagedkv replay`` can hold any target to it. The reference replays every call to fill in
    the expectations, which takes a while for a long stream."""
    return trace.trace_of_calls("manager", workload.config, workload.calls)
