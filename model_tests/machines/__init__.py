"""The lockstep machines: Hypothesis state machines that drive the reference and a target with
the same calls and check the invariants of ``specs/invariants.md`` after every step.

``pool_machine`` (one device's block pool) and ``manager_machine`` (the block space manager, with
the KV data of ``kv_harness``; the torch side is ``torch_kv``, only for targets with tensors).
``profiles`` holds the project's Hypothesis budgets.
"""
