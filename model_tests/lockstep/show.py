"""How values, calls and a target's own exceptions read in a report.

One way to write a call everywhere a person reads one: the numbered steps of ``pagedkv
check``, the trace viewer, and the sentences of the sessions' divergences (a ``Prefix`` is its
hash's first eight hex digits, its token count and its extra key, never 32 raw bytes). An
exception that is not one of ``pagedkv.specs.errors`` comes from inside the target, and its class
alone (a bare ``AssertionError()``) says nothing: it is shown with the innermost frame it was raised
in, outside pagedkv's own comparison code (for a ``RecursionError``, the frame that recurses).
"""

from __future__ import annotations

import os
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.request_types import Request
from pagedkv.specs.types import AllocStatus, Device, ExtraKey

_HARNESS = tuple(
    str(Path(__file__).resolve().parents[1] / layer) + os.sep for layer in ("lockstep", "oracle")
)
"""pagedkv's own code between a caller and the target (the sessions, the guard's worker
thread, the stdio client): a frame there is not where the target failed."""


def show_value(value: object) -> str:
    """Compact, readable Python-ish rendering for reports."""
    if type(value) is int:  # most values shown (every call is written out): first, at once
        return repr(value)
    if isinstance(value, Device | AllocStatus):
        return value.name
    if isinstance(value, ExtraKey):
        fields = {"lora_id": value.lora_id, "cache_salt": value.cache_salt}
        parts = [f"{k}={v!r}" for k, v in fields.items() if v is not None]
        return f"ExtraKey({', '.join(parts)})"
    if isinstance(value, Prefix):
        digest = value.hash.hex()[:8] if isinstance(value.hash, bytes) else repr(value.hash)
        return f"Prefix({digest}…, {value.num_tokens}, {show_value(value.extra_key)})"
    if isinstance(value, PagedKVError):
        return type(value).__name__
    if type(value) is Request:
        return _show_request(value)
    if isinstance(value, bytes) and len(value) > 8:
        return f"{value.hex()[:8]}…"
    if isinstance(value, list):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(show_value(v) for v in value) + ")"
    return repr(value)


MAX_SHOWN_TOKENS = 16


def _show_request(request: Request) -> str:
    """``Request('r1', tokens=[3, 1, 4] (3), computed=2)``, with its keys where it has them."""
    tokens = request.tokens
    shown = (
        show_value(list(tokens[:MAX_SHOWN_TOKENS]))
        if isinstance(tokens, tuple | list)
        else repr(tokens)
    )
    if isinstance(tokens, tuple | list) and len(tokens) > MAX_SHOWN_TOKENS:
        shown = shown[:-1] + ", …]"
    count = f" ({len(tokens)})" if isinstance(tokens, tuple | list) else ""
    parts = [repr(request.request_id), f"tokens={shown}{count}"]
    if request.num_prompt_tokens != (len(tokens) if isinstance(tokens, tuple | list) else None):
        parts.append(f"prompt={request.num_prompt_tokens!r}")
    parts.append(f"computed={request.num_computed_tokens!r}")
    if request.extra_key != ExtraKey():
        parts.append(show_value(request.extra_key))
    if request.multimodal:
        parts.append(f"multimodal={request.multimodal!r}")
    return f"Request({', '.join(parts)})"


def show_call(op: str, args: Sequence[object]) -> str:
    return f"{op}({', '.join(show_value(a) for a in args)})"


Shown = str | Callable[[], str]
"""A call as a report writes it, or the way to write it: a session passes the way, and the text
is written only for a message (every call would otherwise write out its arguments)."""


def text(shown: Shown) -> str:
    return shown if isinstance(shown, str) else shown()


def show_error(error: BaseException) -> str:
    """``repr`` of a typed error; for any other, also where the target raised it:
    ``AssertionError() at vllm/core/block/common.py:63 in decr (assert block_id in ...)``."""
    text = repr(error)
    if isinstance(error, PagedKVError):
        return text
    frames = _target_frames(error)
    if not frames:
        return text
    frame, depth = frames[-1], ""
    if isinstance(error, RecursionError):  # its innermost frame is wherever the stack ran out
        frame, count = _most_repeated(frames)
        depth = f", {count} calls deep"
    where = f"{_short_path(frame.filename)}:{frame.lineno} in {frame.name}{depth}"
    line = (frame.line or "").strip()
    return f"{text} at {where}" + (f" ({line})" if line else "")


def _target_frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The traceback's frames outside pagedkv's own comparison code, outermost first."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    return [f for f in frames if not os.path.abspath(f.filename).startswith(_HARNESS)]


def _most_repeated(frames: list[traceback.FrameSummary]) -> tuple[traceback.FrameSummary, int]:
    """The frame a runaway recursion repeats, and how often (the innermost of the most frequent
    line)."""
    counts = Counter((f.filename, f.lineno, f.name) for f in frames)
    (key, count), *_ = counts.most_common(1)
    return next(f for f in reversed(frames) if (f.filename, f.lineno, f.name) == key), count


def _short_path(filename: str) -> str:
    """Relative to the current directory when inside it, else as it is."""
    path = os.path.abspath(filename)
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def free_count_differs(call: str, device: str, reference: int, target: int) -> str:
    """The sentence for free counts that differ after ``call``: which side holds more, and
    what that means (``device``: ``""``, ``"gpu"``, ``"cpu"``)."""
    what = " ".join(["free", *([device] if device else []), "block" if target == 1 else "blocks"])
    if target < reference:
        held = reference - target
        why = (
            f"the target holds {held} block{'' if held == 1 else 's'} more than the reference:"
            " one the reference gave back (or never took) is still in use there (a leak, or an"
            " extra block taken)"
        )
    else:
        early = target - reference
        why = (
            f"the target counts {early} block{'' if early == 1 else 's'} free that the reference"
            " still holds: given back too early, or never taken"
        )
    return f"after {call}, the target has {target} {what}, the reference {reference}: {why}"
