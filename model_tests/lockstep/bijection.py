"""A one-to-one map between the model's block ids and a target's, per device."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_tests.lockstep.calls import Divergence
from specs.types import BlockId


@dataclass
class Bijection:
    to_target: dict[BlockId, BlockId] = field(default_factory=dict)
    to_model: dict[BlockId, BlockId] = field(default_factory=dict)

    def bind(self, model: BlockId, target: BlockId) -> None:
        if self.to_target.get(model, target) != target or self.to_model.get(target, model) != model:
            raise Divergence(
                f"model block {model} would correspond to target block {target}, but they"
                f" already correspond to {self.to_target.get(model)} and"
                f" {self.to_model.get(target)}",
                "table",
            )
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
