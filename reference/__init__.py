"""The pure reference: every operation maps (state, arguments) to (new state, result) or raises.

It defines pagedkv's semantics and reads like a textbook: small functions over frozen values, no
caching, no cleverness. It imports nothing from ``optimized/`` and no torch.
"""
