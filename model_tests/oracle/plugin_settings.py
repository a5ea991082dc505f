"""What one check of the pytest plugin runs with: every option of ``pagedkv check``, each taken
from the first place that gives it (the call's arguments, the test's ``pagedkv`` markers, the
session: ``--pagedkv-NAME`` on pytest's command line, else the ini key ``pagedkv_NAME``), else
the command line's default; each value read by the command line's own parsers
(``check_options.py``), so that a bad one reads as it does there, prefixed with where it was
written.

The seed is the one exception to "the command line's default": where nothing gives one, a test's
seed is derived from its node id (a SHA-256, never Python's per-process ``hash``), so that a CI
run searches as the last one did and a failure found there is found again; ``random`` draws
one per check.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pagedkv.model_tests.machines.manager_machine import Contract
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.oracle import check_options
from pagedkv.model_tests.oracle.check import default_steps
from pagedkv.model_tests.oracle.check_options import OptionError
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.known import KnownDifferences
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.specs.policy import Profile

RANDOM = "random"
"""The seed that asks for a new one at every check."""


@dataclass(frozen=True)
class Source:
    """Values given in one place: ``where(name)`` says where in a message, ``folder`` is what a
    relative ``known`` or ``trace_out`` path is read from."""

    values: Mapping[str, object]
    where: Callable[[str], str]
    folder: Path


@dataclass(frozen=True)
class PluginCheck:
    """One check's options, every one decided and valid."""

    level: Level
    groups: tuple[GroupKind, ...]
    profile: Profile
    contract: Contract
    steps: int
    seed: int
    seed_note: str
    """How the seed was chosen and how to run the same runs again ("" where it was given)."""
    timeout: float | None
    known: KnownDifferences | None
    trace_out: Path | None


def derived_seed(nodeid: str) -> int:
    """A test's own seed: the first four bytes of the SHA-256 of its node id."""
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:4], "big")


def text_of(value: object) -> str:
    """A Python value as the command line would have been given it (a sequence comma-separated:
    ``groups=["full", "window"]``); the parser then reads it as it reads that."""
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def value_of(name: str, value: object, where: str) -> Any:
    """The value of option ``name`` as given (text, or a Python value as a call or a marker
    gives it), read by the command line's parser of that option."""
    if name == "policy":
        items = value.items() if isinstance(value, Mapping) else None
        if items is not None:
            return tuple((str(key), str(item)) for key, item in items)
        lines = [value] if isinstance(value, str) else cast(Sequence[object], value)
        return tuple(
            check_options.parsed(check_options.assignment, str(line), where) for line in lines
        )
    if name in ("known", "trace_out"):
        return value if isinstance(value, KnownDifferences | Path) else Path(str(value))
    if name == "seed" and value == RANDOM:
        return RANDOM
    parse = PARSERS[name]
    return check_options.parsed(parse, text_of(value), where)


PARSERS: dict[str, Callable[[str], Any]] = {
    "level": check_options.level_name,
    "groups": check_options.group_layouts,
    "profile": check_options.profile_name,
    "contract": check_options.contract_name,
    "steps": check_options.whole_number(1),
    "seed": check_options.seed_number,
    "timeout": check_options.seconds,
}


def check_values(source: Source) -> None:
    """Read every value ``source`` gives (a session's, checked once before any test runs)."""
    for name, value in source.values.items():
        if value is not None:
            value_of(name, value, source.where(name))


def resolve(sources: Sequence[Source], nodeid: str | None) -> PluginCheck:
    """The options of one check, each from the first of ``sources`` that gives it; the seed, if
    none does, derived from ``nodeid`` (None: drawn at random, as the command line does)."""

    def given(name: str) -> tuple[Any, Source | None]:
        for source in sources:
            value = source.values.get(name)
            if value is not None and value != "" and value != []:
                return value_of(name, value, source.where(name)), source
        return None, None

    level: Level = given("level")[0] or "manager"
    profile = _profile(given("profile")[0] or "pagedkv", given("policy"), level)
    steps = given("steps")[0] or default_steps(level)
    seed, seed_note = _seed(given("seed")[0], nodeid)
    known, from_source = given("known")
    if isinstance(known, Path) and from_source is not None:
        known = load_known(from_source.folder / known, level)
    trace_out, from_source = given("trace_out")
    if trace_out is not None and from_source is not None:
        trace_out = from_source.folder / trace_out
    return PluginCheck(
        level=level,
        groups=given("groups")[0] or LAYOUTS,
        profile=profile,
        contract=given("contract")[0] or "any",
        steps=steps,
        seed=seed,
        seed_note=seed_note,
        timeout=given("timeout")[0],
        known=known,
        trace_out=trace_out,
    )


def _profile(name: str, policy: tuple[Any, Source | None], level: Level) -> Profile:
    overrides, source = policy
    try:
        return check_options.check_profile(name, overrides or (), level)
    except OptionError as error:
        if error.option is not None and source is not None:
            raise OptionError(f"{source.where(error.option)}: {error}", error.option) from None
        raise


def _seed(chosen: int | str | None, nodeid: str | None) -> tuple[int, str]:
    if isinstance(chosen, int):
        return chosen, ""
    if chosen != RANDOM and nodeid is not None:
        seed = derived_seed(nodeid)
        return seed, (
            f"seed {seed}: derived from the test's id, the same in every session"
            " (--pagedkv-seed random varies it)"
        )
    seed = random.randrange(2**32)
    return seed, (
        f"seed {seed}: drawn at random; seed={seed} in the call or the marker, or"
        f" --pagedkv-seed {seed}, runs the same runs again"
    )
