"""A verdict only from a living process: the ``pagedkv`` command's thin parent.

Every command runs in a child process (``os.fork``, once pagedkv's modules are imported and before
any thread exists, so that the child starts at once with all of them), and the parent only waits.
The child writes its exit code on a pipe once its verdict is out (``verdict_pipe``); the parent
exits with that code. Whatever a target does to the child, the parent is still there to say what
happened:

- the child ends without a verdict (a target called ``os._exit(0)`` or a C library's
  ``exit(0)``, or crashed): one line ``pagedkv: FAIL: ...`` on stderr, exit code 1;
- a target left threads running: the child does not wait for them after its verdict (it runs its
  exit handlers, which kill ``exec:`` programs, and ends); if it is still there ``GRACE`` seconds
  after its verdict, the parent kills it;
- Ctrl-C reaches both processes from the terminal and the child answers it as before; a signal sent
  to the parent alone (``kill``) is passed on to the child, whose one line and code (130, 143)
  become the parent's.

Where ``os.fork`` or ``signal.sigtimedwait`` is missing (Windows, macOS), or a thread already
exists, the command runs in this process as it always did.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from pagedkv.model_tests.oracle import reaper, verdict_pipe

GRACE = 5.0
"""Seconds the child may take to end after its verdict: its exit handlers kill ``exec:``
programs (up to 2 s each)."""
POLL = 0.1
"""Seconds between two looks at the pipe while no signal comes."""
EXIT_FAIL, EXIT_ERROR = 1, 2
SI_KERNEL = 0x80
"""``si_code`` of a signal the kernel sent: the terminal's Ctrl-C goes to the whole foreground
process group, the child included, and is not passed on again."""
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOPPED_LINE = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated",
    signal.SIGHUP: "hung up",
}


def can_fork() -> bool:
    """Whether the command can run in a child that the parent watches."""
    return (
        hasattr(os, "fork")
        and hasattr(signal, "sigtimedwait")
        and threading.active_count() == 1  # forking a threaded process copies held locks
    )


def run_apart(command: Callable[[], int]) -> int:
    """``command()`` in a child; the exit code it declared with its verdict, or the parent's
    account of why there was none."""
    if not can_fork():
        return command()
    _stdio_open()  # the pipe must not take a closed descriptor 0-2 that the child writes to
    waited = {number for number in PASSED_ON if signal.getsignal(number) is not signal.SIG_IGN}
    waited.add(signal.SIGCHLD)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would reap the child
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    read_end, write_end = os.pipe()
    parent = os.getpid()
    try:
        child = os.fork()
    except OSError:  # no process to spare: run here, as where fork is missing
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        os.close(read_end)
        os.close(write_end)
        return command()
    if child == 0:
        os.close(read_end)
        verdict_pipe.attach(write_end)
        reaper.end_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        _child(command)
    os.close(write_end)
    return _watch(child, read_end, waited)


def _child(command: Callable[[], int]) -> NoReturn:
    """Run the command, declare its code, and end without waiting for a target's threads."""
    try:
        code = command()
    except KeyboardInterrupt as stop:
        # the user's Ctrl-C (or SIGTERM, ``pagedkv.cli``'s subclass) landing after the command's
        # own handler had stopped catching it, say while it printed its line: the user's stop
        code, line = (
            (130, "interrupted") if type(stop) is KeyboardInterrupt else (143, "terminated")
        )
        _say(f"pagedkv: {line}")
    except BaseException as error:  # a bug of pagedkv's own: still one line, never a PASS
        _say(f"pagedkv: internal error: {type(error).__name__}: {error}")
        code = EXIT_ERROR
    verdict_pipe.declare(code)
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()  # what a normal exit would run: exec: programs are killed
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()
    os._exit(code)


def _watch(child: int, read_end: int, waited: set[signal.Signals]) -> int:
    os.set_blocking(read_end, False)
    verdict: int | None = None
    stopped: int | None = None
    deadline = 0.0
    while True:
        if verdict is None:
            verdict = _read(read_end)
            deadline = time.monotonic() + GRACE  # counted from the first look that found it
        try:
            done, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: how it ended is unknown
            done, status = child, 0
        if done:
            if verdict is None:
                verdict = _read(read_end)  # written just before it ended
            return _outcome(verdict, status, stopped)
        if verdict is not None and time.monotonic() > deadline:
            _kill(child)
            _say(
                f"pagedkv: note: the command's process had not ended {GRACE:g} s after its"
                " verdict (a target's exit handler?): killed"
            )
            return verdict
        info = signal.sigtimedwait(waited, POLL)
        if info is not None and info.si_signo != signal.SIGCHLD:
            stopped = info.si_signo
            if info.si_code != SI_KERNEL:  # the terminal signals the child itself
                with contextlib.suppress(OSError):
                    os.kill(child, info.si_signo)


def _read(read_end: int) -> int | None:
    try:
        got = os.read(read_end, 1)
    except BlockingIOError:
        return None
    return got[0] if got else None


def _outcome(verdict: int | None, status: int, stopped: int | None) -> int:
    if verdict is not None:
        return verdict
    if stopped is not None:  # the user's stop, which ended it before it could say so
        _say(f"pagedkv: {STOPPED_LINE.get(signal.Signals(stopped), 'stopped')}")
        return 128 + stopped
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        _say(
            f"pagedkv: FAIL: the command's process was killed by {_signal_name(number)} before"
            " its verdict (a crash in a target's native code, or the system out of memory)"
        )
    else:
        _say(
            f"pagedkv: FAIL: the command's process ended (exit status"
            f" {os.waitstatus_to_exitcode(status)}) before its verdict (a target that calls"
            " os._exit() or a C library's exit() ends it)"
        )
    return EXIT_FAIL


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill(child: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def _stdio_open() -> None:
    """/dev/null in place of a closed standard descriptor (Python has already seen it closed:
    its ``sys.stdout`` is None, which the command reports)."""
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != descriptor:
                os.dup2(opened, descriptor)
                os.close(opened)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


__all__ = ["GRACE", "can_fork", "run_apart"]
