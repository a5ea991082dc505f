"""The request machine's state and its one way to call the manager: the session built per run
(exact: the reference beside the target; alone: the target with the invariants only), the
scheduler's requests, the KV model, and the folded events. The rules live in the mixins beside
it (``request_machine.py`` lists them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import initialize

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.request_exact_session import (
    AloneRequestSession,
    ExactRequestSession,
    RequestSession,
)
from pagedkv.model_tests.machines.draws import integers
from pagedkv.model_tests.machines.hypothesis_internals import DATA
from pagedkv.model_tests.machines.lockstep_machine import LockstepMachine
from pagedkv.model_tests.machines.request_book import RequestBook, Scheduled
from pagedkv.model_tests.machines.request_draws import (
    BLOCK_SIZES,
    GroupKind,
    request_configs,
    swarms,
)
from pagedkv.model_tests.machines.request_kv_model import Contents, RequestKVModel, contents
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.interface import RequestKVManager, RequestKVManagerFactory
from pagedkv.specs.request_calls import RequestCall
from pagedkv.specs.request_types import RequestConfig
from pagedkv.specs.request_view import CachedKey, RequestManagerView
from pagedkv.specs.types import Token

T = TypeVar("T")

RequestMode = Literal["exact", "alone"]
"""``exact``: the target beside the reference (``make_model``), every answer, error and state
equal, and the invariants; ``alone``: the target by itself, held to the invariants only."""


class RequestMachineBase(LockstepMachine):
    """Subclass and set ``make_target`` (and ``make_model`` for exact mode) to check a
    request-level manager; ``request_lockstep_case`` builds such a class."""

    make_target: ClassVar[RequestKVManagerFactory]
    make_model: ClassVar[RequestKVManagerFactory | None] = None
    mode: ClassVar[RequestMode] = "exact"
    group_kind: ClassVar[GroupKind] = "hybrid"
    block_sizes: ClassVar[tuple[int, ...]] = BLOCK_SIZES
    """The block sizes a run draws from (a peer whose engine serves larger pages only, such as
    SGLang's paged allocator at 16, narrows it)."""
    disjoint_multimodal: ClassVar[bool] = False
    """Multimodal placeholders never share a token (what engines' input processors make; vLLM
    relies on it: ``specs/peers.md``); the spec itself allows them to overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.book = RequestBook()
        self.pending: tuple[str, tuple[Any, ...]] | None = None
        self.tallies: Counter[str] = Counter()
        self.folded: Counter[CachedKey] = Counter()
        """The cached keys the events taken so far add up to."""

    @initialize(data=DATA)
    def create_manager(self, data: st.DataObject) -> None:
        config = data.draw(request_configs(self.group_kind, self.block_sizes), label="config")
        self.config = config
        self.off = data.draw(swarms, label="left out")
        for name in sorted(self.off):
            event(f"swarm: without {name}")
        kinds = "+".join(g.kind.value for g in config.groups)
        event(f"config: {kinds}, caching={config.enable_caching}")
        self.target: RequestKVManager = type(self).make_target(config)
        self.model: RequestKVManager | None = None
        self.session = self.make_session(config)
        self.kv = RequestKVModel(config.block_size)

    def make_session(self, config: RequestConfig) -> RequestSession:
        """Exact mode: the reference beside the target; alone: the target by itself."""
        if self.mode == "alone":
            return AloneRequestSession(self.target)
        make_model = type(self).make_model
        assert make_model is not None, "exact mode needs make_model (the reference)"
        self.model = make_model(config)
        return ExactRequestSession(self.model, self.target)

    def kv_view(self) -> RequestManagerView:
        """The state the KV model and the invariants read, in the ids the KV is written in: the
        target's (in exact mode the session holds it equal to the model's)."""
        return self.target.view()

    def both(self, call: RequestCall[T]) -> T | PagedKVError:
        """One call through the session."""
        self.pending = (call.name, call.args)
        outcome = self.session.call(call)
        self.pending = None
        return outcome

    def tally(self, label: str, count: int = 1) -> None:
        """Counts what a run did, for Hypothesis to steer by (handed over at teardown)."""
        self.tallies[label] += count
        self._score(self.tallies[label], label)

    def pick(self, data: st.DataObject, items: Sequence[Scheduled], label: str) -> Scheduled:
        """One of the scheduler's requests (drawn by position: they are mutable)."""
        return items[data.draw(integers(0, len(items) - 1), label=label)]

    def succeeded(self, call: RequestCall[T]) -> T:
        """A call a scheduler makes with valid arguments: it must not raise."""
        outcome = self.both(call)
        if isinstance(outcome, PagedKVError):
            raise Divergence(f"{call!r} refused a scheduler's valid call: {outcome!r}", "error")
        return outcome

    def contents_of(self, request: Scheduled, drafts: tuple[Token, ...] = ()) -> Contents:
        """What ``request``'s tokens (then ``drafts``) put in each slot; the cells of its full
        blocks of committed tokens are remembered by hash (what a block cached under that hash
        must hold)."""
        found = contents(
            [*request.tokens, *drafts],
            request.extra_key,
            request.multimodal,
            self.config.block_size,
        )
        self.kv.remember(found, request.num_tokens // self.config.block_size)
        return found
