"""The oracle's defrag level (``specs/defragmenter.md``, "The oracle's defrag level"): the
reference defragmenter as a public name, the level's calls on the wire, its machine against the
reference, the optimized and the written-apart defragmenter, and the wrong variants it must
catch."""

from __future__ import annotations

import pagedkv
from pagedkv.reference.defrag_adapter import ReferenceDefragmenter
from pagedkv.specs import interface


def test_the_reference_defragmenter_is_public() -> None:
    """``pagedkv.ReferenceDefragmenter`` is the reference's mutable face, and it does what the
    picture of ``specs/defragmenter.md`` §5 says."""
    assert pagedkv.ReferenceDefragmenter is ReferenceDefragmenter
    defrag = pagedkv.ReferenceDefragmenter(pagedkv.DefragConfig(12, threshold=2))
    defrag.update_state({"A": [1, 2], "B": [9, 10, 11]}, finished=[])
    assert defrag.defragment() == [(11, 3), (10, 4), (9, 5)]
    assert defrag.resolve_all([[1, 2], [9, 10, 11]]) == [[1, 2], [5, 4, 3]]
    assert defrag.resolve(3) == 11
    assert pagedkv.Defragmenter is interface.Defragmenter
