"""A CrossHair plugin (``crosshair --extra_plugin``): symbolic ``immutables.Map`` values.

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


def symbolic_map(factory: SymbolicFactory, key_type: Any = object, value_type: Any = object) -> Any:
    import immutables  # the plugin's module globals are gone when this runs
    from crosshair import ResumedTracing

    contents = factory(dict[key_type, value_type])
    with ResumedTracing():  # type: ignore[no-untyped-call]
        items = list(contents.items())
    return immutables.Map(items)


register_type(immutables.Map, symbolic_map)
