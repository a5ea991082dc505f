"""A target's answers as values: read exactly at the call, and held to what they said after it
(``specs/oracle.md`` §1, "Values, not objects").

Every answer a session takes from a target goes through ``exact_answer`` (``calls.py``, over
``specs/wire.py``) at the call: what is compared is a copy in builtin types, so the target cannot
change it later. But a caller keeps what it was handed: vLLM's scheduler reads every running
sequence's block table in one step and uses them all afterwards. So an answer that is a list is
kept and read again twice: at the end of the call that gave it (after the session has read the
target's tables and free counts, as a scheduler reads all of them), and one call later (after
the next call, which may reuse the list for its own answer). The rule it is held to:

- the answer of a *query* (``LIVE_QUERIES``) may be a live view of the state it describes (vLLM
  0.6.3 hands out a block table's own id list, which grows as the table grows): read again, it
  equals either what it was at the call or what the same query answers now;
- the answer of an *action* (copy or swap pairs, a fork's new chain) describes what the call
  did: it never changes.

Anything else (a list overwritten by the next answer, cleared, filled with another sequence's
blocks) is a divergence of kind ``answer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.lockstep.calls import Divergence, exact_answer, run_call
from pagedkv.model_tests.lockstep.show import Shown, show_error, show_value, text
from pagedkv.specs.call import Call
from pagedkv.specs.operations import Level
from pagedkv.specs.wire import exact_reader

LIVE_QUERIES: dict[Level, frozenset[str]] = {
    "manager": frozenset(
        {"get_block_table", "get_cross_block_table", "get_common_computed_block_ids"}
    ),
    "pool": frozenset({"common_computed_prefix"}),
    "request": frozenset({"get_block_ids"}),
    "defrag": frozenset({"resolve_all"}),
}
"""The queries whose answer may follow the state it describes; asking one again changes
nothing."""

REUSED = "a list reused for the next answer?; specs/oracle.md §1"


@dataclass
class _Kept:
    call: Call[Any, Any]
    """The call as the target got it (its ids), to ask again."""
    shown: Shown
    """The call as a report writes it (or the way to write it)."""
    answer: object
    """The object the target returned."""
    value: Any
    """Its exact value, as last read."""


class Answers:
    """Every answer of one target, read exactly; the last one that it could still change, kept."""

    def __init__(self, target: Any, level: Level) -> None:
        self.target = target
        self.level = level
        self._kept: _Kept | None = None
        self._readers: dict[str, Callable[[object], Any]] = {}
        """Each operation's ``wire.exact_reader``, looked up once."""

    def take(self, call: Call[Any, Any], shown: Shown, answer: object, raised: bool) -> Any:
        """The exact value of the target's ``answer`` to ``call`` (None if it ``raised``); a
        list is kept. Then the answer kept from the call before is read again: one call later.
        ``shown`` is written out only for a divergence."""
        if raised:
            value = None
        else:
            read = self._readers.get(call.name)
            if read is None:
                read = self._readers[call.name] = exact_reader(self.level, call.name)
            value = exact_answer(self.level, call.name, shown, answer, read)
        previous = self._kept
        self._kept = _Kept(call, shown, answer, value) if isinstance(value, list) else None
        if previous is not None:
            self._check(previous, lambda: f"after {text(shown)}")
        return value

    def recheck(self, when: str) -> None:
        """Read the answer kept from the latest call again (``when``: the moment, in words)."""
        if self._kept is not None:
            self._check(self._kept, when)

    def _check(self, kept: _Kept, moment: Shown) -> None:
        def again() -> str:
            return f"{text(kept.shown)} (its answer read again {text(moment)})"

        later = exact_answer(self.level, kept.call.name, again, kept.answer)
        if later == kept.value:
            return
        when, shown = text(moment), text(kept.shown)
        said = (
            f"{when}, the {type(kept.answer).__name__} that {shown} answered,"
            f" {show_value(kept.value)}, reads {show_value(later)}"
        )
        if kept.call.name not in LIVE_QUERIES[self.level]:
            raise Divergence(
                f"{said}: the answer of an action says what the call did and never changes"
                f" ({REUSED})",
                "answer",
            )
        result, error = run_call(self.target, kept.call)
        if error is None:
            now = exact_answer(self.level, kept.call.name, f"{shown} (asked again)", result)
            if later == now:
                kept.value = later  # a live view: it may go on following the state
                return
            answered = f"what {shown} answers now ({show_value(now)})"
        else:
            answered = f"an answer of {shown} now (it raises {show_error(error)})"
        raise Divergence(
            f"{said}: neither that answer nor {answered}; an answer may follow the state it"
            f" describes but never turns into another ({REUSED})",
            "answer",
        )
