"""The serving workload at the pool level: what a pool of one device is asked while the bench's
scheduler runs (``workload.py``), as three kinds of event every pool driver can replay.

No pool-level stream is recorded anywhere, so it is derived from the manager-level one, the way
vLLM v1 (whose pool has no fork, swap or copy-on-write) would serve the same requests:

- ``allocate``: a prompt for each sequence;
- ``append_slots``: one decode event per token (lookahead slots are the manager's business);
- ``fork``: the child is a new request whose prompt is the parent's tokens so far (v1 samples in
  parallel as separate requests that share the prompt through the prefix cache);
- ``swap_out``: every sequence of the group frees its blocks; ``swap_in``: each comes back as a
  prompt of its tokens so far (v1 preempts by recompute, and recomputation hits the cache);
- ``free``: the sequence frees its blocks (if they are on the device);
- the scheduler's questions (``can_*``, tables, access times, computed marks) ask nothing of
  the blocks' ownership, and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagedkv.model_tests.bench.workload import Workload
from pagedkv.specs.types import ExtraKey, Token

PROMPT = 0
DECODE = 1
FREE = 2

Event = tuple[int, int, Any]
"""(kind, sequence id, payload): a prompt's payload is (tokens, extra key), a decode's the token,
a free's None."""


@dataclass(frozen=True)
class PoolStream:
    events: list[Event]
    block_size: int
    peak_blocks: int
    """The most blocks the live sequences would hold with nothing shared: a pool this large never
    runs out, however its cache hits fall."""
    prompt_blocks: int
    """Blocks the prompts cover (full and partial)."""
    freed_blocks: int
    """Blocks the frees give back."""

    def counts(self) -> dict[str, int]:
        """Events of each kind, and the blocks that prompts and frees cover."""
        kinds = [kind for kind, _, _ in self.events]
        return {
            "prompts": kinds.count(PROMPT),
            "prompt_blocks": self.prompt_blocks,
            "decode_tokens": kinds.count(DECODE),
            "frees": kinds.count(FREE),
            "freed_blocks": self.freed_blocks,
        }


def derive(workload: Workload) -> PoolStream:
    """The pool-level events of ``workload``'s manager-level calls (module docstring)."""
    size = workload.spec.block_size
    events: list[Event] = []
    tokens: dict[int, list[Token]] = {}
    keys: dict[int, ExtraKey] = {}
    groups: dict[int, list[int]] = {}
    group_of: dict[int, int] = {}
    resident: set[int] = set()
    held = peak = prompt_blocks = freed_blocks = 0

    def blocks(seq: int) -> int:
        return -(-len(tokens[seq]) // size)

    def prompt(seq: int) -> None:
        nonlocal held, peak, prompt_blocks
        events.append((PROMPT, seq, (tuple(tokens[seq]), keys[seq])))
        resident.add(seq)
        held += blocks(seq)
        prompt_blocks += blocks(seq)
        peak = max(peak, held)

    def release(seq: int) -> None:
        nonlocal held, freed_blocks
        events.append((FREE, seq, None))
        resident.discard(seq)
        held -= blocks(seq)
        freed_blocks += blocks(seq)

    for name, args in workload.calls:
        if name == "allocate":
            group, seq_ids, prompt_tokens = args[0], args[1], args[2]
            key = args[3] if len(args) > 3 else ExtraKey()
            groups[group] = list(seq_ids)
            for seq in seq_ids:
                tokens[seq], keys[seq], group_of[seq] = list(prompt_tokens), key, group
                prompt(seq)
        elif name == "append_slots":
            seq = args[0]
            for token in args[1]:
                if len(tokens[seq]) % size == 0:
                    held += 1
                    peak = max(peak, held)
                tokens[seq].append(token)
                events.append((DECODE, seq, token))
        elif name == "fork":
            parent, child = args
            tokens[child], keys[child] = list(tokens[parent]), keys[parent]
            group_of[child] = group_of[parent]
            groups[group_of[parent]].append(child)
            prompt(child)
        elif name == "free":
            seq = args[0]
            if seq in resident:
                release(seq)
            groups[group_of[seq]].remove(seq)
            del tokens[seq], keys[seq], group_of[seq]
        elif name == "swap_out":
            for seq in groups[args[0]]:
                release(seq)
        elif name == "swap_in":
            for seq in groups[args[0]]:
                prompt(seq)
    return PoolStream(events, size, peak, prompt_blocks, freed_blocks)
