"""In-process targets under the same per-call timeout as ``exec:`` ones, and never able to end
pagedkv.

Every call into a Python target (its factory, then each operation) runs on one worker thread
that the guard owns, while the caller waits at most the timeout. Why a thread and not a
subprocess: a factory need not be importable by name (the pytest plugin and ``pagedkv.check``
take any callable, closures included), calls cost microseconds rather than a JSON round trip, and
the target keeps running on one thread, as an engine would. The price: Python cannot stop a
thread. After a timeout the worker is abandoned (a daemon thread, so it never holds the process
open; a busy loop keeps using its CPU until pagedkv exits) and the factory is *hung*: every
later call raises ``TargetTimeout`` at once, without calling the target. The run in which it hung
is reported as it stood (it is not shrunk: that would call the target again).

A target that raises a ``BaseException`` that is not an ``Exception`` (``SystemExit`` from
``sys.exit()``, ``GeneratorExit``, its own ``KeyboardInterrupt``) gets a ``TargetCrash``, an
ordinary exception, so that it is a divergence like any untyped error, and never the end of the
check with exit code 0.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from model_tests.oracle import codec
from model_tests.oracle.exec_target import ExecFactory
from model_tests.oracle.timeout import FOREVER, TargetTimeout, resolve, show, wait_limit


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
    """A Python factory whose targets are called on a worker thread, with a timeout."""

    def __init__(self, factory: Callable[[Any], Any], timeout: float | None = None) -> None:
        self.factory = factory
        self.timeout = resolve(timeout)
        self.hung: str | None = None
        """The call that did not return in time, once one has not."""
        self.__name__ = getattr(factory, "__name__", type(factory).__name__)
        self._worker: _Worker | None = None

    @property
    def retries_after_hang(self) -> bool:
        """A hung Python thread cannot be stopped: the target is not called again."""
        return False

    def __call__(self, config: Any) -> GuardedTarget:
        made = self.call(self.factory, (config,), lambda: f"creating it for {config}")
        return GuardedTarget(self, made)

    def call(
        self, function: Callable[..., Any], args: tuple[Any, ...], what: Callable[[], str]
    ) -> Any:
        """``function(*args)`` on the worker; ``what`` names the call in messages."""
        if self.hung is not None:
            raise TargetTimeout(
                f"the target was not called again: it hung earlier, in {self.hung}, and a"
                " Python thread cannot be stopped"
            )
        if self.timeout == FOREVER:  # nothing to wait for: call it here
            try:
                return function(*args)
            except (Exception, KeyboardInterrupt):  # here, Ctrl-C is the user's: it ends pagedkv
                raise
            except BaseException as crash:
                raise _crash(crash, what) from None
        if self._worker is None:
            self._worker = _Worker(f"pagedkv target {self.__name__}")
            weakref.finalize(self, self._worker.calls.put, None)
        try:
            result, raised = self._worker.run(function, args, self.timeout)
        except queue.Empty:
            self.hung = what()
            self._worker = None  # abandoned; a new call would never reach it
            raise TargetTimeout(
                f"the target did not return from {self.hung} within {show(self.timeout)}"
                " (--timeout or PAGEDKV_TIMEOUT)"
            ) from None
        if raised is None:
            return result
        if isinstance(raised, Exception):
            raise raised
        raise _crash(raised, what) from None


def _crash(error: BaseException, what: Callable[[], str]) -> TargetCrash:
    return TargetCrash(
        f"{error!r} from {what()}: a BaseException that is not an Exception (a target raises"
        " only the errors of specs.errors)"
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
            getattr, (self._target, name), lambda: f"reading its attribute {name}"
        )
        if not callable(value):
            return value
        guard = self._guard

        def forward(*args: Any) -> Any:
            return guard.call(value, args, lambda: codec.show_call(name, args))

        forward.__name__ = name
        self.__dict__[name] = forward  # read once: later calls go straight to the worker
        return forward


def guard(factory: Callable[[Any], Any], timeout: float | None = None) -> Callable[[Any], Any]:
    """``factory`` under a per-call timeout: an ``exec:`` factory has its own, a guarded one is
    left as it is."""
    if isinstance(factory, ExecFactory | GuardedFactory):
        return factory
    return GuardedFactory(factory, timeout)


__all__ = ["GuardedFactory", "GuardedTarget", "TargetCrash", "guard"]
