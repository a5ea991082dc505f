"""Finding what an ``exec:`` program left running, so that killing it kills all of it.

Each program runs as the leader of its own process group, and the whole group is killed
(``exec_target``). A descendant that left the group (``setsid``, a daemon's double fork) escapes
that kill. Two things catch it:

- before the group is killed, the program's descendants are found (``psutil``: each process's
  parent, on Linux from ``/proc``, on macOS and the BSDs from the kernel), whatever group they
  are in, and killed after it; psutil checks that a process it kills is still the one it found,
  not a new one that was given its id;
- on Linux the ``pagedkv`` command is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``,
  which psutil does not offer: called through ``ctypes``): a process whose parent exits is given
  to pagedkv instead of to init, so one orphaned before the kill is still pagedkv's child, and
  known as the program's by the mark it inherited in its environment (``PAGEDKV_PEER``).

Elsewhere (no ``prctl``) a descendant orphaned before the kill keeps running
(``specs/oracle.md`` §5).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time

import psutil

MARK = "PAGEDKV_PEER"
"""The environment variable each program (and so each of its descendants) is started with."""
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1


def adopt_orphans() -> bool:
    """Make this process a child subreaper (Linux); whether it now is one."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def end_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent`` ends (Linux): the command's process is not left
    running when its thin parent is killed (``pagedkv/supervisor.py``)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` (empty if ``pid`` is gone or cannot be read)."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def marked(process: psutil.Process, mark: str) -> bool:
    """Whether ``process`` was started with ``MARK=mark`` in its environment."""
    try:
        return bool(process.environ().get(MARK) == mark)
    except psutil.Error:
        return False


def strays(mark: str) -> list[psutil.Process]:
    """This process's children that carry ``mark``: a program's descendants orphaned and given
    to pagedkv as the subreaper, with everything below them."""
    found = [child for child in psutil.Process().children() if marked(child, mark)]
    return found + [below for child in found for below in descendants(child.pid)]


def kill_all(processes: list[psutil.Process]) -> None:
    """SIGKILL each of ``processes`` still running (psutil refuses one whose id now names
    another), then reap those that are this process's children (an adopted orphan is, and would
    stay a zombie)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    deadline = time.monotonic() + 2
    for process in processes:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(process.pid, os.WNOHANG)
            except ChildProcessError:
                break  # not ours, or already reaped
            if done:
                break
            time.sleep(0.01)


__all__ = [
    "MARK",
    "adopt_orphans",
    "descendants",
    "end_with_parent",
    "kill_all",
    "marked",
    "strays",
]
