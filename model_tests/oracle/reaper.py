"""Finding what an ``exec:`` program left running, so that killing it kills all of it.

Each program runs as the leader of its own process group, and the whole group is killed
(``exec_target``). A descendant that left the group (``setsid``, a daemon's double fork) escapes
that kill. On Linux two things catch it:

- before the group is killed, the program's descendants are read from ``/proc`` (each process's
  parent), whatever group they are in, and killed after it;
- the ``pagedkv`` command is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process
  whose parent exits is given to pagedkv instead of to init, so one orphaned before the kill is
  still pagedkv's child, and known as the program's by the mark it inherited in its environment
  (``PAGEDKV_PEER``).

Elsewhere (no ``/proc``, no ``prctl``) only the process group is killed: a descendant that left
it keeps running (``specs/oracle.md`` §5).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from pathlib import Path

MARK = "PAGEDKV_PEER"
"""The environment variable each program (and so each of its descendants) is started with."""
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
PROC = Path("/proc")


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


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after the command's name, which may hold ")"


def _processes() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (empty without ``/proc``)."""
    children: dict[int, list[int]] = {}
    for each in _processes():
        parent = _parent(each)
        if parent is not None:
            children.setdefault(parent, []).append(each)
    found, queue = [], [pid]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


def marked(pid: int, mark: str) -> bool:
    """Whether ``pid`` was started with ``MARK=mark`` in its environment."""
    try:
        environment = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{MARK}={mark}".encode() in environment.split(b"\0")


def strays(mark: str) -> list[int]:
    """This process's children that carry ``mark``: a program's descendants orphaned and given
    to pagedkv as the subreaper, with everything below them."""
    own = [pid for pid in descendants(os.getpid()) if _parent(pid) == os.getpid()]
    found = [pid for pid in own if marked(pid, mark)]
    return found + [below for pid in found for below in descendants(pid)]


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids``, then reap those that are this process's children (an adopted
    orphan is, and would stay a zombie)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
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
