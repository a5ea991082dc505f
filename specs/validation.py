"""Input checks shared by every implementation, so both sides reject bad input the same way.

Each check raises the typed error of ``pagedkv.specs.errors`` with a message naming the offending
value.
The PEP 316 contracts in the docstrings say what a check lets through, and that it raises nothing
but the typed errors it declares (``make crosshair`` checks them).
Checks that need an implementation's state take the few facts they read (a block's ref count,
whether it is hashed, how many tokens it holds; a sequence table) from the caller, so that the
order of the checks and their messages are written once, here, for every implementation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence, Set
from typing import NamedTuple, TypeGuard, TypeVar

from pagedkv.specs.content_hash import (  # encodable: read by the contracts
    Prefix,
    encodable,  # noqa: F401
    utf8_encodable,
)
from pagedkv.specs.errors import (
    ConfigurationError,
    ForeignBlockError,
    InvalidArgumentError,
    SequenceStateError,
    TooManyTokensError,
    UnallocatedBlockError,
    UnknownSequenceError,
    UnsupportedError,
)
from pagedkv.specs.types import (
    MAX_TOKEN,
    BlockHash,
    BlockId,
    DefragConfig,
    Device,
    ExtraKey,
    ManagerConfig,
    PoolConfig,
    TableKey,
    Token,
    is_time,
)

_LARGEST_FLOAT = sys.float_info.max
E = TypeVar("E", bound=Exception)
Item = TypeVar("Item")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_value(value: object) -> int | None:
    """An int's value as a plain int (None for anything else, a bool included). An int
    subclass is judged, and kept, by ``int(value)``, never by its own comparisons, which may say
    anything: ``-5`` claiming to be at least 0 once passed the range check and failed later as an
    untyped ``struct.error``. (An ``__int__`` that raises or answers a non-int: not an int.)"""
    if type(value) is int:
        return value
    if not _is_int(value):
        return None
    try:
        plain = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return plain if type(plain) is int else None


def _is_sequence(value: object) -> TypeGuard[Sequence[object]]:
    """A list-like of items; text and byte strings are not sequences of ids or tokens."""
    if type(value) is list or type(value) is tuple:  # most arguments: no look at the ABC
        return True
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


MAX_BLOCKS = 2**24
"""The most blocks one device may have (a pool, or a manager's GPU or CPU)."""
MAX_BLOCK_SIZE = 2**16
"""The most tokens a block may hold."""
MAX_SLIDING_WINDOW = 2**31
"""The longest sliding window, in tokens."""
CONFIG_BOUNDS: dict[str, int] = {
    "num_blocks": MAX_BLOCKS,
    "num_gpu_blocks": MAX_BLOCKS,
    "num_cpu_blocks": MAX_BLOCKS,
    "block_size": MAX_BLOCK_SIZE,
    "sliding_window": MAX_SLIDING_WINDOW,
}
"""Upper bounds of the configuration fields: no configuration, however it arrives (a constructor,
a trace header), makes an implementation try to build more than a machine holds."""

_BOUND_TEXT = {MAX_BLOCKS: "2**24", MAX_BLOCK_SIZE: "2**16", MAX_SLIDING_WINDOW: "2**31"}


def _check_bound(name: str, value: object) -> None:
    bound = CONFIG_BOUNDS[name]
    if _is_int(value) and isinstance(value, int) and value > bound:
        raise ConfigurationError(
            f"{name} must be at most {_BOUND_TEXT[bound]} ({bound}), got {value}"
        )


def check_config_bounds(config: object) -> None:
    """Every int field of a configuration within its bound (``CONFIG_BOUNDS``). Fields of other
    types are left to the full check: a trace may carry a configuration the spec refuses for
    another reason, but never one too large to build."""
    for name in CONFIG_BOUNDS:
        _check_bound(name, getattr(config, name, None))


def _check_config_int(config: object, name: str, minimum: int) -> None:
    value = getattr(config, name)
    if not _is_int(value) or value < minimum:
        raise ConfigurationError(f"{name} must be an int >= {minimum}, got {value!r}")
    if name in CONFIG_BOUNDS:
        _check_bound(name, value)


def check_pool_config(config: PoolConfig) -> None:
    """
    raises: ConfigurationError
    post: config.num_blocks >= 1 and config.block_size >= 1 and config.first_id >= 0
    """
    if not isinstance(config, PoolConfig):
        raise ConfigurationError(f"expected a PoolConfig, got {config!r}")
    _check_config_int(config, "num_blocks", 1)
    _check_config_int(config, "block_size", 1)
    _check_config_int(config, "first_id", 0)
    if not isinstance(config.enable_caching, bool):
        raise ConfigurationError(f"enable_caching must be a bool, got {config.enable_caching!r}")


def check_block_id(config: PoolConfig, block: object) -> BlockId:
    """
    pre: config.num_blocks >= 1 and config.first_id >= 0
    raises: InvalidArgumentError, ForeignBlockError
    post: _ in config.block_ids
    """
    value = int_value(block)
    if value is None:
        raise InvalidArgumentError(f"block id must be an int, got {block!r}")
    if not config.first_id <= value < config.first_id + config.num_blocks:
        raise ForeignBlockError(
            f"block {value} is not in this pool (ids {config.first_id}.."
            f"{config.first_id + config.num_blocks - 1})"
        )
    return value


def check_chains(config: PoolConfig, chains: object) -> list[list[BlockId]]:
    """
    pre: config.num_blocks >= 1 and config.first_id >= 0
    raises: InvalidArgumentError, ForeignBlockError
    post: all(block in config.block_ids for chain in _ for block in chain)
    """
    if not _is_sequence(chains):
        raise InvalidArgumentError(f"expected a sequence of chains, got {chains!r}")
    return [check_block_ids(config, chain) for chain in chains]


def check_block_ids(config: PoolConfig, blocks: object) -> list[BlockId]:
    """
    pre: config.num_blocks >= 1 and config.first_id >= 0
    raises: InvalidArgumentError, ForeignBlockError
    post: _ == list(blocks) and all(block in config.block_ids for block in _)
    """
    if not _is_sequence(blocks):
        raise InvalidArgumentError(f"expected a sequence of block ids, got {blocks!r}")
    low, high = config.first_id, config.first_id + config.num_blocks
    # a plain int in range is taken at once (most ids of every call); any other is checked
    return [
        block if type(block) is int and low <= block < high else check_block_id(config, block)
        for block in blocks
    ]


def check_batch(name: str, items: Sequence[Item]) -> list[Item]:
    """The items of a batch operation (``block_pool.md`` §5, batches), each checked later by
    the single operation it stands for.

    raises: InvalidArgumentError
    post: _ == list(items)
    """
    if not _is_sequence(items):
        raise InvalidArgumentError(f"{name}: expected a sequence, got {items!r}")
    return list(items)


def in_batch(error: E, name: str, index: int) -> E:
    """``error``, raised by a batch's ``index``-th single operation, as the batch raises it: the
    same type, its message saying which item it was."""
    return type(error)(f"{name}[{index}]: {error}")


def check_tokens(tokens: object, *, allow_empty: bool = False) -> list[Token]:
    """
    raises: InvalidArgumentError
    post: _ == list(tokens) and all(0 <= token <= MAX_TOKEN for token in _)
    post: allow_empty or _
    """
    if (type(tokens) is list or type(tokens) is tuple) and (tokens or allow_empty):
        for token in tokens:  # the common case: plain ints in range; anything else, the full check
            if type(token) is not int or not 0 <= token <= MAX_TOKEN:
                break
        else:
            return list(tokens)
    if not _is_sequence(tokens):
        raise InvalidArgumentError(f"expected a sequence of token ids, got {tokens!r}")
    checked: list[Token] = []
    for token in tokens:
        value = int_value(token)
        if value is None or not 0 <= value <= MAX_TOKEN:
            raise InvalidArgumentError(f"token ids are ints in [0, 2**63), got {token!r}")
        checked.append(value)
    if not checked and not allow_empty:
        raise InvalidArgumentError("expected at least one token, got none")
    return checked


def check_new_tokens(tokens: object) -> tuple[Token, ...]:
    """The tokens of an append (none is allowed), as a tuple: a block keeps its tokens in one.
    A decode step appends one token or a few: plain ints pass in one short loop.

    raises: InvalidArgumentError
    post: _ == tuple(tokens) and all(0 <= token <= MAX_TOKEN for token in _)
    """
    if type(tokens) is list or type(tokens) is tuple:
        for token in tokens:
            if type(token) is not int or not 0 <= token <= MAX_TOKEN:
                break
        else:
            return tuple(tokens)
    return tuple(check_tokens(tokens, allow_empty=True))


def check_extra_key(extra_key: object) -> ExtraKey:
    """
    raises: InvalidArgumentError
    post: encodable(_)
    """
    if not isinstance(extra_key, ExtraKey):
        raise InvalidArgumentError(f"expected an ExtraKey, got {extra_key!r}")
    lora = extra_key.lora_id
    lora_value = None if lora is None else int_value(lora)
    if lora is not None and (lora_value is None or not 0 <= lora_value <= MAX_TOKEN):
        raise InvalidArgumentError(f"lora_id must be None or an int in [0, 2**63), got {lora!r}")
    salt = extra_key.cache_salt
    if salt is not None and (not isinstance(salt, str) or not utf8_encodable(salt)):
        raise InvalidArgumentError(f"cache_salt must be None or a UTF-8 str, got {salt!r}")
    return extra_key


def check_prefix(prefix: object, block_size: int) -> Prefix:
    """
    pre: block_size >= 1
    raises: InvalidArgumentError
    post: len(_.hash) == 32 and _.num_tokens % block_size == 0 and encodable(_.extra_key)
    """
    if not isinstance(prefix, Prefix):
        raise InvalidArgumentError(f"expected a Prefix, got {prefix!r}")
    if not isinstance(prefix.hash, bytes) or len(prefix.hash) != 32:
        raise InvalidArgumentError(f"a prefix hash is 32 bytes, got {prefix.hash!r}")
    if not _is_int(prefix.num_tokens) or prefix.num_tokens < 0:
        raise InvalidArgumentError(f"prefix length must be >= 0, got {prefix.num_tokens!r}")
    if prefix.num_tokens % block_size:
        raise InvalidArgumentError(
            f"a prefix covers whole blocks of {block_size}, got {prefix.num_tokens} tokens"
        )
    check_extra_key(prefix.extra_key)
    return prefix


def check_time(now: object) -> float:
    """
    raises: InvalidArgumentError
    post: 0 <= _ < float("inf")
    """
    if type(now) is float and 0.0 <= now <= _LARGEST_FLOAT:  # the common case (NaN fails it)
        return now
    if not is_time(now):
        raise InvalidArgumentError(f"now must be a finite number >= 0, got {now!r}")
    assert isinstance(now, int | float)
    return float(now)


def check_manager_config(config: ManagerConfig) -> None:
    """
    raises: ConfigurationError
    post: 0 <= config.watermark < 1 and config.num_cpu_blocks >= 1
    post: config.sliding_window is None or config.num_gpu_blocks >= 2
    """
    if not isinstance(config, ManagerConfig):
        raise ConfigurationError(f"expected a ManagerConfig, got {config!r}")
    for name in ("block_size", "num_gpu_blocks", "num_cpu_blocks"):
        _check_config_int(config, name, 1)
    watermark = config.watermark
    if (
        not isinstance(watermark, int | float)
        or isinstance(watermark, bool)
        or not (0 <= watermark < 1)
    ):
        raise ConfigurationError(f"watermark must be a number in [0, 1), got {watermark!r}")
    window = config.sliding_window
    if window is not None and (not _is_int(window) or window < 1):
        raise ConfigurationError(f"sliding_window must be None or an int >= 1, got {window!r}")
    _check_bound("sliding_window", window)
    if window is not None and config.num_gpu_blocks < 2:
        raise ConfigurationError(
            f"a sliding window reserves a null block: num_gpu_blocks must be >= 2, got"
            f" {config.num_gpu_blocks}"
        )
    if not isinstance(config.enable_caching, bool):
        raise ConfigurationError(f"enable_caching must be a bool, got {config.enable_caching!r}")


def check_content_hash(content_hash: object) -> BlockHash:
    """A block's content hash: the 32 bytes of ``pagedkv.specs.content_hash.block_hash``."""
    if not isinstance(content_hash, bytes) or len(content_hash) != 32:
        raise InvalidArgumentError(f"a content hash is 32 bytes, got {content_hash!r}")
    return content_hash


def check_device(device: object) -> Device:
    """
    raises: InvalidArgumentError
    post: _ in (Device.GPU, Device.CPU)
    """
    if not isinstance(device, Device):
        raise InvalidArgumentError(f"expected a Device, got {device!r}")
    return device


def check_id(kind: str, value: object) -> int:
    """
    raises: InvalidArgumentError
    post: _ == value
    """
    found = int_value(value)
    if found is None:
        raise InvalidArgumentError(f"{kind} id must be an int, got {value!r}")
    return found


def check_seq_ids(value: object, *, non_empty: bool = False) -> list[int]:
    """
    raises: InvalidArgumentError
    post: _ == list(value)
    post: _ or not non_empty
    """
    if type(value) is list and (value or not non_empty):
        for seq_id in value:  # the common case: a list of plain ints
            if type(seq_id) is not int:
                break
        else:
            return list(value)
    if not _is_sequence(value) or (non_empty and not value):
        what = "a non-empty sequence" if non_empty else "a sequence"
        raise InvalidArgumentError(f"expected {what} of sequence ids, got {value!r}")
    return [check_id("sequence", s) for s in value]


def check_count(kind: str, value: object) -> int:
    """
    raises: InvalidArgumentError
    post: _ == value >= 0
    """
    if type(value) is int and value >= 0:
        return value
    found = int_value(value)
    if found is None or found < 0:
        raise InvalidArgumentError(f"{kind} must be an int >= 0, got {value!r}")
    return found


def check_encoder_support(config: ManagerConfig, encoder: object) -> list[Token] | None:
    """Cross-attention tables are plain: caching and sliding windows are refused for them.

    raises: InvalidArgumentError, UnsupportedError
    post: _ is None or (not config.enable_caching and config.sliding_window is None)
    """
    if encoder is None:
        return None
    tokens = check_tokens(encoder)
    if config.enable_caching or config.sliding_window is not None:
        raise UnsupportedError(
            "encoder-decoder groups support neither prefix caching nor a sliding window"
            f" (enable_caching={config.enable_caching}, sliding_window={config.sliding_window})"
        )
    return tokens


# --- checks over a block's state ----------------------------------------------------------------


class BlockFacts(NamedTuple):
    """What the pool checks read of one block."""

    ref_count: int
    hashed: bool
    num_tokens: int


def check_live(block: BlockId, facts: BlockFacts) -> None:
    """``live(b)``: somebody holds the block; a free or merely cached block is an error here.

    raises: UnallocatedBlockError
    post: facts.ref_count != 0
    """
    if facts.ref_count == 0:
        where = "cached but unused" if facts.hashed else "free"
        raise UnallocatedBlockError(f"block {block} is {where}, not allocated")


def check_known(block: BlockId, facts: BlockFacts) -> None:
    """``known(b)``: the block is held or cached (both have meaningful contents).

    raises: UnallocatedBlockError
    post: facts.ref_count != 0 or facts.hashed
    """
    if facts.ref_count == 0 and not facts.hashed:
        raise UnallocatedBlockError(f"block {block} is free, not allocated or cached")


def check_full_block(tokens: object, block_size: int) -> list[Token]:
    """The tokens of an immutable block: exactly ``block_size`` of them.

    pre: block_size >= 1
    raises: InvalidArgumentError, TooManyTokensError
    post: len(_) == block_size
    """
    checked = check_tokens(tokens)
    if len(checked) > block_size:
        raise TooManyTokensError(f"{len(checked)} tokens do not fit a block of {block_size}")
    if len(checked) < block_size:
        raise InvalidArgumentError(
            f"an immutable block holds exactly {block_size} tokens, got {len(checked)}"
        )
    return checked


def check_append(
    config: PoolConfig,
    block: object,
    prefix: object,
    tokens: object,
    facts_of: Callable[[BlockId], BlockFacts],
) -> tuple[BlockId, list[Token]]:
    """``append_tokens``'s checks, in order: id, live, tokens, prefix, room in the block.

    pre: config.num_blocks >= 1 and config.block_size >= 1 and config.first_id >= 0
    raises: InvalidArgumentError, ForeignBlockError, UnallocatedBlockError, TooManyTokensError
    post: _[0] in config.block_ids and 1 <= len(_[1])
    """
    checked_block = check_block_id(config, block)
    facts = facts_of(checked_block)
    check_live(checked_block, facts)
    checked = check_tokens(tokens)
    check_prefix(prefix, config.block_size)
    room = config.block_size - facts.num_tokens
    if len(checked) > room:
        raise TooManyTokensError(
            f"block {checked_block} has {room} empty slots, cannot append {len(checked)} tokens"
        )
    return checked_block, checked


def check_appendable(
    config: PoolConfig, block: object, facts_of: Callable[[BlockId], BlockFacts]
) -> BlockId:
    """``cow_if_not_appendable``'s checks, in order: id, live, not already full.

    pre: config.num_blocks >= 1 and config.block_size >= 1 and config.first_id >= 0
    raises: InvalidArgumentError, ForeignBlockError, UnallocatedBlockError, TooManyTokensError
    post: _ in config.block_ids
    """
    checked_block = check_block_id(config, block)
    facts = facts_of(checked_block)
    check_live(checked_block, facts)
    if facts.num_tokens == config.block_size:
        raise TooManyTokensError(f"block {checked_block} is full; nothing can be appended to it")
    return checked_block


# --- sequence and group lookups ------------------------------------------------------------------

Found = TypeVar("Found")


def _lookup(kind: str, found_in: Mapping[int, Found], value: object) -> Found:
    checked = check_id(kind, value)
    found = found_in.get(checked)
    if found is None:
        raise UnknownSequenceError(f"{kind} {checked} is not known to the manager")
    return found


def lookup_sequence(seqs: Mapping[int, Found], seq_id: object) -> Found:
    """``seq(x)``: an int naming a live sequence.

    raises: InvalidArgumentError, UnknownSequenceError
    post: _ is seqs[seq_id]
    """
    return _lookup("sequence", seqs, seq_id)


def lookup_group(groups: Mapping[int, Found], group_id: object) -> Found:
    """``group(x)``: an int naming a live group.

    raises: InvalidArgumentError, UnknownSequenceError
    post: _ is groups[group_id]
    """
    return _lookup("group", groups, group_id)


def check_on_device(group_id: object, device: Device, expected: Device, action: str) -> None:
    """``on(g, D)``: the group's blocks are on ``expected``.

    raises: SequenceStateError
    post: device is expected
    """
    if device is not expected:
        raise SequenceStateError(
            f"cannot {action} group {group_id}: its blocks are on the {device.value}"
        )


# --- the defragmenter ---------------------------------------------------------------------------


def check_defrag_config(config: DefragConfig) -> None:
    if not isinstance(config, DefragConfig):
        raise ConfigurationError(f"expected a DefragConfig, got {config!r}")
    _check_config_int(config, "num_blocks", 1)
    _check_config_int(config, "threshold", 0)
    sizes = config.pad_sizes
    if (
        not isinstance(sizes, tuple)
        or not sizes
        or not all(_is_int(s) and 1 <= s <= MAX_BLOCKS for s in sizes)
        or list(sizes) != sorted(set(sizes))
    ):
        raise ConfigurationError(
            f"pad_sizes must be a non-empty increasing tuple of ints from 1 to {MAX_BLOCKS},"
            f" got {sizes!r}"
        )
    reserved = config.reserved
    if not isinstance(reserved, frozenset) or not all(
        _is_int(b) and 0 <= b < config.num_blocks for b in reserved
    ):
        raise ConfigurationError(
            f"reserved must be a frozenset of ids in 0..{config.num_blocks - 1}, got {reserved!r}"
        )


def check_defrag_id(config: DefragConfig, block: object, kind: str = "block") -> BlockId:
    """A logical or physical id of the defragmented device: an int in ``0 .. num_blocks - 1``."""
    value = int_value(block)
    if value is None:
        raise InvalidArgumentError(f"{kind} id must be an int, got {block!r}")
    if not 0 <= value < config.num_blocks:
        raise ForeignBlockError(
            f"{kind} {value} is not on the defragmented device (ids 0..{config.num_blocks - 1})"
        )
    return value


def check_defrag_table(config: DefragConfig, table: object) -> list[BlockId]:
    if not _is_sequence(table):
        raise InvalidArgumentError(f"expected a block table (a sequence of ids), got {table!r}")
    return [check_defrag_id(config, block, "logical block") for block in table]


def check_defrag_tables(config: DefragConfig, tables: object) -> list[list[BlockId]]:
    if not _is_sequence(tables):
        raise InvalidArgumentError(f"expected a sequence of block tables, got {tables!r}")
    return [check_defrag_table(config, table) for table in tables]


def check_table_update(
    config: DefragConfig, changed: object, finished: object, known: Collection[TableKey]
) -> tuple[dict[TableKey, list[BlockId]], list[TableKey]]:
    """``update_state``'s checks, in order: ``changed`` maps keys to tables of valid ids;
    ``finished`` lists known keys, each once, none of them also in ``changed``."""
    if not isinstance(changed, Mapping):
        raise InvalidArgumentError(f"changed must map table keys to block tables, got {changed!r}")
    tables = {key: check_defrag_table(config, table) for key, table in changed.items()}
    if not _is_sequence(finished) and not isinstance(finished, Set):
        raise InvalidArgumentError(f"finished must be a collection of table keys, got {finished!r}")
    done: dict[TableKey, None] = {}
    for key in finished:
        if not isinstance(key, Hashable):
            raise InvalidArgumentError(f"a table key must be hashable, got {key!r}")
        if key in tables:
            raise InvalidArgumentError(f"table {key!r} is both changed and finished")
        if key not in known or key in done:
            raise UnknownSequenceError(f"table {key!r} is not known to the defragmenter")
        done[key] = None
    return tables, list(done)
