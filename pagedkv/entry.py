"""The ``pagedkv`` console script's entry: Ctrl-C and SIGTERM end pagedkv with its one line and
exit code (130, 143) from the first moment, even while its modules are still being imported
(about 0.3 s, before ``pagedkv.cli`` installs its own handlers around a command).

Its handlers go in before ``pagedkv.cli`` is imported: ``pagedkv/__init__.py``, which runs first,
imports nothing of the layers (its names load when first used). What it cannot cover is the
interpreter's own start (a few tens of milliseconds before this file runs).

The command then runs in a child process that the parent watches (``pagedkv/supervisor.py``):
``pagedkv`` exits 0 only after a verdict was printed, whatever a target does to its process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

from pagedkv.model_tests.oracle import verdict_pipe

STOPPED = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}
"""The exit code and the line of each signal, as ``pagedkv.cli`` gives them."""


def stop_at_once(signum: int, frame: FrameType | None) -> None:
    """Outside a command nothing needs undoing (no target runs, no file is half written): say so
    and go, without unwinding through a half-imported module."""
    code, what = STOPPED[signal.Signals(signum)]
    with contextlib.suppress(OSError):
        os.write(2, f"pagedkv: {what}\n".encode())
    verdict_pipe.declare(code)
    os._exit(code)


for number in STOPPED:
    if signal.getsignal(number) is not signal.SIG_IGN:  # `nohup`, `&` in a script: theirs stands
        signal.signal(number, stop_at_once)


NO_PLUGINS = "HYPOTHESIS_NO_PLUGINS"
"""Hypothesis, when imported, runs every plugin an installed package registers (entry points of
the group ``hypothesis``) unless this is set. A check's runs come from its seed alone and use no
plugin (nor should they change with what else is installed), and trio's plugin, where trio is
installed, imports trio and pytest: 0.13 CPU s of every command's start. So pagedkv imports
Hypothesis (with ``pagedkv.cli``) without them, and puts the environment back as it was
afterwards (an ``exec:`` target inherits it)."""


def restore_environment(name: str, before: str | None) -> None:
    if before is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = before


PLUGINS_BEFORE = os.environ.get(NO_PLUGINS)
os.environ[NO_PLUGINS] = "1"
from pagedkv.cli import main as run_command  # noqa: E402 (after the handlers, which must cover it)

restore_environment(NO_PLUGINS, PLUGINS_BEFORE)
from pagedkv.model_tests.oracle.reaper import adopt_orphans  # noqa: E402 (after the handlers)
from pagedkv.supervisor import run_apart  # noqa: E402 (after the handlers)


def run_here() -> int:
    adopt_orphans()  # what an `exec:` program leaves behind comes to pagedkv, to be killed
    return run_command()  # its output flushed: the verdict is out before it returns


def main() -> int:
    return run_apart(run_here)


if __name__ == "__main__":
    sys.exit(main())
