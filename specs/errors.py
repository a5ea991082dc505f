"""The typed errors every implementation raises (``specs/semantics.md`` 14, "Errors").

Each names the offending value in its message, and an operation that raises one leaves the state
exactly as it was.
"""

from __future__ import annotations


class PagedKVError(Exception):
    """Base of every error pagedkv raises on purpose."""


class ConfigurationError(PagedKVError):
    """A pool or manager configuration that cannot work (zero blocks, a bad watermark, ...)."""


class InvalidArgumentError(PagedKVError):
    """An argument of the wrong type or range: a negative token, an empty append, a NaN time."""


class OutOfBlocksError(PagedKVError):
    """No free block and no evictable block is left to allocate."""


class DoubleFreeError(PagedKVError):
    """Freeing a block whose ref count is already zero."""


class ForeignBlockError(PagedKVError):
    """A block id that does not belong to this pool (another device's, or out of range)."""


class UnallocatedBlockError(PagedKVError):
    """Using a block that is on the free list (not held and not cached) as if it were live."""


class TooManyTokensError(PagedKVError):
    """Appending more tokens than a block has empty slots, or an immutable block of wrong size."""


class UnknownSequenceError(PagedKVError):
    """A sequence id the manager does not know."""


class DuplicateSequenceError(PagedKVError):
    """A sequence id that is already in use."""


class SequenceStateError(PagedKVError):
    """An operation on a sequence or group in the wrong state (swapping in a group on the GPU)."""


class UnsupportedError(PagedKVError):
    """A feature combination the spec refuses (prefix caching for an encoder-decoder table)."""


class UnknownRequestError(PagedKVError):
    """A request id the request-level manager holds no blocks for, where one must be known."""


class RequestStateError(PagedKVError):
    """A request whose counts contradict the call or the manager (more computed tokens than
    tokens, a hit offered to a request that already holds blocks, ...)."""
