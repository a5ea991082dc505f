"""``pagedkv demo --level defrag``: one compaction, the picture of ``specs/defragmenter.md`` §5
played through the reference defragmenter, a sentence per step. The KV row is the engine's: it
runs every returned pair as a true exchange (``swap_blocks_in_place``)."""

from __future__ import annotations

from typing import Any

from pagedkv.model_tests.lockstep.calls import run_call
from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.check import show_config
from pagedkv.model_tests.teaching.defrag_snapshot import defrag_picture
from pagedkv.model_tests.teaching.frames import Frame, Walk
from pagedkv.model_tests.teaching.walkthrough import outcome_text
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import defrag_calls as calls
from pagedkv.specs.defrag_calls import DefragCall
from pagedkv.specs.types import DefragConfig

CONFIG = DefragConfig(num_blocks=12, threshold=2, pad_sizes=(8,), reserved=frozenset({0}))

STEPS: tuple[tuple[DefragCall[Any], str], ...] = (
    (
        calls.update_state({"A": [1, 2], "c": [3], "B": [9, 10, 11]}, []),
        "After the step's manager calls the engine tells the defragmenter every table that"
        " changed: request A holds logical blocks 1 and 2, c holds 3, and B, admitted when the"
        " pool was busy, holds 9 to 11. Nothing has moved yet: physical is logical.",
    ),
    (
        calls.update_state({}, ["c"]),
        "Request c finishes. Its block 3 stays cached in the manager (evictable: a later prefix"
        " hit hands it out again), so its KV is still wanted, but no table holds it: here it"
        " counts as free.",
    ),
    (
        calls.defragment(),
        "Five blocks are used and the highest is 11: 11 - threshold 2 = 9 > 5, so it acts. The"
        " highest used ids pair with the lowest free ones, (11, 3), (10, 4), (9, 5), and stop at"
        " (2, 6), whose free id is past the used one. The engine exchanges each pair's KV:"
        " c3 travels up to 11, where logical 3 now points.",
    ),
    (
        calls.resolve_all([[1, 2], [9, 10, 11]]),
        "The manager's tables are unchanged; the engine resolves them before attention reads"
        " them: B's blocks now sit at 5, 4, 3.",
    ),
    (
        calls.resolve(3),
        "A later cache hit on logical block 3 reads its KV at physical 11, where the exchange"
        " carried it. A one-way copy 11 -> 3 would have lost it.",
    ),
    (
        calls.defragment(),
        "Now the highest used id is 5 and 5 - 2 = 3 is not above 5 used: nothing to do.",
    ),
)


def walk() -> Walk:
    """The demo's frames, each with the reference's state and the engine's KV after it."""
    defrag = ReferenceDefragmenter(CONFIG)
    kv = {1: "A0", 2: "A1", 3: "c3", 9: "B0", 10: "B1", 11: "B2"}
    frames = [
        Frame(
            0,
            "create",
            "created",
            defrag_picture(defrag.view(), kv),
            narration="A defragmenter over 12 GPU blocks, threshold 2, block 0 reserved (the"
            " null block). The KV row says whose data sits at each physical id.",
        )
    ]
    for number, (call, narration) in enumerate(STEPS, 1):
        result, error = run_call(defrag, call)
        pairs = result if call.name == "defragment" and isinstance(result, list) else []
        for used, free in pairs:
            kv[used], kv[free] = kv.get(free, "."), kv.get(used, ".")
        frames.append(
            Frame(
                number,
                codec.show_call(call.name, call.args),
                outcome_text(error if error is not None else result),
                defrag_picture(defrag.view(), kv),
                narration=narration,
                copies=tuple(pairs),
            )
        )
    title = "pagedkv demo --level defrag: one compaction (specs/defragmenter.md §5)"
    return Walk(title, "defrag", show_config(CONFIG), frames)
