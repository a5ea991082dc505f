"""A per-call deadline for a target called directly on the main thread, kept by interrupting it.

``guard.py`` calls an in-process target directly when the caller is the main thread of a POSIX
process: no hand-off to another thread, so a call costs what the target costs. The promise stays
the worker thread's: a call that has not returned by its deadline ends in ``TargetTimeout``. One
daemon thread, the watchdog, keeps the deadlines. The caller announces each call by writing one
attribute (``Watchdog.current``: the call's deadline, linked to the call it is nested in); the
watchdog sleeps until the soonest deadline it has seen and, if that call is still under way, sends
SIGALRM to the main thread with ``signal.pthread_kill`` (so that a blocking system call, a
``time.sleep`` or a lock wait, is cut short too). The handler raises ``Interrupted``, a private
``BaseException`` that the guard turns into ``TargetTimeout``.

A target that catches the interrupt (a bare ``except:``) gets another every ``grace`` seconds,
and a call that outlived its deadline is a timeout however it ends. One that has still not
returned after ``INTERRUPTS`` interrupts cannot be stopped from inside the process (it catches
every one, replaced the handler, or waits in C code that never looks at signals): the watchdog
says so on stderr and ends the process with exit code 1, a FAIL, as pytest-timeout's thread
method does, since the main thread will never come back to report it.

``watching()`` installs the handlers: SIGALRM, and SIGINT and SIGTERM where Python handles them,
only to count them, so that the user's Ctrl-C (which still ends pagedkv) can be told from a
target's own ``KeyboardInterrupt``. It is held for a whole check, replay or soak, and around a
single call made outside them; the previous handlers are back when it ends. A SIGALRM that is not
the watchdog's goes to the previous handler. Where this cannot work (another thread, no
``pthread_kill``, a handler installed outside Python that could not be put back), ``watching()``
says so and the guard uses its worker thread instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, ParamSpec, TypeVar

from pagedkv.model_tests.oracle import verdict_pipe
from pagedkv.model_tests.oracle.timeout import show

MAIN_THREAD = threading.main_thread().ident
INTERRUPT_SIGNAL: int | None = getattr(signal, "SIGALRM", None)
CAN_INTERRUPT = INTERRUPT_SIGNAL is not None and hasattr(signal, "pthread_kill")
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE = 1.0
"""Seconds between two interrupts of a call that goes on (at most its timeout)."""
INTERRUPTS = 5
"""Interrupts a call may outlive before the process is ended."""
LONGEST_SLEEP = 0.25
"""The watchdog looks at least this often while something is watched (a shorter timeout may
begin while it sleeps towards a longer one's deadline)."""
SETTLE = 0.5
"""Seconds to wait, when watching ends, for an interrupt already sent to reach the handler."""

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[[int, FrameType | None], Any] | int | None


class Interrupted(BaseException):
    """The watchdog's interrupt of ``call``; never leaves ``guard.py``."""

    def __init__(self, call: Call) -> None:
        super().__init__()
        self.call = call


class Call:
    """One call under way on the main thread: its deadline, and the call it is nested in."""

    __slots__ = ("args", "deadline", "describe", "interrupts", "outer", "timeout")

    def __init__(
        self,
        timeout: float,
        describe: Callable[[tuple[Any, ...]], str],
        args: tuple[Any, ...],
        outer: Call | None,
        now: float,
    ) -> None:
        self.timeout = timeout
        self.deadline = now + timeout
        self.describe = describe
        self.args = args
        """The call is written out (``what``) only for a message: a check makes hundreds of
        thousands of calls, each a ``Call``."""
        self.outer = outer
        self.interrupts = 0
        """Sent so far; once it is not 0, the call is a timeout however it ends."""

    def what(self) -> str:
        """The call, in words (``describe(args)``)."""
        return self.describe(self.args)

    @property
    def grace(self) -> float:
        """Seconds between two interrupts (asked only once a call is late: a check makes
        hundreds of thousands of calls, each made a ``Call``)."""
        return min(GRACE, self.timeout)

    def due(self) -> float:
        """When the next interrupt is due if the call is still under way."""
        return self.deadline + self.interrupts * self.grace


class Watchdog:
    """The process's one watchdog: the calls under way on the main thread, and the handlers."""

    def __init__(self) -> None:
        self.current: Call | None = None
        self.depth = 0
        """How many ``watching()`` are open (on the main thread)."""
        self.usable = False
        """Whether the open ``watching()`` installed the handlers."""
        self.previous: dict[int, Handler] = {}
        self.sent = 0
        """Interrupts sent (written by the watchdog only)."""
        self.seen = 0
        """Interrupts handled (written by the handler, on the main thread, only)."""
        self.aimed: Call | None = None
        self.stops = 0
        """SIGINT and SIGTERM handled while watching: the user's, not a target's."""
        self.lock = threading.Lock()
        """Held while an interrupt is decided and sent, and while watching ends."""
        self.awake = threading.Event()
        self.thread: threading.Thread | None = None

    # --- the main thread's side --------------------------------------------------------------

    def install(self) -> bool:
        """Our handlers in place of the current ones; False (nothing changed) where they could
        not be put back afterwards."""
        assert INTERRUPT_SIGNAL is not None
        previous = {INTERRUPT_SIGNAL: signal.getsignal(INTERRUPT_SIGNAL)}
        if previous[INTERRUPT_SIGNAL] is None:
            return False
        for stopping in STOPPING_SIGNALS:
            handler = signal.getsignal(stopping)
            if callable(handler):  # only then can it raise: otherwise left alone
                previous[stopping] = handler
        self.previous = previous
        self.seen = self.sent  # one lost before (a target's own handler took it) is forgotten
        for number in previous:
            signal.signal(number, self.on_alarm if number == INTERRUPT_SIGNAL else self.on_stop)
        if self.thread is None:
            self.thread = threading.Thread(target=self.watch, name="pagedkv watchdog", daemon=True)
            self.thread.start()
        return True

    def uninstall(self) -> None:
        """The previous handlers back, once no interrupt can still reach ours."""
        with self.lock:  # depth is 0: nothing more is sent after this
            pass
        settled = time.monotonic() + SETTLE
        while self.seen != self.sent and time.monotonic() < settled:
            time.sleep(0.001)  # a system call: a pending signal is handled on its way back
        self.seen = self.sent  # lost if it has not come by now
        for number, handler in self.previous.items():
            mine = self.on_alarm if number == INTERRUPT_SIGNAL else self.on_stop
            if signal.getsignal(number) == mine:  # unless someone has replaced ours since
                signal.signal(number, handler)
        self.previous = {}

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.seen == self.sent:  # not ours
            _forward(self.previous.get(signum, signal.SIG_DFL), signum, frame)
            return
        self.seen = self.sent
        aimed, call = self.aimed, self.current
        while call is not None:
            if call is aimed:
                raise Interrupted(aimed)
            call = call.outer
        # that call is over: a late interrupt, dropped

    def on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stops += 1
        _forward(self.previous.get(signum, signal.SIG_DFL), signum, frame)

    # --- the watchdog's side -----------------------------------------------------------------

    def watch(self) -> None:
        while True:
            self.awake.clear()
            if self.depth == 0:
                self.awake.wait()
                continue
            now = time.monotonic()
            wake = now + LONGEST_SLEEP
            call = self.current
            while call is not None:
                due = call.due()
                if now >= due:
                    self.interrupt(call)
                    due = now + call.grace
                wake = min(wake, due)
                call = call.outer
            self.awake.wait(max(0.0, wake - now))

    def interrupt(self, call: Call) -> None:
        with self.lock:
            if self.depth == 0 or not self.under_way(call):
                return
            if call.interrupts >= INTERRUPTS:
                give_up(call)
            call.interrupts += 1
            self.aimed = call
            self.sent += 1
            assert MAIN_THREAD is not None and INTERRUPT_SIGNAL is not None
            signal.pthread_kill(MAIN_THREAD, INTERRUPT_SIGNAL)

    def under_way(self, wanted: Call) -> bool:
        call = self.current
        while call is not None:
            if call is wanted:
                return True
            call = call.outer
        return False


def _forward(handler: Handler, signum: int, frame: FrameType | None) -> None:
    """What ``handler`` would have done with the signal."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def give_up(call: Call) -> None:
    """The main thread cannot be given back: say why, and end the process as a FAIL."""
    with contextlib.suppress(Exception):
        what = call.what()
        os.write(
            2,
            (
                f"pagedkv: FAIL: the target did not return from {what} within"
                f" {show(call.timeout)} (--timeout or PAGEDKV_TIMEOUT), and went on through"
                f" {call.interrupts} interrupts {call.grace:g} s apart: it catches them, or"
                " waits in code that never looks at them. An in-process target cannot be"
                " stopped otherwise: pagedkv ends here (serve it as a program, which can be"
                " killed: --target 'exec:python -m pagedkv.model_tests.oracle.example_peer --impl"
                " MODULE:FACTORY')\n"
            ).encode(),
        )
    verdict_pipe.declare(1)  # this line is the verdict (``pagedkv/supervisor.py``)
    os._exit(1)


WATCHDOG = Watchdog()


def here() -> bool:
    """Whether calls made now can be interrupted: the main thread of a POSIX process."""
    return CAN_INTERRUPT and threading.get_ident() == MAIN_THREAD


@contextlib.contextmanager
def watching() -> Iterator[bool]:
    """The handlers in place while it is open (re-entrant); whether direct calls may be made."""
    dog = WATCHDOG
    if not here():
        yield False
        return
    if dog.depth:
        dog.depth += 1
        try:
            yield dog.usable
        finally:
            dog.depth -= 1
        return
    dog.usable = dog.install()
    dog.depth = 1
    dog.awake.set()
    try:
        yield dog.usable
    finally:
        dog.depth = 0
        if dog.usable:
            dog.usable = False
            dog.uninstall()


def watched(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` with ``watching()`` open while it runs: the handlers are installed once for
    all the calls it makes into targets, not around each."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with watching():
            return function(*args, **kwargs)

    return run


__all__ = ["MAIN_THREAD", "WATCHDOG", "Call", "Interrupted", "here", "watched", "watching"]
