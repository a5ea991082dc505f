"""The pipe on which the process running a ``pagedkv`` command tells its parent that its verdict
is out, and with which exit code (``pagedkv/supervisor.py``).

A target runs inside that process and may end it at any moment (``os._exit(0)``, a C library's
``exit(0)``, a crash): an exit code alone cannot say whether a verdict was printed. The code
written here can, because it is written only once the verdict has been flushed. Every deliberate
end of the process writes it: the command's return, a signal's one line (``pagedkv.entry``), the
watchdog's FAIL when a target cannot be stopped (``watchdog.give_up``).

Outside the ``pagedkv`` command (tests, the pytest plugin, ``pagedkv.check`` as a function) no
pipe is attached and ``declare`` does nothing.
"""

from __future__ import annotations

import contextlib
import os

_attached: tuple[int, int] | None = None
"""(the write end's descriptor, the process that may write on it)."""


def attach(descriptor: int) -> None:
    """This process writes its exit code on ``descriptor`` (a process it forks does not: a
    target that forks must not speak for pagedkv)."""
    global _attached
    _attached = (descriptor, os.getpid())


def declare(code: int) -> None:
    """The verdict is out: tell the parent ``code`` (0-255), once."""
    global _attached
    if _attached is None:
        return
    descriptor, owner = _attached
    if os.getpid() != owner:
        return
    _attached = None
    with contextlib.suppress(OSError):  # a parent that is gone has nothing to be told
        os.write(descriptor, bytes([code & 0xFF]))
        os.close(descriptor)


__all__ = ["attach", "declare"]
