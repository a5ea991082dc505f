"""A CrossHair plugin (``crosshair --extra_plugin``): symbolic ``immutables.Map`` values, and a
``Policy`` that is any of the named profiles' policies.

CrossHair does not know the C type ``immutables.Map``: given a ``Map[int, BlockView]`` parameter
it builds a map whose values are not ``BlockView``s. This builds a symbolic ``dict`` of the right
key and value types and freezes its items into a ``Map`` (which fixes the map's size on each path,
not its contents). CrossHair runs a plugin file on its own, so the imports the creator needs are
made when it runs.
"""

from __future__ import annotations

from typing import Any

import immutables
from crosshair import SymbolicFactory, register_type

from pagedkv.specs.policy import PROFILES, Policy


def symbolic_map(factory: SymbolicFactory, key_type: Any = object, value_type: Any = object) -> Any:
    import immutables  # the plugin's module globals are gone when this runs
    from crosshair import ResumedTracing

    contents = factory(dict[key_type, value_type])
    with ResumedTracing():  # type: ignore[no-untyped-call]
        items = list(contents.items())
    return immutables.Map(items)


def symbolic_policy(
    factory: SymbolicFactory, policies: tuple[Policy, ...] = tuple(PROFILES.values())
) -> Any:
    """One of the profiles' policies (CrossHair cannot build a dataclass of ``Literal`` fields
    by itself): a contract must hold under each engine's choices. (The profiles come in as a
    default argument: the module's globals are gone when this runs.)"""
    from crosshair import ResumedTracing

    index = factory(int)
    with ResumedTracing():  # type: ignore[no-untyped-call]
        for position, policy in enumerate(policies[:-1]):
            if index == position:
                return policy
    return policies[-1]


register_type(immutables.Map, symbolic_map)
register_type(Policy, symbolic_policy)
