"""Whether pagedkv's optimized code is still what was loaded before the target.

A target runs in the oracle's process. One that patches the optimized manager's own code (a
"fix" assigned to ``OptimizedBlockSpaceManager.fork``, say, or to a function of an optimized
module) patches the soak's stand-in model too (``soak_model.py``): the stand-in would then run
the target's code and agree with it, and the soak would PASS a bug. So the names of
``pagedkv.optimized`` (each module's globals and each of its classes' attributes) are taken
down when this module is imported, before any target is, and the stand-in is used only while
every one is still bound to the same object. This is no defence against a target that sets out
to fool its oracle (it may patch the reference, or this module); it keeps an honest target's
monkeypatch from passing itself. ``--reference-model`` takes the reference in any case.
"""

from __future__ import annotations

import sys
from types import FunctionType

import pagedkv.optimized.block_manager  # noqa: F401  (all the stand-in runs, loaded)

Names = dict[str, object]


def _optimized(module_name: str) -> bool:
    return module_name == "pagedkv.optimized" or module_name.startswith("pagedkv.optimized.")


def names() -> Names:
    """Every global of every loaded ``pagedkv.optimized`` module, and every attribute of every
    class defined there, by its dotted name."""
    found: Names = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not _optimized(module_name):
            continue
        for name, value in list(vars(module).items()):
            _take_down(found, f"{module_name}.{name}", value)
            if isinstance(value, type) and value.__module__ == module_name:
                for attribute, member in list(vars(value).items()):
                    _take_down(found, f"{module_name}.{name}.{attribute}", member)
    return found


def _take_down(found: Names, name: str, value: object) -> None:
    """A name's object, and a function's code: the same function object may be given other
    code (``f.__code__ = ...``)."""
    found[name] = value
    if isinstance(value, FunctionType):
        found[f"{name}.__code__"] = value.__code__


LOADED = names()
"""The names as pagedkv loaded them. A test that plants a bug in pagedkv's own code takes them
down again (``monkeypatch.setattr(stand_in_guard, "LOADED", names())``): the bug is then
pagedkv's code, not a target's patch."""


def patched() -> list[str]:
    """The names loaded with pagedkv that are now bound to something else, or gone (sorted)."""
    now = names()
    return sorted(name for name, value in LOADED.items() if now.get(name, _GONE) is not value)


_GONE = object()
