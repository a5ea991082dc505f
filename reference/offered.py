"""Operations an engine may lack: policy ``unsupported`` names them, and the reference's adapters
then refuse them with ``UnsupportedError`` before reading any argument (``specs/policy.md``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.policy import Policy


class UnderPolicy(Protocol):
    @property
    def policy(self) -> Policy: ...


Adapter = TypeVar("Adapter", bound=UnderPolicy)
Params = ParamSpec("Params")
Result = TypeVar("Result")


def offered(
    method: Callable[Concatenate[Adapter, Params], Result],
) -> Callable[Concatenate[Adapter, Params], Result]:
    """``method``, unless the adapter's policy declares the engine does not offer it."""

    def checked(self: Adapter, *args: Params.args, **kwargs: Params.kwargs) -> Result:
        if method.__name__ in self.policy.unsupported:
            raise UnsupportedError(f"{method.__name__} is not offered under this policy")
        return method(self, *args, **kwargs)

    return cast("Callable[Concatenate[Adapter, Params], Result]", wraps(method)(checked))
