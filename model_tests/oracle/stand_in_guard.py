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
from collections.abc import Mapping
from dataclasses import dataclass
from types import CodeType, FunctionType

import pagedkv.optimized.block_manager  # noqa: F401  (all the stand-in runs, loaded)

Binding = tuple[str, Mapping[str, object], str, object]
"""(dotted name, the namespace, the key, the object it held)."""


@dataclass(frozen=True)
class Loaded:
    """pagedkv's optimized code as it was taken down (``take_down``): what each name was bound
    to, and each function's code. The namespaces are the live ones (a class's ``vars`` is a
    view of it), so a look is a pass of identity tests, about 30 us. A name added later (a
    ``__getattr__`` on a class) is not looked for: CPython adds names of its own (a class's
    ``__slotnames__`` once an instance is copied), and a target set on fooling its oracle has
    other ways still."""

    bindings: tuple[Binding, ...]
    codes: tuple[tuple[str, FunctionType, CodeType], ...]


def _optimized(module_name: str) -> bool:
    return module_name == "pagedkv.optimized" or module_name.startswith("pagedkv.optimized.")


def take_down() -> Loaded:
    """Every global of every loaded ``pagedkv.optimized`` module, and every attribute of every
    class defined there."""
    bindings: list[Binding] = []
    codes: list[tuple[str, FunctionType, CodeType]] = []

    def namespace(prefix: str, names: Mapping[str, object]) -> None:
        for key, value in list(names.items()):
            bindings.append((f"{prefix}.{key}", names, key, value))
            if isinstance(value, FunctionType):
                codes.append((f"{prefix}.{key}", value, value.__code__))

    for module_name, module in list(sys.modules.items()):
        if module is None or not _optimized(module_name):
            continue
        namespace(module_name, vars(module))
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == module_name:
                namespace(f"{module_name}.{name}", vars(value))
    return Loaded(tuple(bindings), tuple(codes))


LOADED = take_down()
"""The code as pagedkv loaded it. A test that plants a bug in pagedkv's own code takes it down
again (``monkeypatch.setattr(stand_in_guard, "LOADED", take_down())``): the bug is then
pagedkv's code, not a target's patch."""

_GONE = object()


def patched() -> list[str]:
    """What of the code loaded with pagedkv is now otherwise: a name bound to something else or
    gone, or a function given other code (sorted)."""
    loaded = LOADED
    changed = [
        name for name, names, key, value in loaded.bindings if names.get(key, _GONE) is not value
    ]
    changed += [
        f"{name}.__code__" for name, function, code in loaded.codes if function.__code__ is not code
    ]
    return sorted(changed)
