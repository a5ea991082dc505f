"""The scenario of ``pagedkv demo --level request``: vLLM v1's request-level manager driven by a
small scripted scheduler, a step at a time, each step with a sentence saying what happens and
which clause of ``specs/request_level.md`` makes it so.

Part 1 (one full-attention group): a shared system prompt hit, capped at n - 1 so that a fully
cached prompt still recomputes its last block; chunked prefill over two steps; a decode step
whose draft token is not cached, then its rejection; preemption by recompute when
``allocate_slots`` answers None, and the preempted request's re-hit; the free order and an
eviction with its ``BlockRemoved``. Part 2 (a full and a sliding-window group over one pool): a
window releasing blocks to the null block, and a hit both groups agree on that is shorter than
the full group alone could serve.

The requests are the scheduler's values at each step (its token ids and computed count); the
state drawn after each step is the reference's own (``pagedkv.reference.request_adapter``), and
the events are what it emitted, so the demo cannot tell a story the reference does not.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.lockstep.show import show_value
from pagedkv.model_tests.teaching.frames import Frame, Walk
from pagedkv.model_tests.teaching.request_snapshot import (
    Contents,
    block_contents,
    group_label,
    request_picture,
)
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls as calls
from pagedkv.specs.request_calls import REQUEST_CALLS, RequestCall
from pagedkv.specs.request_types import AttentionKind, KVGroup, Request, RequestConfig

PAGE = "specs/request_level.md"

# --- part 1: one full-attention group ---------------------------------------------------------

FULL = RequestConfig(num_blocks=10, block_size=4)

SYSTEM_PROMPT = tuple(range(11, 19))
"""8 tokens: 2 blocks every request below starts with."""
A_PROMPT = SYSTEM_PROMPT + tuple(range(21, 29))
"""16 tokens: 4 full blocks."""
B_PROMPT = SYSTEM_PROMPT + tuple(range(31, 37))
"""14 tokens: 3 full blocks and 2 tokens."""
C_PROMPT = A_PROMPT[:12]
"""a's first 12 tokens: 3 full blocks, all of them cached by a."""

A_FIRST_CHUNK = Request("a", A_PROMPT, 16)
A_SECOND_CHUNK = Request("a", A_PROMPT, 16, num_computed_tokens=8)
B_PREFILL = Request("b", B_PROMPT, 14)
C_PREFILL = Request("c", C_PROMPT, 12)
B_WITH_DRAFT = Request("b", (*B_PROMPT, 41), 14, num_computed_tokens=14)
"""Prefill sampled 41: 15 committed tokens. This step computes 41 and one draft token."""
B_AFTER_REJECTION = Request("b", (*B_PROMPT, 41, 42), 14, num_computed_tokens=15)
"""The draft was rejected: computed rolls back from 16 to 15, and the verifier's own token 42
is committed at position 15 instead."""
C_DECODE = Request("c", (*C_PROMPT, 51), 12, num_computed_tokens=12)
A_DECODE = Request("a", (*A_PROMPT, 61), 16, num_computed_tokens=16)
C_REQUEUED = Request("c", (*C_PROMPT, 51, 52), 12)
"""Preempted by recompute: its output so far is kept, its computed count starts again at 0."""
D_PREFILL = Request("d", (91, 92, 93, 94, 95), 5)

HIT_B = [[1, 2]]
HIT_C = [[1, 2]]
HIT_C_AGAIN = [[1, 2, 3]]

# --- part 2: full attention and a sliding window over one pool ------------------------------

WINDOW = 8
HYBRID = RequestConfig(
    num_blocks=16,
    block_size=4,
    groups=(KVGroup(), KVGroup(AttentionKind.SLIDING_WINDOW, WINDOW)),
)

X_PROMPT = SYSTEM_PROMPT + tuple(range(21, 33))
"""20 tokens: 5 full blocks."""
X_PREFILL = Request("x", X_PROMPT, 20)
V_PREFILL = Request("v", (*SYSTEM_PROMPT, 71, 72, 73), 11)
X_DECODE = Request("x", (*X_PROMPT, 33), 20, num_computed_tokens=20)
Z_PREFILL = Request("z", (91, 92, 93), 3)
Y_PREFILL = Request("y", (*X_PROMPT[:12], 81, 82, 83), 15)
"""Shares x's first 12 tokens: 3 blocks the full group has cached."""

HIT_V = [[1, 2], [6, 7]]
HIT_Y = [[1, 2], [6, 7]]


@dataclass(frozen=True)
class Scene:
    says: str
    cite: str
    """The clause of ``specs/request_level.md`` the step shows."""
    call: RequestCall[Any]

    @property
    def narration(self) -> str:
        return f"{self.says} [{PAGE} {self.cite}]"


@dataclass(frozen=True)
class Part:
    config: RequestConfig
    opening: str
    scenes: tuple[Scene, ...]


PART_1 = Part(
    FULL,
    "Part 1. A request-level manager (vLLM v1's KVCacheManager) with one full-attention group:"
    " 10 blocks of 4 tokens, ids 0-9, prefix caching on. Block 0 is the null block: never handed"
    " out, never free. The free queue holds every block nobody holds, front first: allocation"
    f" takes from the front. [{PAGE} §1]",
    (
        Scene(
            "Request a arrives: an 8-token system prompt and an 8-token question, 16 tokens. The"
            " scheduler first asks for its cached prefix: nothing is cached yet, a hit of 0.",
            "§3",
            calls.get_computed_blocks(A_FIRST_CHUNK),
        ),
        Scene(
            "Chunked prefill: the token budget lets only 8 of a's 16 tokens run this step. Two"
            " blocks come from the front of the free queue (1, 2); both are full of committed"
            " tokens, so both are cached under their chained hashes and one BlockStored tells"
            " the router.",
            "§4.6, §4.7",
            calls.allocate_slots(A_FIRST_CHUNK, 8),
        ),
        Scene(
            "The second chunk: a has 8 tokens computed and runs the other 8. Blocks 3 and 4 are"
            " appended, and cached: a's whole prompt is now in the cache, 4 blocks.",
            "§4.6, §4.7",
            calls.allocate_slots(A_SECOND_CHUNK, 8),
        ),
        Scene(
            "Request b shares the system prompt (14 tokens). Its first two block hashes are"
            " cached: a hit of 2 blocks, 8 tokens (blocks 1 and 2).",
            "§3",
            calls.get_computed_blocks(B_PREFILL),
        ),
        Scene(
            "b is admitted with its hit: blocks 1 and 2 are touched (ref count 2, shared) and"
            " only its other 6 tokens need new blocks, 5 and 6. Block 5 is full and cached;"
            " block 6 holds 2 tokens, so it is not.",
            "§4.5, §4.6, §4.7",
            calls.allocate_slots(B_PREFILL, 6, 8, HIT_B),
        ),
        Scene(
            "Request c's 12-token prompt is a's first 12 tokens: all 3 of its blocks are cached."
            " Yet the hit is 2 blocks, 8 tokens: it is capped at n - 1 = 11 tokens because the"
            " last token must be computed for its logits, and hits are whole blocks, so the"
            " whole last block is computed again.",
            "§3",
            calls.get_computed_blocks(C_PREFILL),
        ),
        Scene(
            "c takes its hit (blocks 1 and 2, now ref count 3) and computes its last block in a"
            " new block 7, cached under the same key as block 3: nothing is deduplicated, and a"
            " lookup finds the earlier one, 3.",
            "§4.5, §4.7",
            calls.allocate_slots(C_PREFILL, 4, 8, HIT_C),
        ),
        Scene(
            "A decode step with speculation: b has 15 committed tokens (prefill sampled 41) and"
            " runs 41 plus one draft token, 2 slots that fill block 6. No new block is needed."
            " Block 6 is full of slots but one is a draft: only committed tokens are cached, so"
            " it is not.",
            "§4.7",
            calls.allocate_slots(B_WITH_DRAFT, 2),
        ),
        Scene(
            "The draft was rejected: the scheduler rolls b's computed count back to 15 and"
            " commits the verifier's token 42 at position 15. This step runs 42 and a new"
            " draft: a fifth block, 8, for the draft's slot. Now block 6 holds 4 committed"
            " tokens and is cached; block 8 holds only the draft and is not.",
            "§4.1, §4.6, §4.7",
            calls.allocate_slots(B_AFTER_REJECTION, 2),
        ),
        Scene(
            "c decodes its first output token into a new block, 9: the last free one.",
            "§4.6",
            calls.allocate_slots(C_DECODE, 1),
        ),
        Scene(
            "a decodes its 17th token and needs a fifth block, but the free queue is empty:"
            " allocate_slots answers None and changes nothing.",
            "§4.3, §4.4",
            calls.allocate_slots(A_DECODE, 1),
        ),
        Scene(
            "Preemption by recompute: the scheduler frees its newest request, c, and puts it back"
            " in the waiting queue. c's blocks are given back tail first: 9 (not cached) to the"
            " front of the queue, to be reused first; 7 (cached) to the back, to be evicted"
            " last; 2 and 1 are still held by a and b, so only their ref counts drop.",
            "§5, §7",
            calls.free("c"),
        ),
        Scene(
            "a retries and gets block 9 from the front.",
            "§4.6",
            calls.allocate_slots(A_DECODE, 1),
        ),
        Scene(
            "c is scheduled again with its 2 output tokens kept: 14 tokens, computed 0. Now its"
            " hit is 3 blocks, 12 tokens (cap 13), and the third is block 3, the key's earliest"
            " block, not c's own 7.",
            "§3",
            calls.get_computed_blocks(C_REQUEUED),
        ),
        Scene(
            "c is admitted with the hit and needs one new block. The free queue holds only 7,"
            " cached: taking it evicts it, and the router reads BlockRemoved. The key stays"
            " cached in block 3.",
            "§1, §4.6, §9",
            calls.allocate_slots(C_REQUEUED, 2, 12, HIT_C_AGAIN),
        ),
        Scene(
            "b finishes. Tail first: 8 (a draft's, never cached) goes to the front; 6 and then 5"
            " (cached) go to the back in that order, so the chain's tail is evicted before its"
            " head; 2 and 1 stay with a and c.",
            "§5, §7",
            calls.free("b"),
        ),
        Scene(
            "Request d (5 tokens, nothing cached) needs 2 blocks: 8 from the front, then 6,"
            " evicted (BlockRemoved). 5, the block before it in b's chain, stays cached.",
            "§1, §4.6, §9",
            calls.allocate_slots(D_PREFILL, 5),
        ),
    ),
)

PART_2 = Part(
    HYBRID,
    "Part 2. A new manager for a model with full-attention and sliding-window layers: two KV"
    f" cache groups, g0 full attention and g1 a window of {WINDOW} tokens, sharing one pool of"
    " 16 blocks of 4 tokens. Every request has a table in each group. A window layer reads only"
    f" the last {WINDOW} tokens, so its blocks before the window go back to the pool and its"
    f" table points at the null block there. [{PAGE} §1]",
    (
        Scene(
            "Request x (20 tokens) is prefilled: 5 blocks in each group, 1-5 for g0 and 6-10 for"
            " g1, every one full and cached under its group's key.",
            "§4.6, §4.7",
            calls.allocate_slots(X_PREFILL, 20),
        ),
        Scene(
            "Request v shares x's 8-token system prompt. Both groups serve 2 blocks (for the"
            " window group the last cdiv(7, 4) = 2 blocks before the hit's end are what counts):"
            " a hit of 8 tokens, blocks 1, 2 in g0 and 6, 7 in g1.",
            "§3",
            calls.get_computed_blocks(V_PREFILL),
        ),
        Scene(
            "v is admitted: the hit's blocks are shared, and one new block per group, 11 and 12.",
            "§4.5, §4.6",
            calls.allocate_slots(V_PREFILL, 3, 8, HIT_V),
        ),
        Scene(
            "x decodes token 20, which attends to tokens 13-20 in the window group. Tokens 0-12"
            " are out of the window for good, so x's window blocks 0-2 are released, walked from"
            " the highest down: block 8 goes to the back of the queue (cached), blocks 7 and 6"
            " stay held by v. x's g1 table now starts null, null, null. Then one new block per"
            " group, 13 and 14.",
            "§4.2, §7",
            calls.allocate_slots(X_DECODE, 1),
        ),
        Scene(
            "Request z (3 tokens) needs one block per group: 15 from the front, then 8, the last"
            " free one, cached: evicted, BlockRemoved in group 1. The window group has lost the"
            " key of x's third block.",
            "§1, §4.6, §9",
            calls.allocate_slots(Z_PREFILL, 3),
        ),
        Scene(
            "Request y shares x's first 12 tokens. The full group alone could serve all 3"
            " blocks (1, 2, 3), but a hit must be a length every group serves: the window group"
            " needs its last 2 blocks before the hit's end cached, and its third block's key is"
            " gone. Both agree on 2 blocks, 8 tokens.",
            "§3",
            calls.get_computed_blocks(Y_PREFILL),
        ),
        Scene(
            "y needs 2 new blocks per group and nothing is free: None. y is not running yet, so"
            " the scheduler just leaves it waiting.",
            "§4.3, §4.4",
            calls.allocate_slots(Y_PREFILL, 7, 8, HIT_Y),
        ),
        Scene(
            "x finishes. Per group, tail first: g0's 13 (not cached) to the front, then 5, 4, 3"
            " (cached) to the back, 2 and 1 held by v; g1's leading nulls are skipped, its 14 to"
            " the front, 10 and 9 to the back.",
            "§5, §7",
            calls.free("x"),
        ),
        Scene(
            "y retries with its hit: 14 and 13 from the front for g0, then 5 and 4 for g1, each"
            " evicted on the way (BlockRemoved): x's chain goes from its tail, and 3 stays"
            " cached. y's third block is cached in both groups: in 14 under g0's key (beside"
            " 3, a duplicate) and in 5 under g1's.",
            "§4.6, §4.7, §9",
            calls.allocate_slots(Y_PREFILL, 7, 8, HIT_Y),
        ),
    ),
)

PARTS = (PART_1, PART_2)
REQUESTS = (
    A_FIRST_CHUNK,
    B_AFTER_REJECTION,
    C_REQUEUED,
    D_PREFILL,
    X_DECODE,
    V_PREFILL,
    Z_PREFILL,
    Y_PREFILL,
)
"""Every request at its longest: what the pictures name cached blocks' tokens from."""


def describe(config: RequestConfig) -> str:
    groups = " + ".join(group_label(group) for group in config.groups)
    return f"{config.num_blocks} blocks of {config.block_size} tokens, {groups}"


def request_text(request: Request) -> str:
    computed = request.num_computed_tokens
    return f"{request.request_id}<{request.num_tokens} tokens, {computed} computed>"


def call_text(call: RequestCall[Any]) -> str:
    """The call as the scheduler makes it: requests summarized, arguments left at their
    defaults left out, the others named after the first."""
    parameters = list(inspect.signature(REQUEST_CALLS[call.name]).parameters.values())
    shown = []
    for index, (parameter, value) in enumerate(zip(parameters, call.args, strict=True)):
        if isinstance(value, Request):
            shown.append(request_text(value))
        elif index == 0:
            shown.append(show_value(value))
        elif value != parameter.default:
            shown.append(f"{parameter.name}={show_value(value)}")
    return f"{call.name}({', '.join(shown)})"


def frames() -> Iterator[Frame]:
    """Each part's opening state, then one frame per scene, each drawn from the reference."""
    number = 0
    for part in PARTS:
        manager = ReferenceRequestKVManager(part.config)
        contents: Contents = block_contents(REQUESTS, part.config.block_size)
        opening = "" if number == 0 else f"a new manager: {describe(part.config)}"
        outcome = "" if number == 0 else "created"
        yield Frame(number, opening, outcome, request_picture(manager.view()), part.opening)
        for scene in part.scenes:
            number += 1
            result = scene.call.method(manager)(*scene.call.args)
            events = manager.take_events()
            yield Frame(
                number,
                call_text(scene.call),
                show_value(result),
                request_picture(manager.view(), contents, events),
                scene.narration,
            )
        number += 1


def walk() -> Walk:
    return Walk(
        "pagedkv demo --level request: vLLM v1's KV cache manager, one step at a time",
        "request",
        " · ".join(f"part {i}: {describe(part.config)}" for i, part in enumerate(PARTS, 1)),
        list(frames()),
    )
