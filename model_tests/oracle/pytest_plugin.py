"""The pagedkv pytest plugin (loaded automatically once pagedkv is installed): ``pagedkv check``
inside an engine's own test suite, with every option the command line has.

Use the fixture::

    def test_my_allocator_matches_pagedkv(pagedkv_oracle):
        pagedkv_oracle(make_manager)                 # or "mypkg.adapter:make_manager"
        pagedkv_oracle(make_kv_cache_manager, level="request", profile="vllm-v1",
                       known="known.toml", groups="full,hybrid", steps=2000, seed=1)

set options for a test (or a class, a module: ``pytestmark``) with the marker::

    @pytest.mark.pagedkv(level="pool", contract="scheduler", timeout=5)

or for the session, on pytest's command line (``--pagedkv-steps 4000``) or in its ini file
(``pagedkv_steps = 4000``); or add a generated test item from the command line::

    pytest --pagedkv-target mypkg.adapter:make_manager [--pagedkv-level pool|request|defrag] [...]

Each option comes from the call, else the closest marker, else the command line, else the ini
file, else ``pagedkv check``'s default (``plugin_settings.py``); the budget is the command
line's, and the seed, unless given, is derived from the test's id (``--pagedkv-seed random``
draws one per check). A divergence fails the test with the report ``pagedkv check`` prints:
the shrunk numbered steps, what the model expected and what the target did, the kind with the
entry that steps past it, and the path of a trace that replays it.

pytest loads this module in every session of an environment that has pagedkv installed, so it
imports only pytest at first: the oracle (and Hypothesis with it) loads when a test first uses
the fixture, a ``--pagedkv-target`` item runs, or a session sets a pagedkv option.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pagedkv.model_tests.machines.manager_machine import Contract
    from pagedkv.model_tests.oracle.check import CheckResult
    from pagedkv.model_tests.oracle.known import KnownDifferences
    from pagedkv.model_tests.oracle.plugin_settings import Source

MARKER = "pagedkv"
SESSION_OPTIONS: dict[str, str] = {
    "level": "manager (default), pool, request or defrag",
    "groups": "request level: the group layouts runs draw from (full,window,hybrid: all three)",
    "profile": "the reference's policy, or safety for the safety tier alone (specs/policy.md)",
    "policy": "NAME=VALUE: override one policy option of the profile (repeatable; ini: one a line)",
    "contract": "any (default) call the protocol allows, or only those a scheduler makes",
    "steps": "about how many rule steps (pagedkv check's default: 16000, 32000 at request level)",
    "seed": "N for every check, or random for a new one each (default: from each test's id)",
    "timeout": "seconds one call into the target may take; 0 waits forever (default 30)",
    "known": "a TOML file of known differences to count and step past (specs/oracle.md §9)",
}
"""The options a session sets for every check: ``--pagedkv-NAME`` and the ini key
``pagedkv_NAME``."""
CALL_OPTIONS = (*SESSION_OPTIONS, "trace_out")
"""What a call or the marker may give: the trace's path too (a session has no one file)."""
DEFAULT_TRACE = "pagedkv-divergence.jsonl"
KNOWN_IN_A_TEST = "pass known=FILE (to pagedkv_oracle or @pytest.mark.pagedkv)"
KNOWN_FOR_ITEMS = "pass --pagedkv-known FILE (or set pagedkv_known in the ini file)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pagedkv", "pagedkv oracle: check an allocator against the reference")
    group.addoption(
        "--pagedkv-target",
        action="append",
        default=[],
        metavar="TARGET",
        help="add a test checking TARGET (package.module:factory or exec:PROGRAM); repeatable",
    )
    for name, help_text in SESSION_OPTIONS.items():
        many = name == "policy"
        group.addoption(
            f"--pagedkv-{name}",
            action="append" if many else "store",
            default=None,
            metavar="NAME=VALUE" if many else name.upper(),
            help=help_text,
        )
        if many:
            parser.addini(f"pagedkv_{name}", f"pagedkv: {help_text}", type="linelist")
        else:
            parser.addini(f"pagedkv_{name}", f"pagedkv: {help_text}", type="string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}({'=..., '.join(CALL_OPTIONS)}=...): the pagedkv oracle's options for the"
        " checks of this test (a call's own arguments come first)",
    )
    if any(values for values, _, _ in _session_values(config)):  # checked before any test runs
        from pagedkv.model_tests.oracle.check_options import OptionError
        from pagedkv.model_tests.oracle.plugin_settings import check_values

        try:
            for source in session_sources(config):
                check_values(source)
        except OptionError as error:
            raise pytest.UsageError(f"pagedkv: {error}") from None


def _session_values(
    config: pytest.Config,
) -> list[tuple[dict[str, object], Callable[[str], str], Path]]:
    """(values, where, folder) of the command line's options, then of the ini file's keys."""
    command_line = {name: config.getoption(f"pagedkv_{name}") for name in SESSION_OPTIONS}
    ini = {name: config.getini(f"pagedkv_{name}") or None for name in SESSION_OPTIONS}
    ini_folder = config.inipath.parent if config.inipath is not None else config.rootpath
    return [
        (command_line, lambda name: f"--pagedkv-{name}", config.invocation_params.dir),
        (ini, lambda name: f"ini pagedkv_{name}", ini_folder),
    ]


def session_sources(config: pytest.Config) -> list[Source]:
    """Where a session's options come from: the command line first, then the ini file."""
    from pagedkv.model_tests.oracle.plugin_settings import Source

    return [Source(*values) for values in _session_values(config)]


class OracleFailure(Exception):
    """A failed check; its message is the full report."""


def run_oracle(
    target: Callable[[Any], Any] | str,
    /,
    *,
    defaults: list[Source] | None = None,
    nodeid: str | None = None,
    known_how: str = KNOWN_IN_A_TEST,
    **given: object,
) -> CheckResult:
    """Check ``target`` (a factory or a target string) with the options ``given`` (the names of
    ``CALL_OPTIONS``), the others from ``defaults`` (the markers, the session) or ``pagedkv
    check``'s defaults; the seed, unless given, derived from ``nodeid`` (None: drawn at random).
    Raise OracleFailure with the report."""
    return check_with(target, given, defaults or [], nodeid, known_how)


def check_with(
    target: Callable[[Any], Any] | str,
    given: dict[str, object],
    defaults: list[Source],
    nodeid: str | None,
    known_how: str,
) -> CheckResult:
    """``run_oracle``, the call's options as one mapping."""
    # Imported here, not above: only a test that checks something pays for the oracle.
    from pagedkv.model_tests.oracle import targets, timeout, trace
    from pagedkv.model_tests.oracle.check import check_report, run_check
    from pagedkv.model_tests.oracle.check_options import OptionError
    from pagedkv.model_tests.oracle.known import KnownError
    from pagedkv.model_tests.oracle.plugin_settings import Source, resolve

    unknown = sorted(set(given) - set(CALL_OPTIONS))
    if unknown:
        raise TypeError(f"run_oracle() got unknown options {unknown} (known: {CALL_OPTIONS})")
    call = Source(given, lambda name: f"argument {name}", Path.cwd())
    try:
        chosen = resolve([call, *defaults], nodeid)
        if isinstance(target, str):
            name = target
            factory = targets.check(
                target, chosen.level, chosen.timeout, policy=chosen.profile.policy
            )
        else:
            name = spec_of(target) or repr(target)
            factory = target
        result = run_check(
            factory,
            chosen.level,
            steps=chosen.steps,
            seed=chosen.seed,
            trace_out=chosen.trace_out,
            profile=chosen.profile,
            timeout=chosen.timeout,
            known=chosen.known,
            contract=chosen.contract,
            layouts=chosen.groups,
        )
    except (
        targets.TargetError,
        timeout.SettingError,
        trace.TraceError,
        OptionError,
        KnownError,
    ) as error:
        raise OracleFailure(f"pagedkv: {error}") from None
    if not result.passed:
        hint = None
        if result.trace_path is not None and (isinstance(target, str) or spec_of(target)):
            hint = (
                f"pagedkv replay {shlex.quote(str(result.trace_path))} --target {shlex.quote(name)}"
            )
        report = check_report(result, name, hint, known_how)
        if chosen.seed_note:
            report.notes.append(chosen.seed_note)
        raise OracleFailure(report.plain())
    return result


def spec_of(factory: Callable[[Any], Any]) -> str | None:
    """``module:qualname`` when that names the factory from outside (not a local function)."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


def marker_sources(node: pytest.Item) -> list[Source]:
    """The test's ``pagedkv`` markers, the closest first (a test's own, then its class's, its
    module's); a relative path in one is read from the test file's folder."""
    from pagedkv.model_tests.oracle.plugin_settings import Source

    found = []
    for marker in node.iter_markers(MARKER):
        unknown = sorted(set(marker.kwargs) - set(CALL_OPTIONS))
        if marker.args or unknown:
            what = f"unknown options {unknown}" if unknown else "positional arguments"
            raise OracleFailure(
                f"pagedkv: @pytest.mark.{MARKER} takes options by name, not {what}"
                f" (known: {', '.join(CALL_OPTIONS)})"
            )
        found.append(
            Source(marker.kwargs, lambda name: f"marker {MARKER}({name}=...)", node.path.parent)
        )
    return found


@pytest.fixture
def pagedkv_oracle(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``pagedkv_oracle(factory_or_target, level=None, steps=None, seed=None, *, groups=None,
    profile=None, policy=None, contract=None, timeout=None, known=None, trace_out=None)``: check
    the target as ``pagedkv check`` does; an option left None comes from the marker, the session,
    or the command line's default. Fails the test on a divergence, with the report; the trace
    goes to the test's ``tmp_path`` unless ``trace_out`` says where. Returns the CheckResult."""
    from pagedkv.model_tests.oracle.plugin_settings import Source

    item = request.node
    trace_default = Source(
        {"trace_out": tmp_path / DEFAULT_TRACE}, lambda name: "tmp_path", tmp_path
    )

    def check(
        target: Callable[[Any], Any] | str,
        level: str | None = None,
        steps: int | None = None,
        seed: int | str | None = None,
        *,
        groups: str | list[str] | tuple[str, ...] | None = None,
        profile: str | None = None,
        policy: dict[str, str] | list[str] | None = None,
        contract: Contract | None = None,
        timeout: float | None = None,
        known: str | Path | KnownDifferences | None = None,
        trace_out: str | Path | None = None,
    ) -> CheckResult:
        given = {
            "level": level,
            "steps": steps,
            "seed": seed,
            "groups": groups,
            "profile": profile,
            "policy": policy,
            "contract": contract,
            "timeout": timeout,
            "known": _from_test_folder(known, item),
            "trace_out": _from_test_folder(trace_out, item),
        }
        try:
            return check_with(
                target,
                given,
                [*marker_sources(item), *session_sources(request.config), trace_default],
                item.nodeid,
                KNOWN_IN_A_TEST,
            )
        except OracleFailure as failure:
            report = str(failure)
        pytest.fail(report, pytrace=False)  # outside the except: no chained copy of the report

    yield check


def _from_test_folder(path: object, item: pytest.Item) -> object:
    """A relative path a test gives, read from its file's folder (as its marker's is)."""
    if isinstance(path, str | Path):
        return item.path.parent / path
    return path


class OracleItem(pytest.Item):
    """The test ``--pagedkv-target`` adds: the session's options, its own seed."""

    def __init__(self, *, target: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target

    def runtest(self) -> None:
        from pagedkv.model_tests.oracle.plugin_settings import Source

        trace_default = Source(
            {"trace_out": Path(DEFAULT_TRACE)}, lambda name: "default", Path.cwd()
        )
        run_oracle(
            self.target,
            defaults=[*session_sources(self.config), trace_default],
            nodeid=self.nodeid,
            known_how=KNOWN_FOR_ITEMS,
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
