"""The reference defragmenter behind the mutable ``pagedkv.specs.interface.Defragmenter`` face."""

from __future__ import annotations

from pagedkv.reference import defragmenter as ops
from pagedkv.reference.defragmenter import DefragState, Pair
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.types import BlockId, DefragConfig


class ReferenceDefragmenter:
    """The pure defragmenter as a mutable object: what ``pagedkv check --level defrag`` holds an
    engine's own defragmenter to, and the one to read beside ``specs/defragmenter.md``."""

    def __init__(self, config: DefragConfig) -> None:
        self.state: DefragState = ops.create(config)

    @property
    def config(self) -> DefragConfig:
        return self.state.config

    def update_state(self, changed: object, finished: object) -> None:
        self.state = ops.update_state(self.state, changed, finished)

    def defragment(self) -> list[Pair]:
        self.state, pairs = ops.defragment(self.state)
        return pairs

    def resolve(self, block: object) -> BlockId:
        return ops.resolve(self.state, block)

    def resolve_all(self, tables: object) -> list[list[BlockId]]:
        return ops.resolve_all(self.state, tables)

    def unresolve(self, physical: object) -> BlockId:
        return ops.unresolve(self.state, physical)

    def view(self) -> DefragmenterView:
        return ops.to_view(self.state)
