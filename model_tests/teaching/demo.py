"""The scenario of ``pagedkv demo``: one small manager, driven through the algorithm a step at a
time, each step with a sentence saying what happens and why.

Two requests share a system prompt (a prefix-cache hit), a fork for parallel sampling, a
copy-on-write, the pool running out (LATER, NEVER), eviction from the free list first and then
tail first, a swap out and back in with its mappings, a sliding-window release to the null block,
and a reset of the prefix cache. The state drawn after each step is the reference's own
(``pagedkv.reference.manager_adapter``), so the demo cannot tell a story the reference does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.check import show_config
from pagedkv.model_tests.teaching.frames import Frame, Walk, copies_of
from pagedkv.model_tests.teaching.snapshot import manager_picture
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.specs.types import ManagerConfig

CONFIG = ManagerConfig(
    block_size=4,
    num_gpu_blocks=8,
    num_cpu_blocks=6,
    watermark=0.0,
    sliding_window=12,
    enable_caching=True,
)

SYSTEM_PROMPT = [11, 12, 13, 14, 15, 16, 17, 18]
QUESTION_1 = [21, 22]
QUESTION_2 = [31, 32, 33]
LONG_PROMPT = list(range(61, 79))
"""18 tokens: 5 blocks."""
HUGE_PROMPT = list(range(100, 140))
"""40 tokens: 10 blocks, more than the GPU has."""


@dataclass(frozen=True)
class Scene:
    says: str
    op: str
    args: tuple[Any, ...]


OPENING = (
    "A block space manager with 8 GPU blocks (ids 0-7) and 6 CPU blocks (ids 8-13) of 4 tokens"
    " each, prefix caching on, and a sliding window of 12 tokens. The window reserves GPU block 0"
    " as the null block: table entries that slide out of the window will point at it."
)

SCENES: tuple[Scene, ...] = (
    Scene(
        "Request 1 arrives: an 8-token system prompt and a 2-token question, 10 tokens, so 3"
        " blocks. The scheduler asks first: OK, 7 blocks are free.",
        "can_allocate",
        (SYSTEM_PROMPT + QUESTION_1,),
    ),
    Scene(
        "The prompt is cut into blocks of 4. The two full blocks get content hashes, chained:"
        " each hash covers its parent's, so equal hashes mean equal whole prefixes. The 2-token"
        " tail stays unhashed, open for the next tokens.",
        "allocate",
        (1, [1], SYSTEM_PROMPT + QUESTION_1),
    ),
    Scene(
        "The model ran the prefill and wrote the KV: the full blocks are now computed (a partial"
        " block never is).",
        "mark_blocks_as_computed",
        (1,),
    ),
    Scene(
        "Request 2 shares the system prompt. Its first two blocks hash to the same chain:"
        " prefix-cache hits. Blocks 1 and 2 are shared (ref count 2); only its 3-token tail takes"
        " a new block. The GPU's hit rate is 2 of 4 lookups.",
        "allocate",
        (2, [2], SYSTEM_PROMPT + QUESTION_2),
    ),
    Scene(
        "So request 2's prefill can skip 8 tokens: they sit in computed blocks already.",
        "get_num_cached_tokens",
        (2,),
    ),
    Scene(
        "Parallel sampling: request 1 forks a second sample, seq 3. A fork copies nothing: seq 3's"
        " table names the same blocks, and every ref count rises.",
        "fork",
        (1, 3),
    ),
    Scene(
        "Seq 1 decodes a token into its last block, but block 3 is shared with seq 3."
        " Copy-on-write: a new block takes a copy, and the pair (3, 5) goes to the copy kernel,"
        " which must run before the model writes the token.",
        "append_slots",
        (1, [41]),
    ),
    Scene(
        "Seq 3 decodes too. Block 3 is now its own (ref count 1), so the token is written in"
        " place: no copy.",
        "append_slots",
        (3, [51]),
    ),
    Scene(
        "Seq 1's block 5 fills up: it is promoted, hashed as the third link of its chain, and"
        " cached.",
        "append_slots",
        (1, [42]),
    ),
    Scene(
        "The pool is running out. Request 4 has 18 tokens, 5 blocks, and only 2 are free: LATER,"
        " the scheduler lets it wait.",
        "can_allocate",
        (LONG_PROMPT,),
    ),
    Scene(
        "A 40-token request needs 10 blocks, more than the GPU holds even when empty (7 besides"
        " the null block): NEVER, and that answer is final.",
        "can_allocate",
        (HUGE_PROMPT,),
    ),
    Scene(
        "Seq 1 finishes. Its own block 5 is hashed, so it is not blanked: it becomes evictable,"
        " cached with ref count 0, still able to serve a hit.",
        "free",
        (1,),
    ),
    Scene(
        "Seq 3 finishes: its unhashed block 3 goes back to the free list. Blocks 1 and 2 are"
        " still held by seq 2.",
        "free",
        (3,),
    ),
    Scene(
        "Request 2 finishes. The system prompt's blocks stay cached as evictable. The free count"
        " the scheduler sees is 7: 4 blank blocks plus 3 evictable ones.",
        "free",
        (2,),
    ),
    Scene(
        "Now request 4 fits: OK.",
        "can_allocate",
        (LONG_PROMPT,),
    ),
    Scene(
        "Its 5 blocks come from the free list first (3, 4, 6, 7). For the fifth the list is"
        " empty, so a cached block is evicted. All three were last accessed at the same time"
        " (never), so the one with the most hashed tokens goes: block 5, the tail of its chain."
        " The system prompt's blocks stay cached for the next request that shares it.",
        "allocate",
        (4, [4], LONG_PROMPT),
    ),
    Scene(
        "Request 4's prefill ran: its full blocks are computed.",
        "mark_blocks_as_computed",
        (4,),
    ),
    Scene(
        "Preemption: request 4 is swapped out to the CPU, every block copied, one (GPU, CPU) pair"
        " each. On the GPU its hashed blocks stay cached as evictable; the tail is blanked.",
        "swap_out",
        (4,),
    ),
    Scene(
        "And swapped back in. Its four hashed blocks are still cached on the GPU: hits, revived in"
        " place with no copy. Only the tail has to be copied back: one pair, (12, 5).",
        "swap_in",
        (4,),
    ),
    Scene(
        "Seq 4 decodes its 19th token (position 18). With a window of 12 it attends to positions"
        " 7-18, so its first block (positions 0-3) is out of the window for good: released"
        " (hashed, so evictable), and its table entry points at the null block 0.",
        "append_slots",
        (4, [79]),
    ),
    Scene(
        "Resetting the prefix cache needs a pool with no block in use. The CPU has none: it is"
        " reset, its cached blocks dropped. The GPU still holds seq 4, so it is left as it is and"
        " the answer is False.",
        "reset_prefix_cache",
        (),
    ),
    Scene(
        "Request 4 finishes: its hashed blocks become evictable, its tail blank.",
        "free",
        (4,),
    ),
    Scene(
        "Now both pools are idle: the hash index and the evictor are emptied and the hit"
        " counters zeroed. Every block is blank again but the null block.",
        "reset_prefix_cache",
        (),
    ),
)


def frames() -> Iterator[Frame]:
    """The opening state, then one frame per scene, each drawn from the reference's view."""
    manager = ReferenceBlockSpaceManager(CONFIG)
    yield Frame(0, "", "", manager_picture(manager.view()), OPENING)
    for number, scene in enumerate(SCENES, 1):
        result = getattr(manager, scene.op)(*scene.args)
        yield Frame(
            number,
            codec.show_call(scene.op, scene.args),
            codec.show_value(result),
            manager_picture(manager.view()),
            scene.says,
            copies_of("manager", scene.op, result),
        )


def walk() -> Walk:
    return Walk(
        "pagedkv demo: the algorithm, one step at a time",
        "manager",
        show_config(CONFIG),
        list(frames()),
    )
