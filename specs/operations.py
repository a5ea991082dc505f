"""The operations of both protocols, as data: each operation's parameters, their kinds and the
kind of its result.

This table is the one place the protocols are listed. ``specs/interface.py`` writes the same
operations as typed Protocols (a test holds the two, and every implementation, to the same names
and parameters); the codec (``specs/wire.py``) turns each kind into JSON; the lockstep sessions
read the kinds to know which arguments and results are block ids; ``specs/oracle.md`` shows the
table.

Kinds (JSON in brackets, see ``specs/oracle.md`` §3):

| kind | value | JSON |
| --- | --- | --- |
| ``seq``, ``group`` | a sequence or group id | integer |
| ``count`` | a number of tokens or lookahead slots | integer |
| ``int`` | a count the operation returns | integer |
| ``block`` | one block id | integer |
| ``blocks`` | block ids | list of integers |
| ``seqs`` | sequence ids | list of integers |
| ``tokens`` | token ids | list of integers |
| ``token_blocks`` | full blocks of token ids, in sequence order | list of lists of integers |
| ``chains`` | a list of block-id lists | list of lists |
| ``pairs`` | ``(source, destination)`` block pairs | list of ``[s, d]`` |
| ``float`` | a time or a rate | number, or ``{"float": "nan"}`` ... |
| ``bool``, ``status``, ``device``, ``extra_key``, ``prefix``, ``none`` | as named | see oracle.md |
| ``request`` | a request as the scheduler passes it (``specs/request_types.py``) | object |
| ``request_id`` | a request id | string |
| ``group_blocks`` | block ids per KV cache group | list of lists of integers |
| ``hit`` | ``get_computed_blocks``' answer: blocks per group and the hit in tokens | object |
| ``events`` | KV events (hashes in hex) | list of objects |
| ``tables`` | block tables by table key (a defragmenter's ``changed``) | list of ``[key, [ids]]`` |
| ``keys`` | table keys (a defragmenter's ``finished``) | list of integers or strings |

A kind ending in ``?`` also admits ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pagedkv.specs.types import Device

Level = Literal["manager", "pool", "request", "defrag"]
LEVELS: tuple[Level, ...] = ("manager", "pool", "request", "defrag")


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str
    default: str | None = None
    """The default, as Python source (``"0"``, ``"None"``, ``"ExtraKey()"``), or None for a
    required parameter. Callers (and traces) may leave optional ones off the end."""

    @property
    def optional(self) -> bool:
        return self.default is not None


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    params: tuple[Param, ...]
    result: str
    pair_devices: tuple[Device, Device] | None = None
    """For a result of kind ``pairs``: the devices of each pair's source and destination."""
    optional: bool = False
    """A target may lack it: the caller then makes the call the operation's spec names in its
    place (``preempt``: ``free``), and the operation is never sent to that target."""

    @property
    def min_args(self) -> int:
        return sum(1 for p in self.params if not p.optional)

    def signature(self) -> str:
        """``name(param, param=default, ...)``, as the docs show it."""
        shown = (p.name if p.default is None else f"{p.name}={p.default}" for p in self.params)
        return f"{self.name}({', '.join(shown)})"


def _op(
    name: str,
    result: str,
    *params: str,
    pairs: tuple[Device, Device] | None = None,
    optional: bool = False,
) -> Operation:
    """``"name:kind"`` is required, ``"name:kind=default"`` optional."""
    parsed = []
    for text in params:
        param, _, rest = text.partition(":")
        kind, equals, default = rest.partition("=")
        parsed.append(Param(param, kind, default if equals else None))
    return Operation(name, tuple(parsed), result, pairs, optional)


GPU, CPU = Device.GPU, Device.CPU

MANAGER_OPERATIONS: tuple[Operation, ...] = (
    _op(
        "can_allocate",
        "status",
        "prompt:tokens",
        "num_lookahead_slots:count=0",
        "encoder_prompt:tokens?=None",
    ),
    _op(
        "allocate",
        "none",
        "group_id:group",
        "seq_ids:seqs",
        "prompt:tokens",
        "extra_key:extra_key=ExtraKey()",
        "encoder_prompt:tokens?=None",
    ),
    _op(
        "can_append_slots",
        "bool",
        "group_id:group",
        "num_new_tokens:count=1",
        "num_lookahead_slots:count=0",
    ),
    _op(
        "append_slots",
        "pairs",
        "seq_id:seq",
        "tokens:tokens",
        "num_lookahead_slots:count=0",
        pairs=(GPU, GPU),
    ),
    _op("fork", "none", "parent_id:seq", "child_id:seq"),
    _op("free", "none", "seq_id:seq"),
    _op("can_swap_out", "status", "group_id:group"),
    _op("can_swap_in", "status", "group_id:group", "num_lookahead_slots:count=0"),
    _op("swap_out", "pairs", "group_id:group", pairs=(GPU, CPU)),
    _op("swap_in", "pairs", "group_id:group", pairs=(CPU, GPU)),
    _op("get_block_table", "blocks", "seq_id:seq"),
    _op("get_cross_block_table", "blocks", "group_id:group"),
    _op("get_num_free_gpu_blocks", "int"),
    _op("get_num_free_cpu_blocks", "int"),
    _op("access_all_blocks_in_seq", "none", "seq_id:seq", "now:float"),
    _op("mark_blocks_as_computed", "none", "group_id:group"),
    _op("get_common_computed_block_ids", "blocks", "seq_ids:seqs"),
    _op("get_num_cached_tokens", "int", "seq_id:seq"),
    _op("get_prefix_cache_hit_rate", "float", "device:device"),
    _op("reset_prefix_cache", "bool", "device:device?=None"),
)

POOL_OPERATIONS: tuple[Operation, ...] = (
    _op("allocate_mutable", "block"),
    _op("allocate_immutable", "block", "prefix:prefix", "tokens:tokens"),
    _op("append_tokens", "block", "block:block", "prefix:prefix", "tokens:tokens"),
    _op("free", "none", "block:block"),
    _op("fork", "blocks", "chain:blocks"),
    _op("cow_if_not_appendable", "block", "block:block"),
    _op("clear_copy_on_writes", "pairs"),
    _op("mark_accessed", "none", "blocks:blocks", "now:float"),
    _op("mark_computed", "none", "blocks:blocks"),
    _op("common_computed_prefix", "blocks", "chains:chains"),
    _op("num_free_blocks", "int"),
    _op("hit_rate", "float"),
    _op("reset_prefix_cache", "bool"),
    _op("take_events", "events", optional=True),
    _op(
        "allocate_immutable_chain",
        "blocks",
        "prefix:prefix",
        "token_blocks:token_blocks",
        optional=True,
    ),
    _op("free_blocks", "none", "blocks:blocks", optional=True),
)

REQUEST_OPERATIONS: tuple[Operation, ...] = (
    _op("get_computed_blocks", "hit", "request:request"),
    _op(
        "allocate_slots",
        "group_blocks?",
        "request:request",
        "num_new_tokens:count",
        "num_new_computed_tokens:count=0",
        "new_computed_blocks:group_blocks?=None",
        "num_lookahead_tokens:count=0",
    ),
    _op("free", "none", "request_id:request_id"),
    _op("preempt", "none", "request_id:request_id", optional=True),
    _op("get_block_ids", "group_blocks", "request_id:request_id"),
    _op("num_free_blocks", "int"),
    _op("usage", "float"),
    _op("reset_prefix_cache", "bool"),
    _op("take_events", "events"),
)

DEFRAG_OPERATIONS: tuple[Operation, ...] = (
    _op("update_state", "none", "changed:tables", "finished:keys"),
    _op("defragment", "pairs"),
    _op("resolve", "block", "block:block"),
    _op("resolve_all", "chains", "tables:chains"),
    _op("unresolve", "block", "physical:block"),
)

OPERATIONS: dict[Level, dict[str, Operation]] = {
    "manager": {op.name: op for op in MANAGER_OPERATIONS},
    "pool": {op.name: op for op in POOL_OPERATIONS},
    "request": {op.name: op for op in REQUEST_OPERATIONS},
    "defrag": {op.name: op for op in DEFRAG_OPERATIONS},
}


def required(level: Level) -> list[str]:
    """The operations every target of ``level`` must have (the optional ones left out)."""
    return [name for name, op in OPERATIONS[level].items() if not op.optional]


ALLOCATING_POOL_OPERATIONS: frozenset[str] = frozenset(
    op.name for op in POOL_OPERATIONS if op.result == "block"
)
"""Pool operations that may take a block from the pool: each returns the block the caller holds
afterwards (so the returned id tells which block an implementation chose)."""

ERRORS: dict[Level, tuple[str, ...]] = {
    "manager": (
        "ConfigurationError",
        "InvalidArgumentError",
        "OutOfBlocksError",
        "UnknownSequenceError",
        "DuplicateSequenceError",
        "SequenceStateError",
        "UnsupportedError",
    ),
    "pool": (
        "ConfigurationError",
        "InvalidArgumentError",
        "OutOfBlocksError",
        "DoubleFreeError",
        "ForeignBlockError",
        "UnallocatedBlockError",
        "TooManyTokensError",
    ),
    "request": (
        "ConfigurationError",
        "InvalidArgumentError",
        "ForeignBlockError",
        "UnknownRequestError",
        "RequestStateError",
    ),
    "defrag": (
        "ConfigurationError",
        "InvalidArgumentError",
        "ForeignBlockError",
        "UnknownSequenceError",
    ),
}
"""The error classes (``pagedkv.specs.errors``) each level raises; ``ConfigurationError`` on
creation."""


def level_of(text: object) -> Level:
    """The level ``text`` names, or ``ValueError``."""
    if text == "manager":
        return "manager"
    if text == "pool":
        return "pool"
    if text == "request":
        return "request"
    if text == "defrag":
        return "defrag"
    raise ValueError(f"unknown level {text!r} (expected 'manager', 'pool', 'request' or 'defrag')")


RESULTS: dict[str, str] = {
    "status": "`AllocStatus`",
    "none": "`None`",
    "bool": "`bool`",
    "int": "`int`",
    "float": "`float`",
    "block": "a block id",
    "blocks": "block ids",
    "chains": "block tables (lists of block ids)",
    "group_blocks": "block ids per group",
    "group_blocks?": "block ids per group (the new ones), or `None`",
    "hit": "`(block ids per group, num_tokens)`",
    "events": "`[KVEvent]`",
}


def _result_text(operation: Operation) -> str:
    if operation.pair_devices is not None:
        source, destination = (d.value.upper() for d in operation.pair_devices)
        return f"`[(source, destination)]`: {source} → {destination} ids"
    if operation.result == "pairs":
        return "`[(source, destination)]`"
    return RESULTS[operation.result]


def markdown_table(level: Level) -> str:
    """The level's operations as the table ``specs/oracle.md`` §2 shows."""
    rows = ["| operation | result |", "| --- | --- |"]
    rows += [
        f"| `{op.signature()}`{' (optional)' if op.optional else ''} | {_result_text(op)} |"
        for op in OPERATIONS[level].values()
    ]
    return "\n".join(rows)
