"""A target that is a separate program speaking JSON lines over stdin/stdout.

This is how an allocator written in C++, Rust or Go is checked without Python bindings. Each
request is one JSON object on one line of the program's stdin; each answer one JSON object on one
line of its stdout (anything for humans goes to stderr)::

    -> {"op": "create", "level": "manager", "config": {"block_size": 2, ...}}
    <- {"result": null}
    -> {"op": "allocate", "args": [1, [2], [3, 1, 4]]}
    <- {"result": null}
    -> {"op": "get_block_table", "args": [2]}
    <- {"result": [7, 6]}
    -> {"op": "free", "args": [99]}
    <- {"error": "UnknownSequenceError", "message": "sequence 99 is not live"}

Arguments and results are encoded by ``codec``. ``create`` may come again at any time: the program
then discards its instance and builds a new one (so one process serves many runs). The program
exits when its stdin closes. ``example_peer`` is a complete peer, in Python.

``ExecFactory`` is a target factory: calling it with a configuration gives an ``ExecTarget``, a
Python object with the protocol's methods that forwards each call. Errors named after a class of
``pagedkv.specs.errors`` are raised as that class; anything else (a dead program, a line that is not
JSON, an answer of the wrong shape, an error class pagedkv does not know) raises a ``PeerError``
whose message says what happened.

Each program runs in its own process group (a new session), and the whole group is killed when
the program is no longer wanted or does not answer in time, so a wrapper script's children go
with it. A request that is not answered in time raises ``TargetTimeout``: the run stops there,
and the factory is *hung*: later requests (replays while the failing run is shrunk) wait at most
``max(1 s, 10 x the slowest answer seen)``, never the full timeout again, except the first
request to a freshly started program, which may take its start-up time.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pagedkv.model_tests.oracle import codec, reaper
from pagedkv.model_tests.oracle.codec import JSON, CodecError, Level
from pagedkv.model_tests.oracle.timeout import TargetTimeout, resolve, show, wait_limit

MAX_IDLE = 4
MAX_ANSWER_BYTES = 16 * 2**20
"""The longest answer line a program may send."""
HUNG_FLOOR = 1.0
HUNG_FACTOR = 10.0
"""Once a program has hung: later requests wait max(HUNG_FLOOR, HUNG_FACTOR x slowest answer)."""


class PeerError(Exception):
    """The program did not answer as the protocol says."""


class ExecSetupError(Exception):
    """The program cannot be started (not found, not executable)."""


def parse_command(command: str) -> list[str]:
    """``./my-engine --flag`` -> argv with the program resolved, or ExecSetupError."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise ExecSetupError(f"cannot parse the command {command!r}: {error}") from None
    if not argv:
        raise ExecSetupError("exec: needs a program, e.g. exec:./my-engine")
    program = argv[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program)
        if not path.exists():
            raise ExecSetupError(f"program {program} not found")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise ExecSetupError(f"program {program} is not executable")
    else:
        found = shutil.which(program)
        if found is None:
            raise ExecSetupError(f"program {program} not found on PATH")
        argv[0] = found
    return argv


_SERIAL = itertools.count(1)


class _Peer:
    """One running program (the leader of its own process group): a line-oriented
    request/answer channel with a timeout."""

    def __init__(self, argv: list[str], factory: ExecFactory) -> None:
        self.argv = argv
        self.factory = factory
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill)
        self.mark = f"{os.getpid()}.{next(_SERIAL)}"
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                bufsize=0,
                start_new_session=True,
                env={**os.environ, reaper.MARK: self.mark},
            )
        except OSError as error:
            self.stderr.close()
            raise ExecSetupError(f"cannot start {argv[0]}: {error.strerror or error}") from None
        self.buffer = b""
        self.requests = 0
        self.healthy = True
        self.killed = False

    def request(self, message: JSON) -> dict[str, JSON]:
        if not self.healthy:
            raise PeerError("the target program is no longer usable after an earlier failure")
        try:
            return self._request(message)
        except (PeerError, TargetTimeout):
            self.healthy = False
            self.kill()
            raise

    def _request(self, message: JSON) -> dict[str, JSON]:
        first = self.requests == 0
        self.requests += 1
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message, allow_nan=False) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise PeerError(self._died("before it read request", message)) from None
        started = time.monotonic()
        line = self._read_line(message, self.factory.wait_for(first))
        if not first:
            self.factory.answered_in(time.monotonic() - started)
        try:
            answer = codec.parse_json(line.decode())
        except (CodecError, UnicodeDecodeError):
            raise PeerError(
                f"the target program answered {_op_of(message)} with a line that is not JSON:"
                f" {_clip(line.decode(errors='replace'))!r}"
            ) from None
        if not isinstance(answer, dict) or not (
            set(answer) == {"result"} or set(answer) in ({"error"}, {"error", "message"})
        ):
            raise PeerError(
                f"the target program answered {_op_of(message)} with {_clip(repr(answer))},"
                ' not {"result": ...} or {"error": ..., "message": ...}'
            )
        return answer

    def _read_line(self, message: JSON, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        limit = wait_limit(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        while b"\n" not in self.buffer.lstrip(b"\r\n"):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                shortened = self.factory.hung is not None and timeout < self.factory.timeout
                self.factory.hang(_op_of(message))
                why = (
                    f" (shortened: it already hung once for {show(self.factory.timeout)})"
                    if shortened
                    else " (--timeout or PAGEDKV_TIMEOUT)"
                )
                raise TargetTimeout(
                    f"the target program did not answer {_op_of(message)} within"
                    f" {show(timeout)}{why}; its process group was killed"
                )
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise PeerError(self._died("without answering", message))
            self.buffer += chunk
            if len(self.buffer) > MAX_ANSWER_BYTES:
                raise PeerError(
                    f"the target program answered {_op_of(message)} with a line longer than"
                    f" {MAX_ANSWER_BYTES // 2**20} MiB"
                )
        line, _, self.buffer = self.buffer.lstrip(b"\r\n").partition(b"\n")
        return line.rstrip(b"\r")

    def _died(self, when: str, message: JSON) -> str:
        code = self._exit_code(wait=2.0)
        status = "closed its stdout" if code is None else f"exited with code {code}"
        text = f"the target program {status} {when} {_op_of(message)}"
        tail = self.stderr_tail()
        return f"{text}; its stderr ends: {tail}" if tail else text

    def stderr_tail(self, lines: int = 3) -> str:
        try:
            self.stderr.seek(0)
            text = self.stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def kill(self) -> None:
        """Kill the program's whole process group (its children too), then what left the group
        (``reaper``), then reap it. Once, and only before it is reaped: the group's id is the
        program's pid, not ours after that."""
        if self.killed:
            return
        self.killed = True
        below = reaper.descendants(self.proc.pid)  # read before the kill: then they are orphans
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        reaper.kill_all(below + [pid for pid in reaper.strays(self.mark) if pid not in below])
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _exit_code(self, wait: float = 0.0) -> int | None:
        """The program's exit code (negative: killed by that signal) once it has exited, read
        without reaping it: until ``kill`` reaps it, its pid still names its process group."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        deadline = time.monotonic() + wait
        while True:
            try:
                info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return self.proc.poll()
            if info is not None:
                killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                return -info.si_status if killed else info.si_status
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def alive(self) -> bool:
        return self.healthy and self._exit_code() is None


def _op_of(message: JSON) -> str:
    return repr(message.get("op")) if isinstance(message, dict) else "a request"


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ExecFactory:
    """Makes ``ExecTarget``s backed by ``argv``; idle programs are reused (``create`` resets)."""

    def __init__(self, argv: list[str], level: Level, timeout: float | None = None) -> None:
        self.argv = argv
        self.level = level
        self.timeout = resolve(timeout)
        self.hung: str | None = None
        """The request that was not answered in time, once one was not."""
        self.slowest = 0.0
        self.idle: list[_Peer] = []
        self.spawned: list[_Peer] = []
        self.__name__ = f"exec:{shlex.join(argv)}"
        atexit.register(self.close)

    @property
    def retries_after_hang(self) -> bool:
        """A hung program is killed; a new one can be started (and is waited for less)."""
        return True

    def wait_for(self, first: bool) -> float:
        """How long to wait for an answer (the first one of a program includes its start)."""
        if self.hung is None or first:
            return self.timeout
        return min(self.timeout, max(HUNG_FLOOR, HUNG_FACTOR * self.slowest))

    def answered_in(self, seconds: float) -> None:
        self.slowest = max(self.slowest, seconds)

    def hang(self, what: str) -> None:
        if self.hung is None:
            self.hung = what

    def __call__(self, config: Any) -> ExecTarget:
        peer = self._peer()
        answer = peer.request(
            {"op": "create", "level": self.level, "config": codec.encode_config(config)}
        )
        if "error" in answer:
            self.release(peer)
            raise _error_of(answer, "create")
        try:
            offers = offered(self.level, answer.get("result"))
        except PeerError:
            self.release(peer)
            raise
        return ExecTarget(self, peer, config, offers)

    def _peer(self) -> _Peer:
        while self.idle:
            peer = self.idle.pop()
            if peer.alive():
                return peer
        for gone in [p for p in self.spawned if not p.alive()]:
            gone.kill()  # its children, if any, go with it
            self.spawned.remove(gone)
        peer = _Peer(self.argv, self)
        self.spawned.append(peer)
        return peer

    def release(self, peer: _Peer) -> None:
        if peer.alive() and len(self.idle) < MAX_IDLE and peer not in self.idle:
            self.idle.append(peer)
        elif peer not in self.idle:
            peer.kill()

    def close(self) -> None:
        for peer in self.spawned:
            peer.kill()
        self.spawned.clear()
        self.idle.clear()


def _error_of(answer: dict[str, JSON], op: str) -> Exception:
    name, message = answer.get("error"), answer.get("message", "")
    text = message if isinstance(message, str) else repr(message)
    try:
        return codec.error_class(name)(text)
    except CodecError:
        return PeerError(f"the target program answered {op} with the error {name!r}: {text}")


def offered(level: Level, created: JSON) -> frozenset[str]:
    """The optional operations a program offers, from its answer to ``create``: ``null``, or
    ``{"offers": [names]}`` naming optional operations of the level (``specs/oracle.md`` §3)."""
    if created is None:
        return frozenset()
    table = codec.OPS[level]
    names = created.get("offers") if isinstance(created, dict) else None
    if (
        not isinstance(created, dict)
        or set(created) != {"offers"}
        or not isinstance(names, list)
        or not all(isinstance(n, str) and n in table and table[n].optional for n in names)
    ):
        optional = sorted(name for name, op in table.items() if op.optional)
        raise PeerError(
            f"the target program answered create with {_clip(json.dumps(created))}: expected"
            f' null or {{"offers": [...]}} naming optional {level} operations'
            f" ({', '.join(optional) or 'none at this level'})"
        )
    return frozenset(names)


class ExecTarget:
    """The manager (or pool) protocol, forwarded to a program. Use ``close()`` when done (it is
    also done when the object is collected); the program then serves the next target."""

    def __init__(
        self, factory: ExecFactory, peer: _Peer, config: Any, offers: frozenset[str] = frozenset()
    ) -> None:
        self._factory = factory
        self._peer: _Peer | None = peer
        self._config = config
        self._offers = offers
        """The optional operations the program said it offers when it was created."""

    @property
    def config(self) -> Any:
        return self._config

    def call(self, op: str, *args: Any) -> Any:
        if self._peer is None:
            raise PeerError("this target was closed")
        level = self._factory.level
        try:
            encoded = codec.encode_args(level, op, args)
        except CodecError as error:
            raise PeerError(f"cannot send {op}: {error}") from None
        answer = self._peer.request({"op": op, "args": encoded})
        if "error" in answer:
            raise _error_of(answer, op)
        try:
            return codec.decode_result(level, op, answer["result"])
        except CodecError as error:
            raise PeerError(f"the target program's answer is malformed: {error}") from None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        table = codec.OPS[self._factory.level]
        if name.startswith("_") or name not in table:
            raise AttributeError(name)
        if table[name].optional and name not in self._offers:
            raise AttributeError(name)  # not offered at create (oracle.md §3)

        def forward(*args: Any) -> Any:
            return self.call(name, *args)

        forward.__name__ = name
        return forward

    def close(self) -> None:
        peer, self._peer = self._peer, None
        if peer is not None:
            self._factory.release(peer)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def close_target(target: object) -> None:
    """Give an ``ExecTarget``'s program back to its factory; any other target is left alone."""
    if isinstance(target, ExecTarget):
        target.close()


def exec_factory(command: str, level: Level, timeout: float | None = None) -> ExecFactory:
    return ExecFactory(parse_command(command), level, timeout)


__all__ = [
    "ExecFactory",
    "ExecSetupError",
    "ExecTarget",
    "PeerError",
    "close_target",
    "exec_factory",
    "parse_command",
]
