"""In-process targets under the same per-call timeout as ``exec:`` ones, and never able to end
pagedkv.

On the main thread of a POSIX process, a Python target (its factory, then each operation) is
called directly, and the watchdog (``watchdog.py``) interrupts a call that outlives its deadline;
elsewhere (another thread, another system) every call runs on one worker thread that the guard
owns, while the caller waits at most the timeout. Why not a subprocess: a factory need not be
importable by name (the pytest plugin and ``pagedkv.check`` take any callable, closures
included), calls cost microseconds rather than a JSON round trip, and the target keeps running
on one thread, as an engine would. Either way, once a call has timed out the factory is *hung*:
every later call raises ``TargetTimeout`` at once, without calling the target (an interrupted
target may have been left half-way through a call; a worker thread cannot be stopped at all, so
it is abandoned: a daemon thread, a busy loop keeps using its CPU until pagedkv exits). The run in
which it hung is reported as it stood (it is not shrunk: that would call the target again).

A target that raises a ``BaseException`` that is not an ``Exception`` (``SystemExit`` from
``sys.exit()``, ``GeneratorExit``, its own ``KeyboardInterrupt``) gets a ``TargetCrash``, an
ordinary exception, so that it is a divergence like any untyped error, and never the end of the
check with exit code 0. The user's Ctrl-C (or SIGTERM) still ends pagedkv.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from functools import partial
from threading import get_ident
from time import monotonic
from typing import Any

from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.exec_target import ExecFactory
from pagedkv.model_tests.oracle.timeout import FOREVER, TargetTimeout, resolve, show, wait_limit
from pagedkv.model_tests.oracle.watchdog import (
    MAIN_THREAD,
    WATCHDOG,
    Call,
    Interrupted,
    here,
    watching,
)


class TargetCrash(Exception):
    """The target raised a BaseException that is not an Exception."""


class _Worker:
    """One daemon thread running calls in order; each answer comes back on ``answers``. It ends
    when it gets ``None`` (its factory was collected)."""

    def __init__(self, name: str) -> None:
        self.calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None]
        self.calls = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            call = self.calls.get()
            if call is None:
                return
            function, args = call
            try:
                answer: tuple[Any, BaseException | None] = (function(*args), None)
            except BaseException as error:  # everything goes back to the caller's thread
                answer = (None, error)
            self.answers.put(answer)

    def run(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        """``(result, error)``, or ``queue.Empty`` if no answer came within ``timeout``."""
        self.calls.put((function, args))
        return self.answers.get(timeout=wait_limit(timeout))


class GuardedFactory:
    """A Python factory whose targets are called with a timeout."""

    def __init__(self, factory: Callable[[Any], Any], timeout: float | None = None) -> None:
        self.factory = factory
        self.timeout = resolve(timeout)
        self.hung: str | None = None
        """The call that did not return in time, once one has not."""
        self.__name__ = getattr(factory, "__name__", type(factory).__name__)
        self._worker: _Worker | None = None

    @property
    def retries_after_hang(self) -> bool:
        """A hung Python target may be anywhere: it is not called again."""
        return False

    def __call__(self, config: Any) -> GuardedTarget:
        made = self.call(lambda _: f"creating it for {config}", self.factory, config)
        return GuardedTarget(self, made)

    def call(
        self, describe: Callable[[tuple[Any, ...]], str], function: Callable[..., Any], *args: Any
    ) -> Any:
        """``function(*args)`` under the timeout; ``describe(args)`` names the call in messages.
        (The arguments come last, so that a target's operation is ``partial(guard.call,
        describe, method)``: one frame between the session and the guard's own call.)

        A check's every call is made here, on the main thread, with the watchdog interrupting
        it after the timeout (written out in this one frame: an observation reads the target
        several times a call); elsewhere ``_unwatched`` says how."""
        if self.hung is not None:
            raise TargetTimeout(
                f"the target was not called again: it hung earlier, in {self.hung}, and may"
                " have been left anywhere"
            )
        dog = WATCHDOG
        timeout = self.timeout
        if not (dog.depth and dog.usable and timeout != FOREVER and get_ident() == MAIN_THREAD):
            return self._unwatched(describe, function, args)
        call = Call(timeout, describe, args, dog.current, monotonic())
        stops = dog.stops
        dog.current = call
        try:
            try:
                result = function(*args)
            finally:
                dog.current = call.outer
        except BaseException as raised:
            dog.current = call.outer  # also when the interrupt landed in the finally above
            if isinstance(raised, Interrupted) and raised.call is not call:
                raise  # an outer call's deadline: its guard reports it
            if call.interrupts:
                raise self._hang(call.what) from None
            if isinstance(raised, Exception):
                raise
            if isinstance(raised, KeyboardInterrupt) and dog.stops != stops:
                raise  # the user's Ctrl-C or SIGTERM: it ends pagedkv
            raise _crash(raised, call.what) from None
        if call.interrupts:  # it caught the interrupt and returned: still too late
            raise self._hang(call.what)
        return result

    def _unwatched(
        self,
        describe: Callable[[tuple[Any, ...]], str],
        function: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> Any:
        """A call outside a watched check: with no timeout, here; on the main thread, with the
        watchdog's handlers installed around it (then ``call`` makes it); else on the worker."""
        what = partial(describe, args)
        if self.timeout == FOREVER:  # nothing to wait for: call it here
            try:
                return function(*args)
            except (Exception, KeyboardInterrupt, Interrupted):  # Ctrl-C is the user's here
                raise  # (and an interrupt is an outer guard's)
            except BaseException as crash:
                raise _crash(crash, what) from None
        if here() and not WATCHDOG.depth:
            with watching() as usable:
                if usable:
                    return self.call(describe, function, *args)
        return self._on_worker(function, args, what)

    def _on_worker(
        self, function: Callable[..., Any], args: tuple[Any, ...], what: Callable[[], str]
    ) -> Any:
        """On the worker thread, abandoned after the timeout."""
        if self._worker is None:
            self._worker = _Worker(f"pagedkv target {self.__name__}")
            weakref.finalize(self, self._worker.calls.put, None)
        try:
            result, raised = self._worker.run(function, args, self.timeout)
        except queue.Empty:
            self._worker = None  # abandoned; a new call would never reach it
            raise self._hang(what) from None
        if raised is None:
            return result
        if isinstance(raised, Exception):
            raise raised
        raise _crash(raised, what) from None

    def _hang(self, what: Callable[[], str]) -> TargetTimeout:
        self.hung = what()
        return TargetTimeout(
            f"the target did not return from {self.hung} within {show(self.timeout)}"
            " (--timeout or PAGEDKV_TIMEOUT)"
        )


def _crash(error: BaseException, what: Callable[[], str]) -> TargetCrash:
    return TargetCrash(
        f"{error!r} from {what()}: a BaseException that is not an Exception (a target raises"
        " only the errors of pagedkv.specs.errors)"
    )


class GuardedTarget:
    """The target's operations, each run through its factory's guard."""

    def __init__(self, guard: GuardedFactory, target: Any) -> None:
        self._guard = guard
        self._target = target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = self._guard.call(
            lambda _: f"reading its attribute {name}", getattr, self._target, name
        )
        if not callable(value):
            return value
        forward = partial(self._guard.call, partial(codec.show_call, name), value)
        self.__dict__[name] = forward  # read once: later calls go straight to the guard
        return forward

    def _read_at_once(
        self, describe: Callable[[], str], reader: Callable[..., Any], *args: Any
    ) -> Any:
        """``reader(target, *args)``, which reads the target several times, as one of its calls:
        under one deadline, the read under way named by ``describe()`` (``lockstep/
        observation.py``: a lockstep session reads every table after every call)."""
        return self._guard.call(lambda _: describe(), reader, self._target, *args)


def as_its_call(target: Any, what: str, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` run as one of ``target``'s calls: under its guard's timeout where it
    is guarded, for a reader of the target's own structures, which may run the target's code
    (``soak_model.compact_reader``); else called as it is."""
    if isinstance(target, GuardedTarget):
        return target._guard.call(lambda _: what, function, *args)
    return function(*args)


def unguarded(target: Any) -> Any:
    """What a guarded target wraps (anything else as it is), to look at, never to call."""
    return target._target if isinstance(target, GuardedTarget) else target


def guard(factory: Callable[[Any], Any], timeout: float | None = None) -> Callable[[Any], Any]:
    """``factory`` under a per-call timeout: an ``exec:`` factory has its own, a guarded one is
    left as it is."""
    if isinstance(factory, ExecFactory | GuardedFactory):
        return factory
    return GuardedFactory(factory, timeout)


__all__ = ["GuardedFactory", "GuardedTarget", "TargetCrash", "guard", "unguarded"]
