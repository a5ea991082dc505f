"""The lockstep layer: call a model and a target alike and say whether they agree.

``calls`` runs one call on both sides under the shared-error rule; ``manager_session`` and
``pool_session`` hold a model and a target through a run, in exact mode (same ids, same state) or
isomorphic mode (ids through a ``bijection``, the target's allowed choices adopted); ``capture``
records what a run did. The machines (``pagedkv.model_tests.machines``) and the oracle
(``pagedkv.model_tests.oracle``) both build on this; it imports neither. See
``specs/comparison.md``.
"""
