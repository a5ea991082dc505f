"""The request-level machine (``model_tests/machines/request_machine.py``: a v1-style scheduler)
as the oracle runs it: a run draws its group layout among those the check covers (full
attention, sliding window, a hybrid of both: all three unless ``--groups`` narrows them), and
its session is the oracle's, isomorphic against the reference under the profile's policy
(``lockstep/request_isomorphic_session.py``) or the safety tier alone
(``lockstep/request_safety_session.py``).

In isomorphic mode the machine's KV model and invariants read the reference's state (the ids
every call's answer comes back in); under the safety tier nothing but the protocol is read, so
they read a view made of what the protocol shows: the tables of the requests the target holds,
ref counts as the tables count them, every other block free and none known to be cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from pagedkv.model_tests.lockstep import capture
from pagedkv.model_tests.lockstep.request_exact_session import RequestSession
from pagedkv.model_tests.lockstep.request_isomorphic_session import IsomorphicRequestSession
from pagedkv.model_tests.lockstep.request_reading import RequestReading
from pagedkv.model_tests.lockstep.request_safety_session import RequestSafetySession
from pagedkv.model_tests.machines.draws import sampled
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.request_draws import GroupKind
from pagedkv.model_tests.machines.request_machine import RequestLockstep
from pagedkv.model_tests.machines.request_misuse import MISUSES
from pagedkv.model_tests.oracle.request_layouts import LAYOUTS
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls as calls
from pagedkv.specs.errors import UnsupportedError
from pagedkv.specs.policy import PAGEDKV, Policy
from pagedkv.specs.request_types import NULL_BLOCK, RequestConfig
from pagedkv.specs.request_view import RequestBlockView, RequestManagerView, RequestTableView

Tier = Literal["isomorphic", "safety"]


def protocol_view(config: RequestConfig, reading: RequestReading) -> RequestManagerView:
    """What the protocol shows of a target, as a view: its tables, each block's ref count as
    the tables count it, every other block free (in id order) and none known to be cached."""
    counts: dict[int, int] = {}
    for groups in reading.tables.values():
        for blocks in groups:
            for block in blocks:
                if block != NULL_BLOCK:
                    counts[block] = counts.get(block, 0) + 1
    pool = range(1, config.num_blocks)
    return RequestManagerView(
        config=config,
        blocks={block: RequestBlockView(counts.get(block, 0), None) for block in pool},
        free_queue=tuple(block for block in pool if block not in counts),
        requests={
            request_id: RequestTableView(
                tuple(tuple(blocks) for blocks in groups), tuple(0 for _ in groups)
            )
            for request_id, groups in reading.tables.items()
        },
    )


class OracleRequestLockstep(RequestLockstep):
    """The scheduler machine with the oracle's sessions; ``request_case`` builds the class."""

    tier: ClassVar[Tier] = "isomorphic"
    layouts: ClassVar[tuple[GroupKind, ...]] = LAYOUTS
    contract: ClassVar[str] = "any"
    """``scheduler``: no calls meant to fail (``specs/oracle.md`` §1)."""

    @precondition(lambda self: type(self).tier != "safety" and type(self).contract == "any")
    @rule(kind=sampled(MISUSES), data=DATA)
    def misuse(self, kind: str, data: st.DataObject) -> None:
        """Calls that must fail, with the spec's error: not under the safety tier (a target
        may refuse them with any typed error) nor the scheduler contract (no scheduler makes
        them)."""
        super().misuse(kind, data)

    @initialize(data=DATA)
    def create_manager(self, data: st.DataObject) -> None:
        layout = data.draw(st.sampled_from(type(self).layouts), label="group layout")
        self.__dict__["group_kind"] = layout  # this run's, shadowing the class's one layout
        super().create_manager(data)

    def make_session(self, config: RequestConfig) -> RequestSession:
        if type(self).tier == "safety":
            self.safety = RequestSafetySession(self.target, config)
            return self.safety
        self.model = ReferenceRequestKVManager(config, type(self).policy)
        return IsomorphicRequestSession(self.model, self.target)

    def kv_view(self) -> RequestManagerView:
        if type(self).tier == "safety":
            return protocol_view(self.config, self.safety.seen)
        assert self.model is not None
        return self.model.view()

    def take_events(self) -> None:
        """Under the safety tier the session folds the events itself (nothing says which keys
        a target caches); against the reference, the machine's own check as well."""
        if type(self).tier == "safety":
            self.succeeded(calls.take_events())
            return
        super().take_events()

    def teardown(self) -> None:
        super().teardown()
        capture.finish(self, "request", safety=type(self).tier == "safety")


def _declining(factory: Any, case: type[OracleRequestLockstep]) -> Any:
    """``factory``, where a configuration it declines (``UnsupportedError``) makes the run draw
    another, and the case's ``on_declined`` hook hears of it."""

    def make(config: RequestConfig) -> Any:
        try:
            return factory(config)
        except UnsupportedError as error:
            hook = case.on_declined
            if hook is not None:
                hook(config, str(error))
            reject()

    return make


def request_case(
    factory: Any,
    *,
    tier: Tier = "isomorphic",
    policy: Policy = PAGEDKV,
    layouts: Sequence[GroupKind] = LAYOUTS,
    contract: str = "any",
) -> type[OracleRequestLockstep]:
    """A machine class checking ``factory``'s request-level managers over ``layouts``: against
    the reference under ``policy``, or alone against the safety tier, making the calls
    ``contract`` allows."""
    case: type[OracleRequestLockstep] = type(
        f"RequestOracle_{getattr(factory, '__name__', 'target')}",
        (OracleRequestLockstep,),
        {"tier": tier, "policy": policy, "layouts": tuple(layouts), "contract": contract},
    )
    case.make_target = staticmethod(_declining(factory, case))
    return case
