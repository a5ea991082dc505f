"""The guard's direct path: a Python target called on the main thread, the watchdog keeping its
deadline (``model_tests/oracle/watchdog.py``); and its worker-thread fallback elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import pytest

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.observation import observe
from pagedkv.model_tests.oracle.guard import GuardedFactory, TargetCrash
from pagedkv.model_tests.oracle.timeout import FOREVER, TargetTimeout
from pagedkv.model_tests.oracle.watchdog import MAIN_THREAD, WATCHDOG, Call, here, watching
from pagedkv.specs.types import Device

pytestmark = pytest.mark.skipif(not here(), reason="signals reach only a POSIX main thread")

ROOT = Path(__file__).resolve().parents[2]


class Calls:
    """Counts its calls, and says on which thread each ran."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def note(self) -> None:
        self.threads.append(threading.current_thread().name)


def spin() -> NoReturn:
    while True:
        pass


def blocks_on_a_lock() -> None:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # waits for itself, in C


@pytest.fixture
def alarm_handler() -> Iterator[list[int]]:
    """A SIGALRM handler of the caller's own, which the guard must put back and pass on to."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        yield received
    finally:
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("hang", [spin, lambda: time.sleep(3600), blocks_on_a_lock])
def test_a_target_that_hangs_on_the_main_thread_is_interrupted_and_not_called_again(
    hang: Any,
) -> None:
    calls = Calls()

    class Hangs:
        def free(self, seq_id: int) -> None:
            calls.note()
            hang()

    guarded = GuardedFactory(lambda config: Hangs(), timeout=0.2)
    target = guarded(None)
    with pytest.raises(TargetTimeout, match=r"did not return from free\(1\) within 0\.2 s"):
        target.free(1)
    assert calls.threads == ["MainThread"]  # called directly, not on a worker
    with pytest.raises(TargetTimeout, match="not called again"):
        target.free(2)
    with pytest.raises(TargetTimeout, match="not called again"):
        guarded(None)
    assert calls.threads == ["MainThread"]
    assert WATCHDOG.current is None and WATCHDOG.depth == 0


def test_a_target_that_catches_the_interrupt_still_times_out() -> None:
    caught: list[str] = []

    class Catches:
        def free(self, seq_id: int) -> None:
            try:
                spin()
            except BaseException as interrupt:  # the kind of bare except a target may have
                caught.append(type(interrupt).__name__)
            spin()  # and goes on: interrupted again after the grace period

        def fork(self, parent: int, child: int) -> int:
            try:
                spin()
            except BaseException:
                return 7  # returns an answer, too late

    for call in ("free", "fork"):
        target = GuardedFactory(lambda config: Catches(), timeout=0.2)(None)
        with pytest.raises(TargetTimeout, match=r"within 0\.2 s"):
            getattr(target, call)(*([1] if call == "free" else [1, 2]))
    assert caught == ["Interrupted"]


def test_a_target_that_catches_the_interrupt_and_raises_still_times_out() -> None:
    class Converts:
        def free(self, seq_id: int) -> None:
            try:
                spin()
            except BaseException:
                raise ValueError("not a timeout, it says") from None

    target = GuardedFactory(lambda config: Converts(), timeout=0.2)(None)
    with pytest.raises(TargetTimeout):
        target.free(1)


def test_the_previous_handlers_are_put_back(alarm_handler: list[int]) -> None:
    mine = signal.getsignal(signal.SIGALRM)
    interrupt = signal.getsignal(signal.SIGINT)

    class Sometimes:
        def free(self, seq_id: int) -> int:
            assert signal.getsignal(signal.SIGALRM) != mine  # the watchdog's, during the call
            if seq_id == 2:
                spin()
            return seq_id

    target = GuardedFactory(lambda config: Sometimes(), timeout=0.2)(None)
    assert target.free(1) == 1  # a call on its own installs and restores around itself
    assert signal.getsignal(signal.SIGALRM) is mine
    with watching():  # a whole run keeps them for all its calls
        assert target.free(3) == 3
        with pytest.raises(TargetTimeout):
            target.free(2)
    assert signal.getsignal(signal.SIGALRM) is mine
    assert signal.getsignal(signal.SIGINT) is interrupt
    assert alarm_handler == []  # the watchdog's interrupts never reached the caller's handler


def test_a_sigalrm_that_is_not_the_watchdogs_goes_to_the_previous_handler(
    alarm_handler: list[int],
) -> None:
    class Alarms:
        def free(self, seq_id: int) -> int:
            os.kill(os.getpid(), signal.SIGALRM)  # as an alarm() of the caller's would
            time.sleep(0.01)
            return seq_id

    assert GuardedFactory(lambda config: Alarms(), timeout=5)(None).free(4) == 4
    assert alarm_handler == [signal.SIGALRM]


def test_an_interrupt_that_arrives_after_its_call_is_dropped(alarm_handler: list[int]) -> None:
    """The watchdog decided while the call was under way; the signal lands after it returned."""
    assert MAIN_THREAD is not None
    with watching() as usable:
        assert usable
        WATCHDOG.aimed = Call(0.1, lambda _: "free(1)", (), None, time.monotonic())  # over by now
        WATCHDOG.sent += 1
        signal.pthread_kill(MAIN_THREAD, signal.SIGALRM)
        time.sleep(0.05)  # handled here, between calls: no Interrupted
        assert WATCHDOG.seen == WATCHDOG.sent
    assert alarm_handler == []  # and not taken for the caller's alarm either


def test_the_users_ctrl_c_still_ends_the_run_and_a_targets_own_is_a_crash() -> None:
    class Interrupts:
        def free(self, seq_id: int) -> None:
            signal.raise_signal(signal.SIGINT)  # as a Ctrl-C during the call
            time.sleep(1)

        def fork(self, parent: int, child: int) -> None:
            raise KeyboardInterrupt  # its own

    target = GuardedFactory(lambda config: Interrupts(), timeout=5)(None)
    with pytest.raises(KeyboardInterrupt) as raised:
        target.free(1)
    assert type(raised.value) is KeyboardInterrupt
    with pytest.raises(TargetCrash, match="KeyboardInterrupt"):
        target.fork(1, 2)


def test_nested_guards_each_keep_their_own_deadline() -> None:
    """A target that itself checks another (a user's harness): the outer deadline still holds."""

    class Inner:
        def free(self, seq_id: int) -> None:
            spin()

    class Outer:
        def __init__(self, inner_timeout: float) -> None:
            self.inner = GuardedFactory(lambda config: Inner(), inner_timeout)(None)

        def free(self, seq_id: int) -> None:
            self.inner.free(seq_id)

    # the inner deadline first: the inner guard times out; its TargetTimeout, a BaseException,
    # leaves the outer target, which has crashed
    outer = GuardedFactory(lambda config: Outer(0.2), timeout=5)(None)
    with pytest.raises(TargetCrash, match="TargetTimeout"):
        outer.free(1)
    # the outer deadline first: the outer guard times out, through the inner one
    outer = GuardedFactory(lambda config: Outer(FOREVER), timeout=0.2)(None)
    with pytest.raises(TargetTimeout, match=r"free\(1\) within 0\.2 s"):
        outer.free(1)


def test_off_the_main_thread_the_worker_thread_keeps_the_deadline() -> None:
    calls = Calls()

    class Hangs:
        def free(self, seq_id: int) -> None:
            calls.note()
            time.sleep(3600)

    raised: list[BaseException] = []

    def check() -> None:
        target = GuardedFactory(lambda config: Hangs(), timeout=0.2)(None)
        try:
            target.free(1)
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=check)
    thread.start()
    thread.join(30)
    assert len(raised) == 1 and isinstance(raised[0], TargetTimeout)
    assert calls.threads == ["pagedkv target <lambda>"]


def test_a_target_that_cannot_be_interrupted_ends_the_process_as_a_fail() -> None:
    program = textwrap.dedent(
        """
        import signal
        from pagedkv.model_tests.oracle.guard import GuardedFactory

        class Deaf:
            def free(self, seq_id):
                signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the watchdog's interrupt is lost
                while True:
                    pass

        GuardedFactory(lambda config: Deaf(), timeout=0.2)(None).free(1)
        print("returned")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    assert "FAIL: the target did not return from free(1) within 0.2 s" in done.stderr
    assert "pagedkv ends here" in done.stderr


def test_an_observation_reads_as_one_call_and_names_the_read_that_hung_or_crashed() -> None:
    """``lockstep/observation.py`` makes all its reads one guarded call (``_read_at_once``): the
    guard's deadline still covers each read, and a message names the read under way."""
    reads: list[str] = []

    class Reads:
        def get_block_table(self, seq_id: int) -> list[int]:
            reads.append(f"table {seq_id}")
            if seq_id == 3:
                time.sleep(3600)
            if seq_id == 4:
                raise SystemExit(0)
            return [seq_id]

        def get_num_free_gpu_blocks(self) -> int:
            return 1

        def get_num_free_cpu_blocks(self) -> int:
            return 2

    guarded = GuardedFactory(lambda config: Reads(), timeout=0.2)
    target = guarded(None)
    seen = observe(target, [1, 2], [])
    assert seen.tables == {1: [1], 2: [2]} and seen.free == {Device.GPU: 1, Device.CPU: 2}
    assert WATCHDOG.current is None
    with pytest.raises(Divergence, match=r"SystemExit\(0\) from get_block_table\(4\)"):
        observe(target, [1, 4], [])
    with pytest.raises(TargetTimeout, match=r"did not return from get_block_table\(3\) within"):
        observe(target, [2, 3, 1], [])
    assert reads[-2:] == ["table 2", "table 3"]
    assert WATCHDOG.current is None and WATCHDOG.depth == 0
