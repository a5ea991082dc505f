"""The KV store and the torch kernels that move its blocks: the part of pagedkv that needs torch.

    from pagedkv.kv import KVStore, copy_blocks, swap_blocks, swap_blocks_in_place

``copy_blocks`` runs ``append_slots``' copy-on-write pairs, ``swap_blocks`` a swap's mapping
between devices, ``swap_blocks_in_place`` a defragmenter's exchanges
(``pagedkv.OptimizedDefragmenter``, which needs no torch, says which blocks to exchange).
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("torch") is None:
    raise ModuleNotFoundError(
        "pagedkv.kv needs torch, which is not installed: pip install 'pagedkv[kv]'", name="torch"
    )

from pagedkv.optimized.kernels import copy_blocks, swap_blocks, swap_blocks_in_place
from pagedkv.optimized.kv_store import KVStore

__all__ = ["KVStore", "copy_blocks", "swap_blocks", "swap_blocks_in_place"]
