"""A small, independently written block space manager, used to test the oracle.

``manager.IndependentManager`` implements the ``pagedkv.specs.interface.BlockSpaceManager`` protocol
(except ``view()``: foreign engines expose no view) from the prose spec alone, in a deliberately
different style from ``reference/``: mutable per-block records, a LIFO free list that hands out
the highest ids first, a dict evictor that breaks ties by the highest id, and the null block
(with a sliding window) taken from that free list. Its block ids therefore differ from the
reference's while its behaviour is the same up to the spec's allowed choices, which is what the
oracle's isomorphic mode must accept. ``broken`` holds subclasses with one deliberate bug each,
which the oracle must reject.

``request_manager.IndependentRequestManager`` does the same at the request level (vLLM v1's
``KVCacheManager``, the ``RequestKVManager`` protocol), written from the request level's sheet
without reading the reference's request modules; ``request_broken`` holds its broken variants.

``defragmenter.IndependentDefragmenter`` is a defragmenter (``specs/defragmenter.md``, the
``Defragmenter`` protocol) written from that page alone, over dicts of moved ids and sorted lists
built per run; ``defragmenter_broken`` holds its broken variants, for ``--level defrag``.
"""
