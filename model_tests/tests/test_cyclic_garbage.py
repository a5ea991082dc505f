"""What a check leaves to Python's cycle collector (``oracle/collector.py``): a default check made
1.4 million objects of cyclic garbage, and spent a sixth of its time collecting them. Two sources
are cut at the root, and these tests hold them cut:

- a refused call's typed error kept its traceback, whose frames lead back (``f_back``) to the
  session that keeps the error: every refused call left the session's whole call in a cycle
  (``calls.run_call`` drops a typed error's traceback; ``show_error`` never reads it);
- Hypothesis keeps each finished machine in cycles of its own, so everything the machine held
  waited for the collector (``capture.let_go`` drops it once the run's record is made).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings

from pagedkv.model_tests.lockstep.manager_session import IsomorphicManagerSession
from pagedkv.model_tests.machines.hypothesis_internals import run_search
from pagedkv.model_tests.oracle.check import machine_case
from pagedkv.model_tests.oracle.record import reference_factory
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs import manager_calls as calls
from pagedkv.specs.errors import UnknownSequenceError
from pagedkv.specs.types import ManagerConfig


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_refused_call_leaves_no_cycle() -> None:
    config = ManagerConfig(block_size=4, num_gpu_blocks=8, num_cpu_blocks=4)
    session = IsomorphicManagerSession(
        ReferenceBlockSpaceManager(config), ReferenceBlockSpaceManager(config)
    )
    with collector_off():
        for seq_id in range(50):
            outcome = session.call(calls.free(100 + seq_id))
            assert isinstance(outcome, UnknownSequenceError)
        del outcome
        session.steps.clear()  # the errors the session kept: now unreachable, unless in a cycle
        left = gc.collect()
    assert left == 0, f"{left} objects in cycles after 50 refused calls"


def test_a_finished_run_lets_go_of_what_its_machine_held() -> None:
    made: list[Any] = []
    base = machine_case(reference_factory("manager"), "manager")

    class Kept(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    quiet = settings(
        max_examples=5,
        stateful_step_count=10,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    run_search(Kept, seed=0, settings=quiet)
    assert made
    held = [sorted(vars(machine)) for machine in made if vars(machine)]
    assert not held, f"finished machines still hold {held[0]}"
