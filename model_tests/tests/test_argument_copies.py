"""Each side gets its own copy of a call's arguments: a target that changes a list it was passed
cannot change what the reference is given next, nor what the trace records (a false PASS found
by trying the wheel as a user)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pagedkv.model_tests.lockstep.calls import detached
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.check import run_check
from pagedkv.reference.manager_adapter import ReferenceBlockSpaceManager
from pagedkv.reference.pool_adapter import ReferenceBlockPool
from pagedkv.specs.content_hash import Prefix
from pagedkv.specs.types import BlockId, Token


def _zero(tokens: Any) -> None:
    if isinstance(tokens, list):
        tokens[:] = [0] * len(tokens)


class ZeroesPrompts(ReferenceBlockSpaceManager):
    """Hashes every prompt as if its tokens were all 0, by writing the zeros into the caller's
    list: different prompts share blocks (one request reads another's KV)."""

    def allocate(self, group_id: int, seq_ids: Sequence[int], prompt: Any, *rest: Any) -> None:
        _zero(prompt)
        super().allocate(group_id, seq_ids, prompt, *rest)


class ZeroesBlocks(ReferenceBlockPool):
    """The same at the pool level: a full block's tokens overwritten with zeros in place."""

    def allocate_immutable(
        self, prefix: Prefix, tokens: Sequence[Token], choice: BlockId | None = None
    ) -> BlockId:
        _zero(tokens)
        return super().allocate_immutable(prefix, tokens, choice)


def test_detached_copies_every_mutable_container_and_keeps_values() -> None:
    prefix = Prefix()
    args = (1, [2, [3]], ([4],), {"k": [5]}, prefix, "s")
    copied = detached(args)
    assert copied == args and copied is not args
    assert copied[1] is not args[1] and copied[1][1] is not args[1][1]
    assert copied[2][0] is not args[2][0] and copied[3]["k"] is not args[3]["k"]
    assert copied[4] is prefix and detached((1, 2)) == (1, 2)


SHARED = """\
{"format": "pagedkv-trace", "version": 2, "level": "manager", "config": {"block_size": 1, \
"num_gpu_blocks": 4, "num_cpu_blocks": 1, "watermark": 0.0, "sliding_window": null, \
"enable_caching": true}}
{"op": "allocate", "args": [1, [2], [5], {"lora_id": null, "cache_salt": null}, null], \
"expect": {"result": null}}
{"op": "allocate", "args": [3, [4], [6], {"lora_id": null, "cache_salt": null}, null], \
"expect": {"result": null}}
{"op": "get_num_free_gpu_blocks", "args": [], "expect": {"result": 2}}
{"end": "pagedkv-trace", "steps": 3}
""".replace("\\\n", "")


def test_a_replayed_trace_catches_a_target_that_changes_its_arguments() -> None:
    """At the call that changes them (before the target's copy was compared, it was seen only
    at step 2, where the zeroed prompt's block is shared)."""
    shared = trace.loads(SHARED)
    verdict = trace.replay(shared, ZeroesPrompts)
    assert verdict.status == "divergence" and verdict.step == 1, verdict.describe()
    assert "the target changed the arguments it was handed" in verdict.describe()
    assert trace.replay(shared, ReferenceBlockSpaceManager).ok


def test_a_check_catches_it_at_both_levels() -> None:
    manager = run_check(ZeroesPrompts, steps=3000, seed=2, trace_out=None)
    assert not manager.passed and manager.trace is not None, manager.message
    assert trace.replay(manager.trace, ReferenceBlockSpaceManager).ok  # recorded unchanged
    pool = run_check(ZeroesBlocks, "pool", steps=3000, seed=0, trace_out=None)
    assert not pool.passed and pool.trace is not None, pool.message
    assert trace.replay(pool.trace, ReferenceBlockPool).ok
