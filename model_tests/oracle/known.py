"""Known differences: classes of divergence a check records and steps past (``pagedkv check
--known FILE``; ``specs/oracle.md`` §9).

Once an engine author understands a divergence (an upstream defect, say), the next one is what
they want to see. A run that ends on a known difference cannot go on in lockstep: the target's
state now differs from the reference's, and nothing defines what either should do next. So the
run ends there, is counted under its class (its shortest example kept as a trace), and is no
failure; the search goes on with new runs. A divergence matches a class only when its call, its
kind and, where the class says, its message and the run's configuration all match; a call that
broke several rules at once matches only if each of its findings does, so a known difference
never hides an unknown one.

The file's format, the kinds and the matching rules are ``specs/oracle.md`` §9. A hang is never
a known difference (the target cannot be called again), nor is a failure of pagedkv itself.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pagedkv.model_tests.lockstep.calls import KINDS, Divergence, TargetStopped
from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.codec import Level
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS, layout_of
from pagedkv.specs.request_types import RequestConfig

OTHER_KINDS = ("configuration", "check")
ALL_KINDS = (*KINDS, *OTHER_KINDS)
SAFETY_ONLY: frozenset[str] = frozenset({"aliasing", "accounting", "placement", "pairs", "kv"})
"""Kinds only the safety tier reports (the rule it broke)."""
REFERENCE_ONLY: frozenset[str] = frozenset({"result", "error", "block", "choice", "count"})
"""Kinds only a comparison with the reference reports."""
TIERS: dict[str, frozenset[str]] = {
    "against the reference": frozenset(KINDS) - SAFETY_ONLY,
    "under the safety tier": frozenset(KINDS) - REFERENCE_ONLY,
}
"""Every kind a check of each mode can end on: what a catch-all would cover."""
PROBES = ("z", "0", "-", " ")
"""Messages nothing real looks like: a ``message`` that matches each of them narrows nothing
(``.``, ``.*``, ``^``, ``\\W|\\w``)."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ENTRY_KEYS = ("name", "about", "operation", "kind", "message", "config")
MAX_FILE_BYTES = 1 << 20
ANY = "*"
"""An ``operation`` or ``kind`` that stands for every one."""
_PROMISE = re.compile(r"said (OK|yes|NEVER)|NEVER swap")


class KnownError(ValueError):
    """A known-differences file that cannot be used, in one line."""


@dataclass(frozen=True)
class Finding:
    """What a failed run ended on, in the terms a class matches."""

    operation: str
    parts: tuple[tuple[str, str], ...]
    """(kind, message) for each rule the call broke."""
    config: Any


@dataclass(frozen=True)
class Difference:
    name: str
    about: str
    operations: frozenset[str]
    kinds: frozenset[str]
    message: re.Pattern[str] | None
    config: tuple[tuple[str, tuple[object, ...]], ...]
    """(field, the values it may have); ``"set"`` / ``"unset"`` for an optional field."""

    def matches(self, operation: str, kind: str, message: str, config: Any) -> bool:
        if operation not in self.operations or kind not in self.kinds:
            return False
        if self.message is not None and not self.message.search(message):
            return False
        return all(_holds(_field(config, name), allowed) for name, allowed in self.config)


def _field(config: Any, name: str) -> object:
    """A configuration's field as a class names it: a request configuration's ``groups`` by
    their layout (``full``, ``window``, ``hybrid``)."""
    if name == "groups" and isinstance(config, RequestConfig):
        return layout_of(config)
    return getattr(config, name, None)


def _holds(value: object, allowed: tuple[object, ...]) -> bool:
    return any(_is(value, one) for one in allowed)


def _is(value: object, wanted: object) -> bool:
    """``value`` is ``wanted``: equal and of one type (``True`` is not ``1``), an int equal to a
    float, or, for an optional field, ``"set"`` / ``"unset"``."""
    if wanted == "set":
        return value is not None
    if wanted == "unset":
        return value is None
    if isinstance(value, bool) or isinstance(wanted, bool):
        return type(value) is type(wanted) and value == wanted
    return value == wanted and isinstance(value, int | float | str)


@dataclass(frozen=True)
class KnownDifferences:
    level: Level | None
    differences: tuple[Difference, ...]
    source: str = ""

    def about(self, name: str) -> str:
        return next((d.about for d in self.differences if d.name == name and d.about), "")

    def classify(self, finding: Finding) -> str | None:
        """The class ``finding`` belongs to (its first finding's), or None if any of its
        findings matches no class."""
        names = []
        for kind, message in finding.parts:
            found = next(
                (
                    d.name
                    for d in self.differences
                    if d.matches(finding.operation, kind, message, finding.config)
                ),
                None,
            )
            if found is None:
                return None
            names.append(found)
        return names[0] if names else None


def finding_of(failure: BaseException, record: RunRecord) -> Finding | None:
    """The run's failure as a class would match it; None for what is never known (a hang, an
    error of pagedkv's own)."""
    if isinstance(failure, TargetStopped):
        return None  # a hang, even while a configuration is checked
    if record.checking_config is not None:
        return Finding("create", (("configuration", str(failure)),), record.checking_config)
    operation = record.calls[-1][0] if record.calls else "create"
    if isinstance(failure, Divergence):
        return Finding(operation, failure.parts, record.config)
    if type(failure) is AssertionError:  # a check of the machine's own
        message = " ".join(str(failure).split())
        kind = "promise" if _PROMISE.search(message) else "check"
        return Finding(operation, ((kind, message),), record.config)
    return None


def kinds_of(finding: Finding) -> tuple[str, ...]:
    """The kinds of ``finding``'s parts, each once, in order."""
    return tuple(dict.fromkeys(kind for kind, _ in finding.parts))


def entry_for(finding: Finding) -> list[str]:
    """The ``[[difference]]`` entry that steps past ``finding``'s class, as lines of TOML a
    report prints for a user to copy into a ``--known`` file."""
    kinds = kinds_of(finding)
    kind = f'"{kinds[0]}"' if len(kinds) == 1 else "[" + ", ".join(f'"{k}"' for k in kinds) + "]"
    return [
        "[[difference]]",
        f'name = "{finding.operation}-{"-".join(kinds)}"',
        f'operation = "{finding.operation}"',
        f"kind = {kind}",
    ]


# --- reading a file ---------------------------------------------------------------------------


def load(path: str | Path, level: Level) -> KnownDifferences:
    """Read and validate a known-differences file for a check at ``level``; ``KnownError``
    names the first problem."""
    where = str(path)
    try:
        with Path(path).open("rb") as file:  # at most the limit: /dev/zero is refused, not read
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise KnownError(f"{where}: cannot read it ({error.strerror or error})") from None
    if len(data) > MAX_FILE_BYTES:
        raise KnownError(f"{where}: larger than {MAX_FILE_BYTES} bytes")
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise KnownError(
            f"{where}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise KnownError(f"{where}: not TOML: {error}") from None
    return parse(parsed, level, where)


def parse(
    data: Mapping[str, Any], level: Level, where: str = "known differences"
) -> KnownDifferences:
    extra = sorted(set(data) - {"level", "difference"})
    if extra:
        raise KnownError(f"{where}: unknown key {extra[0]!r} (known: level, difference)")
    declared = data.get("level")
    if declared is not None and declared not in codec.LEVELS:
        raise KnownError(f"{where}: level is 'manager', 'pool' or 'request', got {declared!r}")
    if declared is not None and declared != level:
        raise KnownError(f"{where}: the file is for the {declared} level, the check is at {level}")
    entries = data.get("difference")
    if entries is None or entries == []:
        raise KnownError(f"{where}: no [[difference]] entries")
    if not isinstance(entries, list):
        raise KnownError(f"{where}: difference must be an array of tables ([[difference]])")
    differences = tuple(
        _difference(entry, level, f"{where}: difference {number}")
        for number, entry in enumerate(entries, 1)
    )
    _refuse_catch_all(differences, level, where)
    return KnownDifferences(declared, differences, where)


def _refuse_catch_all(differences: tuple[Difference, ...], level: Level, where: str) -> None:
    """A file whose entries, one or several together, match every operation and every kind (of
    a check against the reference, or under the safety tier) with no message that narrows them
    would step past any divergence: a broken allocator would PASS. It is refused, before any
    search (``specs/oracle.md`` §9). A configuration narrows nothing here: every run has one."""
    operations = frozenset(codec.OPS[level])
    broad = [
        (number, d)
        for number, d in enumerate(differences, 1)
        if d.message is None or all(d.message.search(probe) for probe in PROBES)
    ]
    for tier, kinds in TIERS.items():
        every = {(op, kind) for op in operations for kind in kinds}
        for number, d in broad:
            if every <= {(op, kind) for op in d.operations for kind in d.kinds}:
                raise KnownError(
                    f"{where}: difference {number} ({d.name}) matches every operation and every"
                    f" kind {tier}{_unnarrowed(d)}: it would step past any divergence, so a"
                    " broken allocator would pass; name the operations and kinds it is about,"
                    " or a message that tells it apart"
                )
        covered = {(op, kind) for _, d in broad for op in d.operations for kind in d.kinds}
        if every <= covered:
            names = ", ".join(f"{number} ({d.name})" for number, d in broad)
            raise KnownError(
                f"{where}: differences {names} together match every operation and every kind"
                f" {tier}: they would step past any divergence, so a broken allocator would"
                " pass; name the operations and kinds each is about, or a message that tells"
                " it apart"
            )


def _unnarrowed(difference: Difference) -> str:
    """How a broad entry's message fails to narrow it, if it has one."""
    if difference.message is None:
        return ""
    return f" (its message {difference.message.pattern!r} matches any text)"


def _difference(entry: object, level: Level, where: str) -> Difference:
    if not isinstance(entry, dict):
        raise KnownError(f"{where}: expected a table")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise KnownError(
            f"{where}: name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}"
        )
    where = f"{where} ({name})"
    extra = sorted(set(entry) - set(ENTRY_KEYS))
    if extra:
        raise KnownError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(ENTRY_KEYS)})")
    about = entry.get("about", "")
    if not isinstance(about, str):
        raise KnownError(f"{where}: about must be a string")
    operations = _names(entry, "operation", (*codec.OPS[level], "create"), where)
    kinds = _names(entry, "kind", ALL_KINDS, where)
    message = entry.get("message")
    pattern = None
    if message is not None:
        if not isinstance(message, str) or not message:
            raise KnownError(f"{where}: message must be a non-empty regular expression")
        try:
            pattern = re.compile(message)
        except re.error as error:
            raise KnownError(f"{where}: message is not a regular expression: {error}") from None
    return Difference(
        name, about, operations, kinds, pattern, _config(entry.get("config", {}), level, where)
    )


def _names(entry: dict[str, Any], key: str, allowed: tuple[str, ...], where: str) -> frozenset[str]:
    value = entry.get(key)
    if value is None:
        raise KnownError(f"{where}: {key} is missing")
    if value == ANY:  # every name: a finding checked after any call (the KV data, say)
        return frozenset(allowed)
    values = value if isinstance(value, list) else [value]
    if not values:
        raise KnownError(f"{where}: {key} is an empty list")
    if ANY in values:
        raise KnownError(
            f'{where}: {key} "*" stands alone (it means every {key}): write {key} = "*",'
            f" or list the {key}s without it"
        )
    for one in values:
        if one not in allowed:
            raise KnownError(f"{where}: unknown {key} {one!r} (known: {', '.join(allowed)})")
    return frozenset(values)


def _config(value: object, level: Level, where: str) -> tuple[tuple[str, tuple[object, ...]], ...]:
    if not isinstance(value, dict):
        raise KnownError(f"{where}: config must be a table")
    types = {f.name: f.type for f in fields(codec.CONFIG_TYPES[level])}
    out = []
    for name, wanted in value.items():
        if name not in types:
            raise KnownError(f"{where}: config has no field {name!r} (fields: {', '.join(types)})")
        allowed = tuple(wanted) if isinstance(wanted, list) else (wanted,)
        if not allowed:
            raise KnownError(f"{where}: config.{name} is an empty list")
        for one in allowed:
            _check_value(name, str(types[name]), one, where)
        out.append((name, allowed))
    return tuple(out)


def _check_value(name: str, annotation: str, value: object, where: str) -> None:
    if name == "groups":
        if value not in LAYOUTS:
            raise KnownError(
                f"{where}: config.groups cannot be {value!r} (a group layout:"
                f" {', '.join(repr(layout) for layout in LAYOUTS)})"
            )
        return
    optional = "None" in annotation
    if optional and value in ("set", "unset"):
        return
    if "bool" in annotation:
        ok = isinstance(value, bool)
    elif "float" in annotation:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        also = ', or "set" / "unset"' if optional else ""
        raise KnownError(
            f"{where}: config.{name} cannot be {value!r} (expected {annotation}{also})"
        )
