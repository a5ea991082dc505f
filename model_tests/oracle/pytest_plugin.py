"""The pagedkv pytest plugin (loaded automatically once pagedkv is installed).

In an engine's own test suite, either use the fixture::

    def test_my_allocator_matches_pagedkv(pagedkv_oracle):
        pagedkv_oracle(make_manager)                 # or "mypkg.adapter:make_manager"
        pagedkv_oracle(make_pool, level="pool", steps=500, seed=1)
        pagedkv_oracle(make_kv_cache_manager, level="request")  # vLLM v1's KVCacheManager kind

or add a generated test item from the command line::

    pytest --pagedkv-target mypkg.adapter:make_manager [--pagedkv-level manager|pool|request|defrag]
           [--pagedkv-steps N] [--pagedkv-seed S]

A divergence fails the test with the same report as ``pagedkv check``: the shrunk numbered
steps, what the model expected and what the target did, and the path of a trace that replays it.

pytest loads this module in every session of an environment that has pagedkv installed, so it
imports only pytest at first: the oracle (and Hypothesis with it) loads when a test first uses
the fixture or a ``--pagedkv-target`` item runs (``run_oracle``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DEFAULT_STEPS = 1000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pagedkv", "pagedkv oracle: check an allocator against the reference")
    group.addoption(
        "--pagedkv-target",
        action="append",
        default=[],
        metavar="TARGET",
        help="add a test checking TARGET (package.module:factory or exec:PROGRAM); repeatable",
    )
    group.addoption(
        "--pagedkv-level", choices=["manager", "pool", "request", "defrag"], default="manager"
    )
    group.addoption("--pagedkv-steps", type=int, default=DEFAULT_STEPS, metavar="N")
    group.addoption("--pagedkv-seed", type=int, default=None, metavar="S")


class OracleFailure(Exception):
    """A failed check; its message is the full report."""


def run_oracle(
    target: Callable[[Any], Any] | str,
    *,
    level: str = "manager",
    steps: int = DEFAULT_STEPS,
    seed: int | None = None,
    trace_out: Path | None = None,
) -> Any:
    """Check ``target`` (a factory or a target string); raise OracleFailure with the report."""
    # Imported here, not above: only a test that checks something pays for the oracle.
    from pagedkv.model_tests.oracle import codec, targets, timeout, trace
    from pagedkv.model_tests.oracle.check import check_report, run_check

    lvl = codec.level_of(level)
    try:
        if isinstance(target, str):
            name = target
            factory = targets.check(target, lvl)
        else:
            name = spec_of(target) or repr(target)
            factory = target
        result = run_check(factory, lvl, steps=steps, seed=seed, trace_out=trace_out)
    except (targets.TargetError, timeout.SettingError, trace.TraceError) as error:
        raise OracleFailure(str(error)) from None
    if not result.passed:
        hint = None
        if result.trace_path is not None and (isinstance(target, str) or spec_of(target)):
            hint = (
                f"pagedkv replay {shlex.quote(str(result.trace_path))} --target {shlex.quote(name)}"
            )
        raise OracleFailure(check_report(result, name, hint).plain())
    return result


def spec_of(factory: Callable[[Any], Any]) -> str | None:
    """``module:qualname`` when that names the factory from outside (not a local function)."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


@pytest.fixture
def pagedkv_oracle(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``check(factory_or_target, level="manager", steps=1000, seed=None)``: fails the test on a
    divergence, with the report; the trace goes to the test's ``tmp_path``."""

    def check(
        target: Callable[[Any], Any] | str,
        level: str = "manager",
        steps: int = DEFAULT_STEPS,
        seed: int | None = None,
    ) -> Any:
        try:
            return run_oracle(
                target,
                level=level,
                steps=steps,
                seed=seed,
                trace_out=tmp_path / "pagedkv-divergence.jsonl",
            )
        except OracleFailure as failure:
            report = str(failure)
        pytest.fail(report, pytrace=False)  # outside the except: no chained copy of the report

    yield check


class OracleItem(pytest.Item):
    """The test ``--pagedkv-target`` adds."""

    def __init__(self, *, target: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target

    def runtest(self) -> None:
        options = self.config.option
        run_oracle(
            self.target,
            level=options.pagedkv_level,
            steps=options.pagedkv_steps,
            seed=options.pagedkv_seed,
            trace_out=Path.cwd() / "pagedkv-divergence.jsonl",
        )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, OracleFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"pagedkv check {self.target}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for target in config.getoption("pagedkv_target"):
        items.append(
            OracleItem.from_parent(session, name=f"pagedkv-check[{target}]", target=target)
        )
