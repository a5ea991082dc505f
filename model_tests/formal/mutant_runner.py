"""Runs the killer tests against mutants, each in a child forked from a clean server.

**Why the order of imports is the whole point.** A mutant is honest only if every importer of its
module sees the mutated one. So the server (the process of ``make mutate``) imports the
third-party libraries the killers need (``PRELOAD``: pytest, Hypothesis, torch; the slow part of
a start) and nothing of ``reference/`` or ``optimized/``; each mutant runs in a child forked from
it, which first checks that no module of those folders is loaded (else it stops with
``IMPORTED_TOO_EARLY``), then puts a finder first on ``sys.meta_path`` that answers the mutated
module's name with the mutated code, then runs the killers with ``pytest -x``. The module is
built by the ordinary import machinery under its real name, when its first importer asks for it,
so pickling and copying its classes work as with the real one. No file is written: children run
side by side.

Pytest's exit code is the verdict: 0 survived; 1 (a test failed) or 2 (collection failed, e.g.
the mutated module does not import) killed; past the timeout, killed (the process group is
killed); any other code, or a child that did not get as far as pytest, is an ``error``, which is
never counted as killed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import NoReturn

import pytest

from pagedkv.model_tests.formal.mutants import (
    MUTATED_FOLDERS,
    ROOT,
    Mutant,
    module_name,
    module_path,
    mutated_code,
)

PRELOAD = ("pytest", "hypothesis", "hypothesis.stateful", "immutables", "rich", "torch")
"""Third-party modules the killers import, loaded once in the server (torch alone is ~4 s): by
name, as data, because the server must never import a project module."""

IMPORTED_TOO_EARLY = 90
CHILD_CRASHED = 91
NOT_THE_MUTANT = 92
_KILLED_CODES = (int(pytest.ExitCode.TESTS_FAILED), int(pytest.ExitCode.INTERRUPTED))


def accelerator_present() -> bool:
    """Whether torch sees a usable accelerator, asked in a forked child. Asked in the server it
    would initialize CUDA there, and no child forked after that can use CUDA (on a GPU machine
    the killers then fail on the real code: pinned host memory, the cross-device tests)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            torch = importlib.import_module("torch")  # preloaded: no project module
            found = torch.accelerator.current_accelerator(check_available=True)
            code = 0 if found is not None else 1
        finally:
            os._exit(code)
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    if code not in (0, 1):
        raise RuntimeError(f"asking torch for an accelerator failed (exit {code})")
    return code == 0


def preload() -> None:
    for name in PRELOAD:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def mutated_modules_loaded() -> list[str]:
    """The modules of ``reference/`` and ``optimized/`` already in this process."""
    prefixes = tuple(f"pagedkv.{folder}" for folder in MUTATED_FOLDERS)
    return sorted(m for m in sys.modules if m.startswith(prefixes))


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """The real file's loader, except that its code is the mutant's (and no .pyc is read)."""

    def __init__(self, fullname: str, path: str, code: CodeType) -> None:
        super().__init__(fullname, path)
        self.code = code

    def get_code(self, fullname: str) -> CodeType:
        return self.code


class MutantFinder(importlib.abc.MetaPathFinder):
    """Answers one module name with the mutant; every other name goes to the next finder."""

    def __init__(self, mutant: Mutant) -> None:
        self.name = module_name(mutant.file)
        self.path = str(module_path(mutant.file))
        self.code = mutated_code(mutant)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        loader = _MutantLoader(fullname, self.path, self.code)
        return importlib.util.spec_from_file_location(fullname, self.path, loader=loader)


def install(mutant: Mutant) -> None:
    """From now on, importing the mutant's module in this process builds the mutant."""
    sys.meta_path.insert(0, MutantFinder(mutant))


def mutant_was_imported(mutant: Mutant) -> bool:
    """After the killers: the module they imported under the mutant's name (if any) is the
    mutant. Says why when not, on the log."""
    module = sys.modules.get(module_name(mutant.file))
    if module is None:
        print(f"\nno killer imported {module_name(mutant.file)}")
        return True
    if isinstance(module.__loader__, _MutantLoader):
        return True
    print(f"\n{module_name(mutant.file)} was imported from the real file, not the mutant")
    return False


PYTEST_OPTIONS = ("-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rfE", "--assert=plain")
"""``--assert=plain``: pytest's assertion rewriter is an import hook that would load every
``pagedkv`` module itself (the package is a pytest plugin's, so it is marked for rewriting),
ahead of the mutant's finder."""


@dataclass(frozen=True)
class Child:
    """How a child sets itself up; the defaults are the honest order. ``before_install`` and
    ``check_imports`` exist to show that a dishonest one is refused, by these checks or by the
    controls alone (``test_mutate.py``)."""

    before_install: tuple[str, ...] = ()
    check_imports: bool = True
    """Stop if a module of the folders is loaded before the mutant is installed; after the
    killers, call a run whose module was not the mutant an error."""


def _child(mutant: Mutant | None, killers: Sequence[str], log: Path, setup: Child) -> NoReturn:
    os.setpgid(0, 0)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(out, 2)
    code = CHILD_CRASHED
    try:
        for name in setup.before_install:
            importlib.import_module(name)
        early = mutated_modules_loaded()
        if setup.check_imports and early:
            print(f"imported before the mutant was installed: {', '.join(early)}")
            code = IMPORTED_TOO_EARLY
        else:
            if mutant is not None:
                install(mutant)
            code = int(pytest.main([*PYTEST_OPTIONS, *killers]))
            if mutant and setup.check_imports and not mutant_was_imported(mutant):
                code = NOT_THE_MUTANT
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant | None
    status: str
    """``killed``, ``survived``, ``timeout`` (counted as killed) or ``error``."""
    seconds: float
    detail: str
    """The first failing test (killed), or the log's last line (error)."""

    @property
    def killed(self) -> bool:
        return self.status in ("killed", "timeout")


def _detail(log: Path, status: str) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    if status == "killed":
        failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
        return failed[0] if failed else ""
    return lines[-1] if lines and status == "error" else ""


def _status(wait_status: int) -> str:
    code = os.waitstatus_to_exitcode(wait_status)
    if code == 0:
        return "survived"
    return "killed" if code in _KILLED_CODES else "error"


def run(
    jobs: Sequence[tuple[Mutant | None, Sequence[str]]],
    workers: int,
    timeout: float,
    setup: Child = Child(),
) -> Iterator[Outcome]:
    """Each (mutant, killers) in a child of this process, ``workers`` at a time; outcomes in the
    order they finish. ``None`` runs the killers on the real code (the baseline)."""
    os.environ["PAGEDKV_PROFILE"] = "mutate"
    preload()
    if early := mutated_modules_loaded():
        raise RuntimeError(f"the mutation server imported {', '.join(early)}")
    pending = list(reversed(jobs))
    running: dict[int, tuple[Mutant | None, float, Path]] = {}
    with tempfile.TemporaryDirectory(prefix="pagedkv-mutate-") as logs:
        try:
            yield from _serve(pending, running, Path(logs), workers, timeout, setup)
        finally:  # stopped early (an error, ^C, SIGTERM): no child outlives the server
            for pid in running:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _serve(
    pending: list[tuple[Mutant | None, Sequence[str]]],
    running: dict[int, tuple[Mutant | None, float, Path]],
    logs: Path,
    workers: int,
    timeout: float,
    setup: Child,
) -> Iterator[Outcome]:
    """The loop of ``run``: fork while there is room, collect, kill what ran too long."""
    while pending or running:
        while pending and len(running) < workers:
            mutant, killers = pending.pop()
            log = logs / f"{len(pending)}.log"
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                os.chdir(ROOT)
                _child(mutant, killers, log, setup)
            running[pid] = (mutant, time.monotonic(), log)
        pid, wait_status = os.waitpid(-1, os.WNOHANG)
        now = time.monotonic()
        if pid:
            mutant, started, log = running.pop(pid)
            status = _status(wait_status)
            yield Outcome(mutant, status, now - started, _detail(log, status))
            continue
        for pid, (mutant, started, _log) in list(running.items()):
            if now - started > timeout:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del running[pid]
                yield Outcome(mutant, "timeout", now - started, "")
        time.sleep(0.05)
