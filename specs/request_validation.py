"""Input checks of the request level (``specs/request_level.md`` §8), shared by every
implementation so that all of them refuse bad input alike, in one order, with one message.

Each check raises a typed error of ``pagedkv.specs.errors`` naming the offending value, before
anything changes. The one check that reads a manager's state, whether an offered hit's blocks
are cached where the request says, takes the fact it reads as a function (``CachedAs``), so the
reference and an optimized implementation answer it from their own tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pagedkv.specs.errors import (
    ConfigurationError,
    ForeignBlockError,
    InvalidArgumentError,
    RequestStateError,
)
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    NULL_BLOCK,
    AttentionKind,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
    RequestId,
)
from pagedkv.specs.request_view import CachedKey
from pagedkv.specs.types import MAX_TOKEN, NO_EXTRA_KEY, BlockHash, BlockId
from pagedkv.specs.validation import (
    check_config_bounds,
    check_count,
    check_extra_key,
    check_tokens,
)


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_list_like(value: object) -> bool:
    return isinstance(value, list | tuple)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b >= 1``.

    pre: b >= 1
    post: (_ - 1) * b < a <= _ * b
    """
    return -(-a // b)


def hit_blocks_needed(window: int, block_size: int) -> int:
    """How many contiguous cached blocks ending at a hit's length a window group needs to serve
    it: ``cdiv(W - 1, B)`` (``specs/request_level.md`` §3).

    pre: window >= 2 and block_size >= 1
    post: _ >= 1
    """
    return cdiv(window - 1, block_size)


# --- the configuration ------------------------------------------------------------------------


def _check_group(index: int, group: object) -> None:
    if not isinstance(group, KVGroup) or not isinstance(group.kind, AttentionKind):
        raise ConfigurationError(f"group {index} must be a KVGroup, got {group!r}")
    window = group.sliding_window
    if group.kind is AttentionKind.FULL:
        if window is not None:
            raise ConfigurationError(
                f"group {index} is full attention: its sliding_window must be None, got {window!r}"
            )
        return
    if not _is_int(window) or not isinstance(window, int) or window < 2:
        raise ConfigurationError(
            f"group {index} is a sliding window: sliding_window must be an int >= 2, got {window!r}"
        )
    check_config_bounds(group)


def check_request_config(config: object) -> RequestConfig:
    """
    raises: ConfigurationError
    post: _.num_blocks >= 2 and _.block_size >= 1 and len(_.groups) >= 1
    """
    if not isinstance(config, RequestConfig):
        raise ConfigurationError(f"expected a RequestConfig, got {config!r}")
    for name, minimum in (("num_blocks", 2), ("block_size", 1)):
        value = getattr(config, name)
        if not _is_int(value) or value < minimum:
            raise ConfigurationError(f"{name} must be an int >= {minimum}, got {value!r}")
    check_config_bounds(config)
    groups = config.groups
    if not isinstance(groups, tuple) or not groups:
        raise ConfigurationError(f"groups must be a non-empty tuple of KVGroup, got {groups!r}")
    for index, group in enumerate(groups):
        _check_group(index, group)
    if not isinstance(config.enable_caching, bool):
        raise ConfigurationError(f"enable_caching must be a bool, got {config.enable_caching!r}")
    limit = config.max_model_len
    if limit is not None and (not _is_int(limit) or limit < 1):
        raise ConfigurationError(f"max_model_len must be None or an int >= 1, got {limit!r}")
    return config


# --- the request ------------------------------------------------------------------------------


def check_request_id(request_id: object) -> RequestId:
    """
    raises: InvalidArgumentError
    post: isinstance(_, str)
    """
    if not isinstance(request_id, str):
        raise InvalidArgumentError(f"a request id is a str, got {request_id!r}")
    return request_id


def _check_multimodal(item: object, num_prompt_tokens: int) -> None:
    if not isinstance(item, MultimodalInput):
        raise InvalidArgumentError(f"expected a MultimodalInput, got {item!r}")
    offset, length = item.offset, item.length
    if not _is_int(offset) or not _is_int(length) or offset < 0 or length < 1:
        raise InvalidArgumentError(
            f"a multimodal input has an int offset >= 0 and length >= 1, got {item!r}"
        )
    if offset + length > num_prompt_tokens:
        raise InvalidArgumentError(
            f"multimodal input [{offset}, {offset + length}) does not lie within the prompt's"
            f" {num_prompt_tokens} tokens"
        )
    identifier = item.identifier
    if not isinstance(identifier, str) or any(0xD800 <= ord(c) <= 0xDFFF for c in identifier):
        raise InvalidArgumentError(f"a multimodal identifier is a UTF-8 str, got {identifier!r}")


def check_request(config: RequestConfig, request: object, *, unchanged_tokens: int = 0) -> Request:
    """A request as the scheduler owns it: a str id, at least one token and no more than
    ``max_model_len``, a prompt of 1 to all of them, ``0 <= num_computed_tokens <= num_tokens``,
    a valid extra key, multimodal inputs inside the prompt.

    ``unchanged_tokens``: how many leading tokens the caller checked before and knows to be
    unchanged since (an implementation that keeps a request's tokens between calls); only the
    tokens after them are checked again, so a decode step does not re-check a long request.

    raises: InvalidArgumentError, RequestStateError
    post: 0 <= _.num_computed_tokens <= _.num_tokens
    """
    if not isinstance(request, Request):
        raise InvalidArgumentError(f"expected a Request, got {request!r}")
    # Called on every decode step: the common case (plain ints, the default keys) passes in
    # straight-line code; anything else goes through the shared checks, which raise.
    request_id, tokens = request.request_id, request.tokens
    if type(request_id) is not str:
        check_request_id(request_id)
    if type(tokens) is not tuple and not _is_list_like(tokens):
        raise InvalidArgumentError(
            f"a request's tokens are a tuple or list of token ids, got {tokens!r}"
        )
    unseen = tokens[unchanged_tokens:] if unchanged_tokens else tokens
    for token in unseen:
        if type(token) is not int or not 0 <= token <= MAX_TOKEN:
            check_tokens(unseen, allow_empty=True)
            break
    if not tokens:
        check_tokens(tokens)  # raises: a request has at least one token
    num_tokens = len(tokens)
    limit = config.max_model_len
    if limit is not None and num_tokens > limit:
        raise InvalidArgumentError(
            f"request {request_id!r} has {num_tokens} tokens, more than max_model_len {limit}"
        )
    prompt = request.num_prompt_tokens
    if type(prompt) is not int or not 1 <= prompt <= num_tokens:
        raise InvalidArgumentError(
            f"num_prompt_tokens must be an int in [1, {num_tokens}], got {prompt!r}"
        )
    computed = request.num_computed_tokens
    if type(computed) is not int or computed < 0:
        computed = check_count("num_computed_tokens", computed)
    if computed > num_tokens:
        raise RequestStateError(
            f"request {request_id!r} has computed {computed} tokens but holds only {num_tokens}"
        )
    if request.extra_key is not NO_EXTRA_KEY:  # the default is valid (and frozen)
        check_extra_key(request.extra_key)
    if not isinstance(request.multimodal, tuple):
        raise InvalidArgumentError(
            f"multimodal inputs are a tuple of MultimodalInput, got {request.multimodal!r}"
        )
    for item in request.multimodal:
        _check_multimodal(item, prompt)
    return request


# --- allocate_slots ---------------------------------------------------------------------------

CachedAs = Callable[[BlockId, CachedKey], bool]
"""``cached_as(block, key)``: whether ``block`` is cached under ``key`` now (the caller's own
lookup; only ids in ``1 .. num_blocks - 1`` are asked about)."""

BlockHashesOf = Callable[[Request], Sequence[BlockHash]]
"""``request_block_hashes`` of a checked request, as the caller computes it."""


@dataclass(frozen=True, slots=True)
class AllocateArgs:
    """``allocate_slots``' arguments once checked: the hit as one list per group (empty lists
    when there is none)."""

    request: Request
    num_new_tokens: int
    num_new_computed_tokens: int
    hit: tuple[tuple[BlockId, ...], ...]
    num_lookahead_tokens: int


def _check_hit_shape(config: RequestConfig, blocks: object) -> tuple[tuple[BlockId, ...], ...]:
    num_groups = len(config.groups)
    if blocks is None:
        return tuple(() for _ in range(num_groups))
    if not _is_list_like(blocks) or not isinstance(blocks, Sequence):
        raise InvalidArgumentError(
            f"new_computed_blocks is None or one list of block ids per group, got {blocks!r}"
        )
    if len(blocks) != num_groups:
        raise InvalidArgumentError(
            f"new_computed_blocks needs one list per group ({num_groups}), got {len(blocks)}"
        )
    checked: list[tuple[BlockId, ...]] = []
    for group_blocks in blocks:
        if not _is_list_like(group_blocks):
            raise InvalidArgumentError(
                f"a group's new computed blocks are a list of block ids, got {group_blocks!r}"
            )
        for block in group_blocks:
            if not _is_int(block):
                raise InvalidArgumentError(f"block id must be an int, got {block!r}")
            if not 0 <= block < config.num_blocks:
                raise ForeignBlockError(
                    f"block {block} is not in this pool (ids 0..{config.num_blocks - 1})"
                )
        checked.append(tuple(group_blocks))
    return tuple(checked)


def _null_allowed(group: KVGroup, index: int, num_blocks: int, block_size: int) -> bool:
    """Where a hit may hold ``NULL_BLOCK``: a window group's blocks before the last
    ``cdiv(W - 1, B)`` of the hit (``specs/request_level.md`` §3)."""
    if group.sliding_window is None:
        return False
    return index < num_blocks - hit_blocks_needed(group.sliding_window, block_size)


def check_hit_blocks(
    config: RequestConfig,
    request: Request,
    hit: tuple[tuple[BlockId, ...], ...],
    cached_as: CachedAs,
    block_hashes: BlockHashesOf | None = None,
) -> None:
    """Every block of an offered hit is cached under its group's key for that block of this
    request (``NULL_BLOCK`` only where the window group needs no block). ``block_hashes``: the
    caller's own ``request_block_hashes`` (one that keeps them between calls), if it has one.

    raises: RequestStateError
    """
    if not any(hit):
        return
    if block_hashes is None:
        hashes: Sequence[BlockHash] = request_block_hashes(request, config.block_size)
    else:
        hashes = block_hashes(request)
    for group_index, (group, blocks) in enumerate(zip(config.groups, hit, strict=True)):
        for index, block in enumerate(blocks):
            if block == NULL_BLOCK:
                if _null_allowed(group, index, len(blocks), config.block_size):
                    continue
                raise RequestStateError(
                    f"group {group_index}'s hit has the null block at index {index}, where the"
                    " group needs its cached block"
                )
            if index >= len(hashes):
                raise RequestStateError(
                    f"group {group_index}'s hit block {block} at index {index} is past request"
                    f" {request.request_id!r}'s {len(hashes)} full blocks"
                )
            if not cached_as(block, CachedKey(group_index, hashes[index])):
                raise RequestStateError(
                    f"block {block} is not cached under group {group_index}'s key for block"
                    f" {index} of request {request.request_id!r}"
                )


def check_allocate_slots(
    config: RequestConfig,
    request: object,
    num_new_tokens: object,
    num_new_computed_tokens: object,
    new_computed_blocks: object,
    num_lookahead_tokens: object,
    *,
    is_known: Callable[[RequestId], bool],
    cached_as: CachedAs,
    unchanged_tokens: int = 0,
    block_hashes: BlockHashesOf | None = None,
) -> AllocateArgs:
    """``allocate_slots``' checks, in order: the request; the three counts; a call that adopts
    nothing needs new tokens; the hit's shape; a hit only for a request that holds no blocks
    (and such a request has computed nothing yet); the hit a whole number of blocks, one list
    per group of exactly that many blocks; each of its blocks cached where it claims to be.
    ``is_known(request_id)``: whether the manager holds blocks for that request;
    ``unchanged_tokens`` as for ``check_request``, ``block_hashes`` as for ``check_hit_blocks``.

    raises: InvalidArgumentError, ForeignBlockError, RequestStateError
    """
    checked = check_request(config, request, unchanged_tokens=unchanged_tokens)
    known = is_known(checked.request_id)
    new = check_count("num_new_tokens", num_new_tokens)
    adopted = check_count("num_new_computed_tokens", num_new_computed_tokens)
    lookahead = check_count("num_lookahead_tokens", num_lookahead_tokens)
    if new == 0 and adopted == 0:
        raise InvalidArgumentError(
            "num_new_tokens must be > 0 when there are no computed tokens to adopt, got 0"
        )
    hit = _check_hit_shape(config, new_computed_blocks)
    offers_hit = adopted > 0 or any(hit)
    if known and offers_hit:
        raise RequestStateError(
            f"request {checked.request_id!r} already holds blocks: it cannot take a hit of"
            f" {adopted} tokens"
        )
    if not known and checked.num_computed_tokens > 0:
        raise RequestStateError(
            f"request {checked.request_id!r} holds no blocks but says it has computed"
            f" {checked.num_computed_tokens} tokens"
        )
    if adopted % config.block_size:
        raise InvalidArgumentError(
            f"num_new_computed_tokens must be a multiple of the block size {config.block_size},"
            f" got {adopted}"
        )
    length = adopted // config.block_size
    for group_index, blocks in enumerate(hit):
        if len(blocks) != length:
            raise InvalidArgumentError(
                f"a hit of {adopted} tokens has {length} blocks per group; group {group_index}"
                f" has {len(blocks)}"
            )
    check_hit_blocks(config, checked, hit, cached_as, block_hashes)
    return AllocateArgs(checked, new, adopted, hit, lookahead)
