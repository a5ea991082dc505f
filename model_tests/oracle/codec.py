"""JSON lines for traces and stdio: one line of strict JSON read or written, and every value of
both protocols through ``pagedkv.specs.wire`` (the protocol's wire form, which the lockstep
sessions also read Python targets' answers through; ``specs/oracle.md`` §3). Its names are
re-exported here, so that the oracle's modules name one codec.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pagedkv.model_tests.lockstep.show import show_call as show_call  # one way to write a call
from pagedkv.model_tests.lockstep.show import show_value as show_value
from pagedkv.specs.wire import CONFIG_TYPES as CONFIG_TYPES
from pagedkv.specs.wire import ERRORS as ERRORS
from pagedkv.specs.wire import JSON as JSON
from pagedkv.specs.wire import LEVELS as LEVELS
from pagedkv.specs.wire import OPS as OPS
from pagedkv.specs.wire import CodecError as CodecError
from pagedkv.specs.wire import ConfigType as ConfigType
from pagedkv.specs.wire import Level as Level
from pagedkv.specs.wire import NotExact as NotExact
from pagedkv.specs.wire import config_level as config_level
from pagedkv.specs.wire import decode_args as decode_args
from pagedkv.specs.wire import decode_config as decode_config
from pagedkv.specs.wire import decode_error as decode_error
from pagedkv.specs.wire import decode_result as decode_result
from pagedkv.specs.wire import decode_value as decode_value
from pagedkv.specs.wire import encode_args as encode_args
from pagedkv.specs.wire import encode_config as encode_config
from pagedkv.specs.wire import encode_error as encode_error
from pagedkv.specs.wire import encode_result as encode_result
from pagedkv.specs.wire import encode_value as encode_value
from pagedkv.specs.wire import error_class as error_class
from pagedkv.specs.wire import exact_result as exact_result
from pagedkv.specs.wire import level_of as level_of
from pagedkv.specs.wire import op_spec as op_spec

MAX_DEPTH = 16
"""How deeply a line of JSON may nest (the protocol's deepest value, chains in ``args``, is 4)."""


def parse_json(text: str) -> JSON:
    """One line of strict JSON (no NaN, no Infinity), nested at most ``MAX_DEPTH`` deep."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        why = error.msg.removesuffix(" at")
        raise CodecError(f"not JSON ({why}, column {error.colno})") from None
    except RecursionError:
        raise CodecError(f"not a protocol value: nested deeper than {MAX_DEPTH} levels") from None
    except CodecError:
        raise  # the constant hook's own (NaN, Infinity)
    except ValueError:  # Python reads at most sys.get_int_max_str_digits() digits of a number
        raise CodecError(
            f"not a protocol value: a number longer than {sys.get_int_max_str_digits()} digits"
        ) from None
    if _depth(value) > MAX_DEPTH:
        raise CodecError(f"not a protocol value: nested deeper than {MAX_DEPTH} levels")
    return value


def dumps(value: JSON) -> str:
    """One line of strict JSON, as traces are written."""
    return json.dumps(value, allow_nan=False, separators=(", ", ": "))


def _no_constant(name: str) -> Any:
    raise CodecError(f'{name} is not JSON (write {{"float": "nan"}} and the like)')


def _depth(value: JSON) -> int:
    """How deeply ``value`` nests (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[JSON, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth + 1)
            if depth + 1 <= MAX_DEPTH:
                stack.extend((child, depth + 1) for child in item)
    return deepest
