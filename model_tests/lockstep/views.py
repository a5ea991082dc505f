"""Each side's view, rendered once per state: a machine's invariants, its rules and its KV check
all read the same views between two calls, and a view of a whole manager is not cheap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Views:
    """The model's view is kept while the model keeps its state object (the reference's state
    is a frozen value that a successful call replaces, so the same object means the same view);
    the target's until the next call (``changed``)."""

    def __init__(
        self, model: Any, target: Any, model_view: Callable[[], Any] | None = None
    ) -> None:
        self._model_side = model
        self._target_side = target
        self._model: tuple[object, Any] | None = None
        self._target: Any = None
        self._model_view = model_view
        """Where the model's view is already rendered once per state (the isomorphic session's
        ``model_view``): the same view, not a second rendering of the same state."""

    def changed(self) -> None:
        """A call is about to run: the target's view is stale after it."""
        self._target = None

    def model(self) -> Any:
        if self._model_view is not None:
            return self._model_view()
        state = getattr(self._model_side, "state", None)
        if state is None:
            return self._model_side.view()
        if self._model is None or self._model[0] is not state:
            self._model = (state, self._model_side.view())
        return self._model[1]

    def target(self) -> Any:
        if self._target is None:
            self._target = self._target_side.view()
        return self._target
