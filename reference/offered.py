"""Operations an engine may lack: policy ``unsupported`` names them, and the reference's adapters
then refuse them with ``UnsupportedError`` before reading any argument (``specs/policy.md``).

An adapter's policy is fixed when it is made, so the refusal is settled then: ``refuse_lacking``
puts, on the new adapter itself, a refusing stand-in over each offered operation its policy
names. The operations the policy keeps run as written, with no check in front of every call (a
check calls them hundreds of thousands of times)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.policy import Policy

Method = TypeVar("Method", bound=Callable[..., Any])

OFFERED = "_pagedkv_offered"
"""The attribute that marks an operation an engine may lack."""


def offered(method: Method) -> Method:
    """Mark ``method`` as an operation an engine may lack (``refuse_lacking`` refuses it)."""
    setattr(method, OFFERED, True)
    return method


def refuse_lacking(adapter: object, policy: Policy) -> None:
    """On ``adapter``, made under ``policy``: each offered operation the policy names
    unsupported raises ``UnsupportedError``, whatever its arguments."""
    for name in policy.unsupported:
        # marked in any class of the adapter's: a subclass's override is refused too
        if any(getattr(vars(cls).get(name), OFFERED, False) for cls in type(adapter).__mro__):
            setattr(adapter, name, _refusing(name))


def _refusing(name: str) -> Callable[..., Any]:
    def refuse(*args: object, **kwargs: object) -> Any:
        raise UnsupportedError(f"{name} is not offered under this policy")

    refuse.__name__ = name
    return refuse
