"""How long a target may take to answer one call, and what happens when it does not.

Every call into a target (``exec:`` program or in-process Python) has the same limit: 30 s by
default, ``PAGEDKV_TIMEOUT`` (or its former name ``PAGEDKV_EXEC_TIMEOUT``) in seconds, or the
command line's ``--timeout``; ``0`` or ``off`` waits forever. A call that does not answer in time
raises ``TargetTimeout``: the run fails at once, with that call as its failing step (see
``specs/oracle.md`` §7).
"""

from __future__ import annotations

import math
import os

from pagedkv.model_tests.lockstep.calls import TargetStopped

DEFAULT_TIMEOUT = 30.0
ENVIRONMENT = ("PAGEDKV_TIMEOUT", "PAGEDKV_EXEC_TIMEOUT")
"""Read in this order; the first that is set wins."""
FOREVER = math.inf


class SettingError(ValueError):
    """A setting (environment value or option) that cannot be used; the message is one line."""


class TargetTimeout(TargetStopped):
    """A target did not answer one call in time; it is not called again the same way."""


def parse_timeout(text: str, where: str) -> float:
    """Seconds (> 0), or ``FOREVER`` for ``0`` / ``off``; a SettingError naming ``where`` (the
    environment variable, if that is where ``text`` comes from)."""
    cleaned = text.strip().lower()
    if cleaned in {"off", "none", "never"}:
        return FOREVER
    try:
        value = float(cleaned)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        expected = "expected a number of seconds, or 0 (or off) to wait forever"
        raise SettingError(
            f"{where}={text!r}: {expected}" if where else f"{expected}, got {text!r}"
        )
    return FOREVER if value == 0 else value


def timeout_from_environment() -> float:
    """The first of ``ENVIRONMENT`` that is set; each one that is set must be valid."""
    found = [parse_timeout(text, name) for name in ENVIRONMENT if (text := os.environ.get(name))]
    return found[0] if found else DEFAULT_TIMEOUT


def resolve(timeout: float | None) -> float:
    """``timeout`` itself, or the environment's (the default) when it is None."""
    return timeout_from_environment() if timeout is None else timeout


def show(timeout: float) -> str:
    return "forever" if timeout == FOREVER else f"{timeout:g} s"


def wait_limit(timeout: float) -> float | None:
    """For ``Event.wait`` and ``select``: None waits forever."""
    return None if timeout == FOREVER else timeout
