"""The ``pagedkv`` command: check an allocator against the reference, record and replay
conformance traces, and teach the algorithm.

    pagedkv check  --target T [--level manager|pool|request|defrag] [--groups full,window,hybrid]
                   [--profile P] [--policy NAME=VALUE ...] [--contract any|scheduler]
                   [--steps N] [--seed S] [--trace-out PATH] [--known FILE]
                   [--timeout SECONDS] [--json FILE] [--junit-xml FILE]
                   [--workers N] [--database DIR|redis://HOST:PORT/DB]
    pagedkv record [--level manager|pool|request|defrag|all] [--out DIR] [--runs N] [--seed S]
                   [--force]
    pagedkv replay TRACE [TRACE ...] --target T [--timeout SECONDS] [--json FILE]
                   [--junit-xml FILE]
    pagedkv demo   [--level manager|request|defrag] [--step] [-o PAGE]
    pagedkv show   TRACE [-o PAGE] [--target T]
    pagedkv bench  [--baseline REV] [--target T ...] [--kernels] [--json PATH] [--plot PATH]
                   [--timeout SECONDS] ...
    pagedkv soak   [--target T] [--level manager|request] [--groups full,window,hybrid]
                   [--steps N] [--seed S] [--exact] [--trace-out PATH] [--timeout SECONDS]
                   [--json FILE] [--junit-xml FILE]

T is ``package.module:factory`` or ``exec:./program [args]`` (see ``specs/oracle.md``).
Exit codes: 0 pass, only once the verdict is printed; 1 FAIL: a divergence (``check``,
``replay``, ``soak``), a target that does not answer in time (those and ``bench``), an incomplete
corpus (``record``); 2 bad usage, a target that cannot be loaded or built, a trace that cannot be
read or is stale, a file or standard output that cannot be written. ``bench`` measures and
prints; it exits 0 unless it cannot run or a target hangs. The console script runs each command
in a child process that ``pagedkv/supervisor.py`` watches: a process that ends before its verdict
is a FAIL.
Output uses rich on a terminal (no styling with ``NO_COLOR``) and plain text otherwise, with
progress lines on stderr every ``PAGEDKV_PROGRESS`` seconds (5; 0: none) for ``check``,
``replay`` and ``soak``; bad input is one line on stderr. ``--json`` and ``--junit-xml`` write
the verdict for CI (``model_tests/oracle/verdict_json.py``, ``junit.py``).

Start-up: at module level this file imports only what ``check`` (and ``replay``, ``record``,
``soak``, which share its modules) and the command line itself need. What only another command
uses is imported where that command runs (``LAZY`` in ``model_tests/tests/test_layers.py``; never
to dodge a cycle): the benchmark in ``cmd_bench``, the teaching tools in ``cmd_demo`` and
``cmd_show``, the trace viewer's page (``pages.py``) once a check has a divergence to draw, rich
(``rich_output.py``) once the output is a terminal. ``pagedkv check`` then starts in under 0.5
CPU s from the wheel (``model_tests/tests/test_startup.py``).

Every command runs inside one handler (``main``): whatever goes wrong becomes one line on stderr
and exit code 2 (130 on Ctrl-C, 143 on SIGTERM); nothing a target raises can end pagedkv with
another code, and no path exits 0 without a verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

from pagedkv import __version__
from pagedkv.model_tests.bench.defaults import REFERENCE_CALLS
from pagedkv.model_tests.lockstep.calls import TargetStopped
from pagedkv.model_tests.machines import profiles
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import codec, progress, targets, timeout, trace
from pagedkv.model_tests.oracle.check import (
    DEFAULT_STEPS,
    DEFAULT_TRACE,
    REQUEST_STEPS,
    Report,
    StepLine,
    budget,
    check_report,
    counted,
    default_steps,
    replay_report,
    run_check,
    show_config,
)
from pagedkv.model_tests.oracle.check_options import (
    CONTRACTS,
    OptionError,
    assignment,
    check_profile,
    contract_name,
    group_layouts,
    level_name,
    profile_name,
    quoted,
    seconds,
    seed_number,
    whole_number,
    worker_count,
)
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.exec_target import close_target
from pagedkv.model_tests.oracle.known import KnownError
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.oracle.record import CorpusError, check_out, record_level
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.model_tests.oracle.shared_failures import DatabaseError, open_database
from pagedkv.model_tests.oracle.trace import Trace, Verdict
from pagedkv.model_tests.oracle.verdict_files import VerdictFiles
from pagedkv.model_tests.oracle.verdict_json import (
    Clock,
    check_verdict,
    replay_verdict,
    soak_verdict,
)
from pagedkv.model_tests.oracle.watchdog import Interrupted
from pagedkv.model_tests.oracle.workers import Job, WorkerError, check_in_workers, seeds_of
from pagedkv.specs.policy import PROFILE_NAMES, Policy, Profile
from pagedkv.specs.policy import profile as named_profile
from pagedkv.specs.validation import MAX_BLOCKS

if TYPE_CHECKING:  # names for annotations only: their modules load with their commands
    from pagedkv.model_tests.bench.report import Section
    from pagedkv.model_tests.oracle.soak import SoakResult
    from pagedkv.model_tests.teaching.frames import Frame, Walk

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
EXIT_CLOSED_OUTPUT = 141
"""As a shell reports a program stopped by SIGPIPE: whoever read the output (``| head``) went
away before the verdict; never a PASS."""
TRACEBACK_VARIABLE = "PAGEDKV_TRACEBACK"
NO_COLOR_VARIABLE = "NO_COLOR"
"""https://no-color.org: set and not empty, a terminal gets no escape codes at all (rich's own
reading of it drops colours but keeps bold, dim and underline)."""
SOAK_LEVELS: list[Level] = ["manager", "request"]
"""The levels ``soak`` has a walk of."""


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit 2."""


class OutputError(Exception):
    """Standard output that cannot be written (a full disk, an I/O error): one line, exit 2."""


TARGET_HELP = "package.module:factory, exec:PROGRAM, or one of pagedkv's own: " + ", ".join(
    targets.ALIASES
)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that cleanup runs (``exec:`` programs are
    killed on the way out)."""


ONE_LINE_ERRORS: tuple[type[Exception], ...] = (
    UsageError,
    targets.TargetError,
    trace.TraceError,
    codec.CodecError,
    timeout.SettingError,
    CorpusError,
    profiles.ProfileError,
    KnownError,
    OutputError,
    DatabaseError,
    WorkerError,
)
"""Bad input of every kind: the message is the whole report."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage wall
        raise UsageError(f"{message} (see {self.prog} --help)")


# --- output -----------------------------------------------------------------------------------


ASCII_LOOKALIKES = str.maketrans(
    {"─": "-", "└": "`-", "→": "->", "←": "<-", "…": "...", "·": "-", "✗": "x", "µ": "u", "§": "S"}
)
"""What the drawings and reports use beyond ASCII, for a stream that cannot encode it."""


class _Checked:
    """A text stream whose failures to write are ``OutputError`` (one line), except the reader
    going away (``BrokenPipeError``, its own exit code)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError as error:  # an ASCII-only stdout (LANG=C, PYTHONIOENCODING)
                plain = text.translate(ASCII_LOOKALIKES).encode(error.encoding, "replace")
                return self._stream.write(plain.decode(error.encoding))
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"cannot write the output: {error.strerror or error}") from None

    def flush(self) -> None:
        _flush(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Output:
    """Plain text, or rich when ``stream`` is a terminal."""

    def __init__(
        self,
        stream: IO[str],
        *,
        rich: bool | None = None,
        keys: IO[str] | None = None,
        errors: IO[str] | None = None,
    ) -> None:
        self.stream: Any = _Checked(stream)
        self.keys = sys.stdin if keys is None else keys
        self.errors = sys.stderr if errors is None else errors
        self.rich = stream.isatty() if rich is None else rich
        self.console: Any = None
        if self.rich:
            from pagedkv import rich_output  # a terminal: only now is rich needed

            styled = not os.environ.get(NO_COLOR_VARIABLE)  # set and not empty: no styling
            self.console = rich_output.console(stream, styled)

    def line(self, text: str = "", style: str = "") -> None:
        if self.console is None:
            print(text, file=self.stream)
        else:
            from pagedkv import rich_output

            rich_output.line(self.console, text, style)

    def report(self, report: Report) -> None:
        if self.console is None:
            print(report.plain(), file=self.stream)
            return
        from pagedkv import rich_output

        rich_output.report(self.console, report)

    def opening(self, walk: Walk) -> None:
        from pagedkv.model_tests.teaching import terminal

        if self.console is None:
            print(terminal.plain_opening(walk), file=self.stream)
        else:
            self.console.print(terminal.rich_opening(walk))

    def frame(self, frame: Frame, total: int) -> None:
        from pagedkv.model_tests.teaching import terminal

        if self.console is None:
            print(terminal.plain_frame(frame, total) + "\n", file=self.stream)
        else:
            self.console.print(terminal.rich_frame(frame, total))
            self.console.print()

    def wait(self) -> bool:
        """Wait for Enter; False to stop (q, or the input closed)."""
        self.line("Enter: next step · q Enter: quit", "dim")
        self.stream.flush()
        answer = self.keys.readline()
        return answer != "" and answer.strip().lower() not in ("q", "quit")

    def section(self, section: Section) -> None:
        """A benchmark section: its tables (numbers right-aligned; boxed on a terminal, plain
        aligned text otherwise), then their notes."""
        from pagedkv.model_tests.bench.report import plain_text, rich_table

        for found in section.tables:
            if self.console is None:
                print(plain_text(found), file=self.stream)
            else:
                self.console.print(rich_table(found))
            for note in found.notes:
                self.line(f"  {note}", "dim")
            self.line()

    @contextmanager
    def progress(self, text: str, total: int, unit: str, doing: str) -> Iterator[progress.Progress]:
        """The spinner (``text`` until the first update) on a terminal; elsewhere a line on
        stderr every ``PAGEDKV_PROGRESS`` seconds (``model_tests/oracle/progress.py``)."""
        if self.console is not None:
            with self.console.status(text) as status:
                yield progress.Progress(total, unit, doing, status.update, progress.TERMINAL_EVERY)
            return
        yield progress.Progress(
            total, unit, doing, self._progress_line, progress.every_from_environment()
        )

    def _progress_line(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stderr loses only this line
            print(f"pagedkv: {text}", file=self.errors, flush=True)

    @contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        if self.console is None:
            yield lambda _: None
            return
        with self.console.status(text) as status:
            yield lambda message: status.update(message)


# --- commands ---------------------------------------------------------------------------------


def _level(text: str) -> Level:
    return codec.level_of(text)


def _profile(args: argparse.Namespace, level: Level) -> Profile:
    try:
        return check_profile(args.profile, args.policy, level)
    except OptionError as error:
        if error.option is None:
            raise UsageError(str(error)) from None
        raise UsageError(f"argument --{error.option}: {error} (see pagedkv check --help)") from None


def _layouts(groups: tuple[GroupKind, ...] | None, level: Level) -> tuple[GroupKind, ...]:
    """The request level's group layouts (all by default); ``--groups`` at any other level
    would be ignored, so it is a usage error."""
    if groups is not None and level != "request":
        raise UsageError("--groups is for the request level (--level request)")
    return groups if groups is not None else LAYOUTS


def cmd_check(args: argparse.Namespace, out: Output) -> int:
    level = _level(args.level)
    layouts = _layouts(args.groups, level)
    profile = _profile(args, level)
    trace_out = trace.check_writable(args.trace_out)
    files = VerdictFiles(args.json, args.junit_xml)
    clock = Clock(__version__)
    known = None if args.known is None else load_known(args.known, level)
    factory = targets.check(args.target, level, args.timeout, policy=profile.policy)
    steps = default_steps(level) if args.steps is None else args.steps
    runs, _ = budget(steps)
    shared = None if args.database is None else open_database(args.database, args.target)

    with out.progress(
        f"checking {args.target} against the reference ...",
        runs * args.workers,
        "runs",
        "checking",
    ) as shown:

        def progress(runs: int, calls: int, failing: bool) -> None:
            shown(runs, calls, "shrinking a divergence" if failing else "")

        if args.workers > 1:  # model_tests/oracle/workers.py
            seed = random.randrange(2**32) if args.seed is None else args.seed
            job = Job(
                args.target,
                level,
                profile,
                steps,
                trace_out,
                args.timeout,
                known,
                args.contract,
                layouts,
                args.database,
            )
            result = check_in_workers(job, seeds_of(seed, args.workers), progress)
        else:
            result = run_check(
                factory,
                level,
                steps=steps,
                seed=args.seed,
                trace_out=trace_out,
                progress=progress,
                profile=profile,
                timeout=args.timeout,
                known=known,
                contract=args.contract,
                layouts=layouts,
                shared=shared,
            )
    hint = None
    written = result.trace_path  # absolute: where it is, whatever directory the target chose
    if written == trace_out:  # named as the user did, from the directory pagedkv started in
        result.trace_path = Path(args.trace_out)
    if result.trace_path is not None:
        hint = _replay_command(result.trace_path, args.target, args.timeout)
    report = check_report(result, args.target, hint)
    shown_page = None
    if result.trace is not None and written is not None and result.trace_path is not None:
        from pagedkv import pages  # a divergence: only now is there a page to draw

        note, shown_page = pages.divergence_page(
            result.trace, written, factory, args.target, result.trace_path
        )
        report.notes.append(note)
    out.report(report)
    code = EXIT_PASS if result.passed else EXIT_FAIL
    if files.wanted:
        verdict = check_verdict(
            result,
            report,
            target=args.target,
            code=code,
            clock=clock,
            steps=steps,
            replay=hint,
            page=shown_page,
        )
        files.write(verdict, report.plain())
    return code


def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from pagedkv.model_tests.teaching import defrag_demo, demo, request_demo

    if args.step and args.out is None and out.keys is None:
        raise UsageError("--step waits for Enter on standard input, which is closed")
    walks = {"request": request_demo.walk, "defrag": defrag_demo.walk}
    walk = walks.get(args.level, demo.walk)()
    if args.out is not None:
        path = _write_page(walk, args.out)
        out.line(f"wrote {path}: the demo's {len(walk.frames) - 1} steps as a page", "bold")
        return EXIT_PASS
    total = len(walk.frames) - 1
    out.opening(walk)
    for frame in walk.frames:
        out.frame(frame, total)
        if args.step and frame.number < total and not out.wait():
            break
    return EXIT_PASS


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    from pagedkv import pages

    path = Path(args.out) if args.out is not None else pages.page_beside(Path(args.trace))
    if path.resolve() == Path(args.trace).resolve():
        raise UsageError(f"-o {args.out}: that is the trace itself")
    loaded = _read_replayable(args.trace)
    factory = (
        None
        if args.target is None
        else targets.check(args.target, loaded.level, offered=(), policy=loaded.policy)
    )
    walk = pages.trace_walk(loaded, args.trace, factory, args.target)
    written = _write_page(walk, path)
    marked = walk.finding
    where = f"; marked: step {marked.number}" if marked is not None else ""
    out.line(f"wrote {written}: {len(walk.frames) - 1} steps{where}", "bold")
    out.line(walk.verdict)
    return EXIT_PASS


def _write_page(walk: Walk, path: str | Path) -> Path:
    from pagedkv import pages

    try:
        return pages.write_page(walk, path)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def _trace_paths(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found += sorted(path.glob("*.jsonl"))
        elif path.exists():
            found.append(path)
        else:
            raise trace.TraceError(f"{text}: no such file or directory")
    if not found:
        raise trace.TraceError(f"no traces (*.jsonl) in {', '.join(paths)}")
    return found


def _read_replayable(path: str | Path) -> Trace:
    """A trace, refused up front (before any other is replayed) if the reference cannot hold
    its configuration, or it has no steps (and no refused creation to check)."""
    loaded = trace.read(path)
    try:
        trace.check_reference_size(loaded.config)
    except trace.TraceError as error:
        raise trace.TraceError(f"{path}: {error}") from None
    if not loaded.ops and loaded.create_error is None:  # a PASS would say nothing was checked
        raise trace.TraceError(f"{path}: the trace has no steps: nothing to replay")
    return loaded


def cmd_replay(args: argparse.Namespace, out: Output) -> int:
    files = VerdictFiles(args.json, args.junit_xml)
    clock = Clock(__version__)
    loaded = [(path, _read_replayable(path)) for path in _trace_paths(args.trace)]
    if args.level is not None:
        loaded = [(path, one) for path, one in loaded if one.level == args.level]
        if not loaded:
            raise trace.TraceError(f"no {args.level} traces in {', '.join(args.trace)}")
    levels = sorted({one.level for _, one in loaded})
    factories: dict[tuple[Level, Policy], targets.Factory] = {}
    for level, policy in sorted({(one.level, one.policy) for _, one in loaded}, key=str):
        try:
            factories[level, policy] = targets.check(
                args.target, level, args.timeout, offered=(), policy=policy
            )
        except targets.TargetError as error:
            if len(levels) > 1:
                raise targets.TargetError(
                    f"{error} (these traces are of several levels; --level picks one)"
                ) from None
            raise
    worst, passed, steps = EXIT_PASS, 0, 0
    replayed: list[tuple[Path, Trace, Verdict]] = []
    printed: list[str] = []
    with out.progress(
        f"replaying {counted(len(loaded), 'trace')} ...", len(loaded), "traces", "replaying"
    ) as shown:
        for path, one in loaded:
            verdict = trace.replay(one, factories[one.level, one.policy], args.timeout)
            replayed.append((path, one, verdict))
            shown(len(replayed))
            steps += verdict.steps
            if len(loaded) == 1 or not verdict.ok:
                report = replay_report(str(path), one, verdict, args.target)
                out.report(report)
                printed.append(report.plain())
            if verdict.ok:
                passed += 1
            elif verdict.status == "stale":
                worst = max(worst, EXIT_ERROR)
            else:
                worst = max(worst, EXIT_FAIL)
    summary = printed[-1].splitlines()[1] if len(loaded) == 1 else ""
    if len(loaded) > 1:
        if worst == EXIT_PASS:
            summary = f"PASS: {passed} traces, {steps} steps; the target agrees"
            out.line(summary, "bold green")
        else:
            summary = f"FAIL: {len(loaded) - passed} of {len(loaded)} traces fail"
            out.line(summary, "bold red")
        printed.append(summary)
    if files.wanted:
        verdict_object = replay_verdict(
            replayed, summary, target=args.target, code=worst, clock=clock
        )
        files.write(verdict_object, "\n\n".join(printed))
    return worst


def cmd_record(args: argparse.Namespace, out: Output) -> int:
    levels: list[Level] = list(codec.LEVELS) if args.level == "all" else [_level(args.level)]
    directory = Path(args.out)
    check_out(directory, levels, args.force)
    complete = True
    for level in levels:
        with out.status(f"recording {level} traces ...") as update:
            corpus = record_level(
                level,
                directory,
                runs=args.runs,
                seed=args.seed,
                progress=lambda text: update(text),
                force=args.force,
            )
        out.line(corpus.summary(), "bold green" if corpus.complete else "bold red")
        complete = complete and corpus.complete
    return EXIT_PASS if complete else EXIT_FAIL


def cmd_soak(args: argparse.Namespace, out: Output) -> int:
    from pagedkv.model_tests.oracle import soak_model  # the soak's own (its stand-in model)
    from pagedkv.model_tests.oracle.soak import soak

    trace_out = trace.check_writable(args.trace_out)
    files = VerdictFiles(args.json, args.junit_xml)
    clock = Clock(__version__)
    level = _level(args.level)
    factory = targets.check(args.target, level, args.timeout, offered=SOAK_LEVELS)
    exact = args.exact or args.target == "optimized"
    layouts = _layouts(args.groups, level)
    if args.reference_model and not exact:
        raise UsageError(
            "--reference-model is for exact mode (--exact); isomorphic mode's model"
            " is always the reference"
        )
    model = soak_model.REFERENCE
    if exact:
        sample = targets.build(factory, level, args.target)
        viewable = callable(getattr(sample, "view", None))
        if viewable and level == "manager" and not args.reference_model:
            model = soak_model.choose(sample)
        close_target(sample)
        if not viewable:
            raise UsageError(f"--exact compares whole states: {args.target} has no view()")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    with out.progress(f"soaking {args.target} ...", args.steps, "steps", "soaking") as shown:
        result = soak(
            factory,
            args.steps,
            seed,
            exact=exact,
            trace_out=trace_out,
            progress=shown,
            level=level,
            layouts=layouts,
            model=model,
        )
    if result.trace_path == trace_out:  # named as the user did (see cmd_check)
        result.trace_path = Path(args.trace_out)
    report, hint = _soak_report(result, args.target, level, layouts, exact, seed, args.timeout)
    changed = result.stand_in_changed or (
        soak_model.patched() if exact and level == "manager" and not args.reference_model else []
    )
    if changed:
        when = "while the soak ran" if result.stand_in_changed else "after it was loaded"
        report.notes.append(
            f"note: the reference is the model: pagedkv's optimized code was changed {when}"
            f" ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}), and the"
            " optimized stand-in would run those changes"
            + (
                "; the episode it was found in was replayed against the reference"
                if result.stand_in_changed
                else ""
            )
        )
    out.report(report)
    code = EXIT_PASS if result.passed else EXIT_FAIL
    if result.own_bug is not None:  # pagedkv's bug, not the target's (specs/oracle.md §6)
        code = EXIT_ERROR
    if files.wanted and code != EXIT_ERROR:  # an exit 2 has no verdict file (verdict_json.py)
        verdict = soak_verdict(
            result,
            report,
            target=args.target,
            code=code,
            clock=clock,
            level=level,
            groups=layouts if level == "request" else None,
            exact=exact,
            seed=seed,
            steps=args.steps,
            replay=hint,
        )
        files.write(verdict, report.plain())
    return code


def _replay_command(path: Path, target: str, timeout: float | None) -> str:
    """The ``pagedkv replay`` of a written trace, with the ``--timeout`` the run had (a hang
    replayed under the default 30 s would not show)."""
    command = f"pagedkv replay {shlex.quote(str(path))} --target {shlex.quote(target)}"
    return command if timeout is None else f"{command} --timeout {timeout:g}"


def _soak_report(
    result: SoakResult,
    target: str,
    level: Level,
    layouts: Sequence[str],
    exact: bool,
    seed: int,
    timeout: float | None,
) -> tuple[Report, str | None]:
    """What ``soak`` prints, and the command that replays its trace (if one was written)."""
    from pagedkv.model_tests.oracle import soak_model
    from pagedkv.model_tests.oracle.soak import CHECKPOINT, LONGEST_CHECKPOINT

    mode = "exact mode" if exact else "isomorphic mode"
    if result.model != soak_model.REFERENCE.name:
        mode += (
            f", the {result.model} manager as the model, the reference confirming any divergence"
        )
    groups = f", groups {','.join(layouts)}" if level == "request" else ""
    title = f"pagedkv soak {target} ({level} level{groups}, {mode}, seed {seed})"
    rate = result.steps / result.seconds if result.seconds else 0.0
    cpu_rate = result.steps / result.cpu_seconds if result.cpu_seconds else 0.0
    if result.passed:
        verdict = (
            f"PASS: {counted(result.steps, 'step')} in {counted(result.episodes, 'episode')},"
            f" {rate:,.0f} steps/s"
            f" ({cpu_rate:,.0f} per CPU second, load average {os.getloadavg()[0]:.1f}); "
            + (
                f"results and the whole state compared at every step (compact,"
                f" {counted(result.states_compared, 'time')}), the views, the invariants and the"
                f" compact states built fresh every {CHECKPOINT} steps"
                + (
                    f" (two optimized managers compared part by part: the period doubling to"
                    f" {LONGEST_CHECKPOINT} within an episode)"
                    if result.paired
                    else ""
                )
                + f" and at each episode's end ({counted(result.checkpoints, 'time')})"
                + (
                    f"; the target's kept compact state was found stale {len(result.stale)}"
                    " time(s) (a subclass whose own code changes what the optimized manager's"
                    " kept state reads): replayed fresh with no divergence, and read fresh after"
                    " every call since"
                    if result.stale
                    else ""
                )
                if result.states_compared
                else f"results compared at every step, the whole state and the invariants every"
                f" {CHECKPOINT} steps and at each episode's end"
                f" ({counted(result.checkpoints, 'time')})"
                if exact
                else f"results, block tables and free counts compared at every step, the"
                f" reference's invariants every {CHECKPOINT} steps and at each episode's end"
                f" ({counted(result.checkpoints, 'time')})"
            )
        )
        return Report(True, title, verdict), None
    if result.hung:
        notes = ["note: not shrunk or replayed: the target hung, and is not called again"]
        hint = None
        if result.trace_path is not None:
            hint = _replay_command(result.trace_path, target, timeout)
            notes += [
                f"trace: {result.trace_path} (the episode's {counted(result.unshrunk, 'call')},"
                " the one that hung last)",
                f"replay: {hint}",
            ]
        return Report(
            False,
            title,
            f"FAIL after {counted(result.steps, 'step')}: the target does not answer in time"
            " (hangs)",
            show_config(result.config),
            detail=f"expected an answer: {result.failure}",
            notes=notes,
        ), hint
    if result.own_bug is not None and result.failure is None:  # a stale kept state (soak.py)
        return Report(
            False,
            title,
            f"ERROR after {counted(result.steps, 'step')}: a bug of pagedkv's, not the target's",
            show_config(result.config),
            detail=result.own_bug,
            notes=[
                "note: nothing to replay: the target agreed with the model at every call once"
                " whole states were built fresh"
            ],
        ), None
    if result.own_bug is not None:
        target = "optimized"  # the trace shows the optimized manager against the reference
    report = Report(
        False,
        title,
        f"FAIL after {counted(result.steps, 'step')}: shrunk from {result.unshrunk} calls to"
        f" {len(result.calls)}"
        if result.own_bug is None
        else f"ERROR after {counted(result.steps, 'step')}: a bug of pagedkv's, not the target's:"
        f" the optimized model saw '{result.failure}', and the reference disagrees with it (shrunk"
        f" from {result.unshrunk} calls to {len(result.calls)})",
        show_config(result.config),
        [
            StepLine(
                number,
                codec.show_call(op.op, op.args),
                trace.show_expect(level, op.op, op.expect),
                number == len(result.calls),
            )
            for number, op in enumerate(result.trace.ops if result.trace else [], 1)
        ],
        f"diverges: {result.failure if result.own_bug is None else result.own_bug}",
    )
    if result.confirmed:
        report.notes.append(
            "note: found with the optimized manager as the model; confirmed by the reference,"
            " which answers every call of the episode as it did"
        )
    hint = None
    if result.trace_path is not None:
        command = _replay_command(result.trace_path, target, timeout)
        report.notes.append(f"trace: {result.trace_path}")
        if result.replays:
            hint = command
            report.notes.append(f"replay: {hint}")
        else:  # offered nowhere, the verdict file included: that replay would PASS
            report.notes.append(
                f"note: an exact-mode divergence: {command} compares isomorphically and does"
                " not show it (it would pass); the trace holds the calls that lead to it, and"
                f" this soak with seed {seed} shows it again"
            )
    return report, hint


def cmd_bench(args: argparse.Namespace, out: Output) -> int:
    from pagedkv.model_tests.bench.runner import BenchError, resolve_targets
    from pagedkv.model_tests.bench.runner import run as run_bench
    from pagedkv.model_tests.bench.sections import Options as BenchOptions

    reference_calls = None if args.no_reference else args.reference_calls
    written = {  # absolute, and tried, before anything runs
        name: None if path is None else trace.check_writable(path)
        for name, path in (("json", args.json), ("plot", args.plot), ("trace", args.trace_out))
    }
    per_call = timeout.resolve(args.timeout)
    held_to = named_profile(args.profile)
    try:
        held_to.check_level("manager")
    except ValueError as error:
        raise UsageError(f"--profile: {error}") from None
    try:
        found = resolve_targets(args.target, args.baseline, reference_calls, per_call, args.profile)
    except BenchError as error:
        raise UsageError(str(error)) from None
    options = BenchOptions(
        seed=args.seed,
        repetitions=1 if args.quick else args.reps,
        targets=found,
        quick=args.quick,
        scaling=args.scaling,
        scaling_calls=args.scaling_calls,
        kernels=args.kernels,
        defrag=args.defrag,
        trace_out=written["trace"],
        timeout=per_call,
        requests=not args.no_requests,
        native_sides=() if args.no_native else BenchOptions.native_sides,
    )
    try:
        run_bench(options, out.section, written["json"], written["plot"])
    except TargetStopped as stopped:  # a hang is a FAIL, as under check
        who = args.target[0] if len(args.target) == 1 else "a target"
        out.line(f"FAIL: {who} does not answer in time (hangs): {stopped}", "bold red")
        return EXIT_FAIL
    if args.json is not None:
        out.line(f"figures: {args.json}")
    return EXIT_PASS


# --- entry point ------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="pagedkv", description="Check a KV-cache block allocator against pagedkv.")
    top.add_argument("--version", action="version", version=f"pagedkv {__version__}")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser("check", help="run the lockstep machine against a target")
    check.add_argument("--target", required=True, help=TARGET_HELP)
    check.add_argument("--level", type=level_name, default="manager", choices=list(codec.LEVELS))
    _groups_option(check, "the group layouts runs draw from")
    check.add_argument(
        "--steps",
        type=whole_number(1),
        default=None,
        help="about how many rule steps (a step makes one call or more;"
        f" {DEFAULT_STEPS}, {REQUEST_STEPS} at the request level)",
    )
    check.add_argument("--seed", type=seed_number, default=None, help="make the run reproducible")
    check.add_argument(
        "--profile",
        type=profile_name,
        default="pagedkv",
        choices=PROFILE_NAMES,
        help="the reference's policy, or `safety` for the safety tier alone (specs/policy.md)",
    )
    check.add_argument(
        "--policy",
        type=assignment,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one policy option of the profile (repeatable)",
    )
    check.add_argument(
        "--contract",
        type=contract_name,
        default="any",
        choices=CONTRACTS,
        help="which calls to make: any the protocol allows (misuse included), or only those a"
        " scheduler makes (act only after can_* said OK; specs/oracle.md §1)",
    )
    check.add_argument(
        "--trace-out",
        default=DEFAULT_TRACE,
        help=f"where a divergence's trace goes ({DEFAULT_TRACE}; {TRACE_OUT_CHECKED})",
    )
    check.add_argument(
        "--known",
        default=None,
        metavar="FILE",
        help="known differences to count and step past (TOML; specs/oracle.md §9)",
    )
    check.add_argument(
        "--workers",
        type=worker_count,
        default=1,
        metavar="N",
        help="check N seeds at once, SEED to SEED+N-1, each with the whole budget, one process"
        " each; FAIL if any fails (1)",
    )
    check.add_argument(
        "--database",
        default=None,
        metavar="DIR|URL",
        help="share failures through Hypothesis's example database (a directory, or"
        " redis://HOST:PORT/DB): those stored for this check are replayed first, one found is"
        " stored (specs/oracle.md §10)",
    )
    _verdict_file_options(check)
    _timeout_option(check)  # last: its help is the same under every command

    record = commands.add_parser("record", help="write conformance traces from the reference")
    record.add_argument("--level", default="all", choices=[*codec.LEVELS, "all"])
    record.add_argument("--out", default="pagedkv-traces", help="directory (pagedkv-traces)")
    record.add_argument(
        "--runs", type=whole_number(1), default=40, help="traces per level, at least (40)"
    )
    record.add_argument("--seed", type=seed_number, default=0)
    record.add_argument("--force", action="store_true", help="replace traces already in --out")

    replay = commands.add_parser("replay", help="replay traces against a target")
    replay.add_argument("trace", nargs="+", help="trace files or directories of *.jsonl")
    replay.add_argument("--target", required=True, help=TARGET_HELP)
    replay.add_argument(
        "--level", default=None, choices=list(codec.LEVELS), help="replay only this level's"
    )
    _verdict_file_options(replay)
    _timeout_option(replay)  # last: its help is the same under every command

    narrated = commands.add_parser("demo", help="a narrated walk through the algorithm")
    narrated.add_argument(
        "--level",
        default="manager",
        choices=["manager", "request", "defrag"],
        help="the block space manager (default), the request level (vLLM v1's KV cache manager)"
        " or one compaction of the defragmenter",
    )
    narrated.add_argument("--step", action="store_true", help="wait for Enter between steps")
    narrated.add_argument(
        "-o", "--out", default=None, help="write the demo as an HTML page instead"
    )

    show = commands.add_parser("show", help="write a trace as an HTML page to step through")
    show.add_argument("trace", help="a trace file (.jsonl)")
    show.add_argument("-o", "--out", default=None, help="the page (default: TRACE with .html)")
    show.add_argument("--target", default=None, help="replay the trace against T too, side by side")

    soak_ = commands.add_parser(
        "soak", help="a long seeded random walk in lockstep with the reference (no Hypothesis)"
    )
    soak_.add_argument("--target", default="optimized", help="optimized (default) or any target")
    soak_.add_argument(
        "--level", default="manager", choices=SOAK_LEVELS, help="whose walk (manager)"
    )
    _groups_option(soak_, "the group layouts episodes draw from")
    soak_.add_argument(
        "--steps", type=whole_number(1), default=100_000, help="calls on each side (100000)"
    )
    soak_.add_argument("--seed", type=seed_number, default=None, help="make the walk reproducible")
    soak_.add_argument(
        "--exact",
        action="store_true",
        help="compare whole states (view()) as for optimized, not through the protocol",
    )
    soak_.add_argument(
        "--reference-model",
        action="store_true",
        help="in exact mode, keep the reference as the model (by default the optimized manager"
        " stands in for it, several times faster, the reference confirming any divergence)",
    )
    soak_.add_argument(
        "--trace-out",
        default=DEFAULT_TRACE,
        help=f"where a divergence's shrunk trace goes ({DEFAULT_TRACE}; {TRACE_OUT_CHECKED})",
    )
    _verdict_file_options(soak_)
    _timeout_option(soak_)  # last: its help is the same under every command

    bench = commands.add_parser(
        "bench", help="replay a serving workload on the managers and time it (never asserts)"
    )
    bench.add_argument("--seed", type=seed_number, default=0, help="the workload's seed (0)")
    bench.add_argument(
        "--reps", type=whole_number(1), default=5, help="interleaved repetitions (5)"
    )
    bench.add_argument(
        "--target",
        action="append",
        default=[],
        help="also replay on package.module:factory or exec:PROGRAM (repeatable)",
    )
    bench.add_argument(
        "--profile",
        default="pagedkv",
        choices=[name for name in PROFILE_NAMES if ":" not in name and name != "safety"],
        help="the policy every --target follows: they replay the stream the scheduler makes"
        " over the reference under it, their answers held to it (pagedkv)",
    )
    bench.add_argument(
        "--no-requests",
        action="store_true",
        help="leave out the request level (pagedkv and vLLM 0.33.0's KVCacheManager)",
    )
    bench.add_argument(
        "--no-native",
        action="store_true",
        help="leave out the manager level against vLLM 0.6.3 driven natively (which records"
        " the vllm-v0 stream where no --target under that profile did)",
    )
    bench.add_argument(
        "--baseline",
        metavar="REV",
        default=None,
        help="also replay on the optimized manager of git revision REV (in a checkout)",
    )
    bench.add_argument(
        "--reference-calls",
        type=whole_number(0),
        default=REFERENCE_CALLS,
        help=f"replay the reference on the first N calls (0: all; {REFERENCE_CALLS})",
    )
    bench.add_argument("--no-reference", action="store_true", help="leave the reference out")
    bench.add_argument(
        "--scaling",
        type=block_counts,
        default="1024,16384,131072,1048576",
        help="GPU block counts of the growth section, comma-separated ('' to skip)",
    )
    bench.add_argument(
        "--scaling-calls",
        type=whole_number(1),
        default=400_000,
        help="calls per size in it (400000)",
    )
    bench.add_argument("--kernels", action="store_true", help="time the torch kernels too")
    bench.add_argument(
        "--defrag",
        action="store_true",
        help="the defragmenter's serving run and its exchange kernel too (needs torch)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="a tiny smoke run (no figure means much)"
    )
    bench.add_argument(
        "--json", default=None, help=f"write every figure here ({TRACE_OUT_CHECKED})"
    )
    bench.add_argument(
        "--plot", default=None, help=f"draw a PNG here (needs matplotlib; {TRACE_OUT_CHECKED})"
    )
    bench.add_argument(
        "--trace-out",
        default=None,
        help=f"also write the workload as a pagedkv trace (slow; {TRACE_OUT_CHECKED})",
    )
    _timeout_option(bench)
    return top


TRACE_OUT_CHECKED = "made absolute and tried before the search starts; a missing folder is made"


def block_counts(text: str) -> tuple[int, ...]:
    """``--scaling``: comma-separated block counts from 1 to the bound of a configuration, or
    nothing (the section is left out)."""
    parts = [part for part in text.split(",") if part.strip()]
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        values = (0,)
    if (text.strip() and not values) or any(not 1 <= value <= MAX_BLOCKS for value in values):
        raise argparse.ArgumentTypeError(
            "expected comma-separated block counts from 1 to 2**24 ('' for none),"
            f" got {quoted(text)}"
        )
    return values


def _groups_option(command: argparse.ArgumentParser, what: str) -> None:
    """The default is None (all layouts), so that a command can tell an option given at a
    level that has no groups (``_layouts``)."""
    command.add_argument(
        "--groups",
        type=group_layouts,
        default=None,
        metavar="LAYOUTS",
        help=f"request level: {what}, comma-separated ({', '.join(LAYOUTS)}; all three by default)",
    )


def _verdict_file_options(command: argparse.ArgumentParser) -> None:
    written = "written once the verdict is printed; a file already there is removed at the start"
    command.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help=f"also write the verdict as JSON (specs/verdict.schema.json; {written})",
    )
    command.add_argument(
        "--junit-xml",
        default=None,
        metavar="FILE",
        help=f"also write the verdict as JUnit XML, one testcase ({written})",
    )


def _timeout_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="how long one call into the target may take; 0 waits forever"
        " (default: $PAGEDKV_TIMEOUT or 30)",
    )


COMMANDS: dict[str, Callable[[argparse.Namespace, Output], int]] = {
    "check": cmd_check,
    "record": cmd_record,
    "replay": cmd_replay,
    "demo": cmd_demo,
    "show": cmd_show,
    "bench": cmd_bench,
    "soak": cmd_soak,
}


def main(
    argv: Sequence[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    stdin: IO[str] | None = None,
) -> int:
    out_stream = sys.stdout if stdout is None else stdout
    err_stream = sys.stderr if stderr is None else stderr

    def fail(text: str) -> int:
        print(f"pagedkv: {text}", file=err_stream)
        return EXIT_ERROR

    if out_stream is None:
        return fail(
            "error: standard output is closed: there is nowhere to print the verdict"
            " (send it to /dev/null to drop it)"
        )
    try:
        args = parser().parse_args(argv)
    except SystemExit as exit_:  # --help and --version, nothing else
        code = exit_.code if isinstance(exit_.code, int) else EXIT_PASS
        try:
            _flush(sys.stdout)
        except OutputError as error:
            return fail(f"error: {error}")
        except BrokenPipeError:
            return _reader_gone(out_stream)
        return code
    except UsageError as error:
        return fail(f"error: {error}")
    if out_stream is None:  # Python's sys.stdout where descriptor 1 was closed (`>&-`)
        return fail(
            "error: standard output is closed: there is nowhere to print the verdict"
            " (send it to /dev/null to drop it)"
        )
    with _sigterm_interrupts():
        try:
            check_environment(args)
            profiles.pin_generation()
            output = Output(out_stream, keys=stdin, errors=err_stream)
            code = COMMANDS[args.command](args, output)
            _flush(out_stream)  # the verdict is out (or its failure reported) before the code
            return code
        except ONE_LINE_ERRORS as error:
            return fail(f"error: {error}")
        # one write each (``print`` writes the newline apart: a second Ctrl-C between the two
        # left the line open, and the supervisor's own line ran on from it)
        except Terminated:
            _say_once(err_stream, "pagedkv: terminated\n")
            return EXIT_TERMINATED
        except KeyboardInterrupt:
            _say_once(err_stream, "pagedkv: interrupted\n")
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            return _reader_gone(out_stream)
        except MemoryError:
            return fail("error: out of memory")
        except BaseException as error:  # a bug of pagedkv's: still one line, never exit 0
            if os.environ.get(TRACEBACK_VARIABLE) == "1":
                traceback.print_exc(file=err_stream)
            text = " ".join(str(error).split())
            return fail(
                f"internal error: {type(error).__name__}{': ' + text if text else ''}"
                f" ({TRACEBACK_VARIABLE}=1 shows where)"
            )


def _say_once(stream: IO[str], line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # a closed stderr loses only the line
        stream.write(line)
        stream.flush()


def _flush(stream: IO[str]) -> None:
    try:
        stream.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as error:
        text = getattr(error, "strerror", None) or str(error)
        raise OutputError(f"cannot write the output: {text}") from None


def _reader_gone(out_stream: IO[str]) -> int:
    """The reader is gone: nothing more can be said there, and Python's own flush at exit must
    not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    if out_stream is sys.stdout:
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_OUTPUT


def check_environment(args: argparse.Namespace) -> None:
    """Every environment value the command reads, checked before any work starts (the
    timeout's only where the command calls a target and ``--timeout`` does not override it)."""
    if getattr(args, "timeout", False) is None:
        timeout.timeout_from_environment()
    value = os.environ.get(TRACEBACK_VARIABLE)
    if value not in (None, "", "0", "1"):
        raise timeout.SettingError(f"{TRACEBACK_VARIABLE}={value!r}: expected 0 or 1")
    progress.every_from_environment()


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RESEND_AFTER = 0.1
"""Seconds before a dropped signal is sent again: once the callback that dropped it is over."""


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` and SIGINT ``KeyboardInterrupt`` in the main thread while a
    command runs, until the command stops."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    def dropped(unraisable: Any) -> None:
        # Python prints and drops an exception raised while a garbage-collection callback or a
        # finalizer runs: a signal that landed there is sent again, so that it stops the command.
        if isinstance(unraisable.exc_value, Interrupted):
            return  # the watchdog's, in a target's finalizer: it interrupts again shortly
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            terminated = isinstance(unraisable.exc_value, Terminated)
            again = signal.SIGTERM if terminated else signal.SIGINT
            resend = threading.Timer(RESEND_AFTER, os.kill, (os.getpid(), again))
            resend.daemon = True
            resend.start()
        else:
            previous_hook(unraisable)

    previous = {
        number: signal.signal(number, interrupt)
        for number in STOPPING_SIGNALS
        if signal.getsignal(number) is not signal.SIG_IGN  # `nohup`, `&` in a script: theirs
    }
    previous_hook, sys.unraisablehook = sys.unraisablehook, dropped
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for number, handler in previous.items():
            signal.signal(number, handler)


if __name__ == "__main__":
    sys.exit(main())
