"""The options of a check, read from text and checked with one set of messages: ``pagedkv check``
takes them as argparse types, the pytest plugin for its arguments, marker and ini keys, so a bad
value reads the same wherever it was written (``argument --steps: expected a whole number from
1, got '0'`` on the command line, ``pagedkv option steps (marker): expected a whole number from
1, got '0'`` in a test).

Each parser takes the text as written and raises ``argparse.ArgumentTypeError`` with a one-line
message (what argparse shows after ``argument --NAME:``); ``check_profile`` raises
``OptionError``, which names the option it is about, if any.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, get_args

from pagedkv.model_tests.machines.manager_machine import Contract
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import timeout
from pagedkv.model_tests.oracle.codec import LEVELS, Level
from pagedkv.model_tests.oracle.request_layouts import parse_layouts
from pagedkv.specs.policy import PROFILE_NAMES, Profile
from pagedkv.specs.policy import profile as named_profile

CONTRACTS: tuple[Contract, ...] = get_args(Contract)
"""``any`` call the protocol allows, or only those a ``scheduler`` makes (``specs/oracle.md``
§1)."""


class OptionError(ValueError):
    """An option whose value cannot be used: ``option`` names it (None: the options together,
    e.g. a profile that does not serve the level)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def quoted(text: str) -> str:
    """``repr(text)``, cut short past 40 characters (a value pasted by mistake stays one line)."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def whole_number(minimum: int) -> Callable[[str], int]:
    """A parser of whole numbers from ``minimum``. Every bad value of every option is one line
    of one shape: ``expected a whole number from 1, got '0'``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {minimum}, got {quoted(text)}"
            )
        return value

    return parse


def worker_count(text: str) -> int:
    """``--workers``: from 1 to four per CPU. Each worker is a process that loads pagedkv and the
    target; past that, more of them only crowd the machine (100,000 gave no verdict at all)."""
    most = 4 * (os.cpu_count() or 1)
    value = whole_number(1)(text)
    if value > most:
        raise argparse.ArgumentTypeError(
            f"expected at most {most} (four per CPU of this machine), got {quoted(text)}"
        )
    return value


seed_number = whole_number(0)
"""A seed: a whole number from 0 (Hypothesis would take -1 for 1)."""


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """A parser of one of ``choices``, refusing others as argparse's own ``choices`` do."""

    def parse(text: str) -> str:
        if text not in choices:
            listed = ", ".join(repr(choice) for choice in choices)
            raise argparse.ArgumentTypeError(
                f"invalid choice: {quoted(text)} (choose from {listed})"
            )
        return text

    return parse


level_name: Callable[[str], str] = one_of(LEVELS)
profile_name: Callable[[str], str] = one_of(PROFILE_NAMES)
contract_name: Callable[[str], str] = one_of(CONTRACTS)


def group_layouts(text: str) -> tuple[GroupKind, ...]:
    """``--groups``: comma-separated group layouts of the request level."""
    try:
        return parse_layouts(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def assignment(text: str) -> tuple[str, str]:
    """``--policy``: NAME=VALUE."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {quoted(text)}")
    return name, value


def seconds(text: str) -> float:
    """``--timeout``: seconds a call may take, 0 (or ``off``) for no limit."""
    try:
        return timeout.parse_timeout(text, "")
    except timeout.SettingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_profile(name: str, policy: Iterable[tuple[str, str]], level: Level) -> Profile:
    """The profile ``name`` with the ``policy`` overrides, checked to serve ``level``."""
    try:
        chosen = named_profile(name, dict(policy))
    except ValueError as error:
        raise OptionError(str(error), "policy") from None
    try:
        chosen.check_level(level)
    except ValueError as error:
        raise OptionError(str(error)) from None
    return chosen


def parsed(parse: Callable[[str], Any], text: str, where: str) -> Any:
    """``parse(text)``, a bad value raised as an OptionError that says ``where`` it was
    written."""
    try:
        return parse(text)
    except argparse.ArgumentTypeError as error:
        raise OptionError(f"{where}: {error}") from None
