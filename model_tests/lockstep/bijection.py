"""A one-to-one map between the model's block ids and a target's, per device."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.specs.types import BlockId


class Conflict(Divergence):
    """Two blocks cannot stand for each other: one of them already stands for another block.
    A caller that knows where the blocks sit words it for a reader (``pool_session.py``)."""

    def __init__(
        self, model: BlockId, target: BlockId, target_has: BlockId | None, model_has: BlockId | None
    ) -> None:
        already = []
        if target_has not in (None, target):
            already.append(
                f"the model's block {model} already stands for the target's {target_has}"
            )
        if model_has not in (None, model):
            already.append(
                f"the target's block {target} already stands for the model's {model_has}"
            )
        super().__init__(
            f"the target put its block {target} where the model has its block {model}, but "
            + " and ".join(already),
            "table",
        )
        self.target_has = target_has
        """What the model's block already stands for in the target (None: nothing yet)."""
        self.model_has = model_has
        """What the target's block already stands for in the model (None: nothing yet)."""


@dataclass
class Bijection:
    to_target: dict[BlockId, BlockId] = field(default_factory=dict)
    to_model: dict[BlockId, BlockId] = field(default_factory=dict)

    def bind(self, model: BlockId, target: BlockId) -> None:
        target_has, model_has = self.to_target.get(model), self.to_model.get(target)
        if target_has not in (None, target) or model_has not in (None, model):
            raise Conflict(model, target, target_has, model_has)
        self.to_target[model] = target
        self.to_model[target] = model

    def rebind(self, model: BlockId, target: BlockId) -> None:
        """For a block both sides just took from their free lists: whatever either stood for
        before no longer matters."""
        self.unbind_model(model)
        stale = self.to_model.pop(target, None)
        if stale is not None:
            self.to_target.pop(stale, None)
        self.bind(model, target)

    def unbind_model(self, model: BlockId) -> None:
        target = self.to_target.pop(model, None)
        if target is not None:
            self.to_model.pop(target, None)

    def target_of(self, model: BlockId) -> BlockId:
        if model not in self.to_target:
            raise Divergence(f"model block {model} has no counterpart in the target", "table")
        return self.to_target[model]
