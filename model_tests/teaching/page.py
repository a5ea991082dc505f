"""One self-contained HTML page that steps through a walk: no network, no server.

Every step is a ``<section class="step" data-step="N">`` holding the call, its outcome, the
reference's state after it and, with a target, the target's side; a marked step (a divergence, a
stale expectation) also has the class ``diverges`` and the rule it broke. The page is rendered
from Jinja2 templates with every value escaped (``templates/page.html``, ``step.html``,
``request_picture.html``, ``defrag_picture.html``); the style and the script (``page.css``,
``page.js``, beside this file) are inlined. Without JavaScript every step is shown one after
the other; with it, one at a time, with buttons and the arrow keys.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pagedkv.model_tests.oracle.trace import write_text
from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture
from pagedkv.model_tests.teaching.frames import Walk
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture
from pagedkv.model_tests.teaching.snapshot import BlockCell, DevicePicture, Picture
from pagedkv.model_tests.teaching.templating import environment
from pagedkv.model_tests.teaching.terminal import copies_text, heading, tokens_text
from pagedkv.specs.request_types import NULL_BLOCK
from pagedkv.specs.types import BlockId

MAX_BLOCKS_DRAWN = 256
"""Larger pools draw only their non-blank blocks (and the count of the rest)."""


def _asset(name: str) -> str:
    return (
        resources.files("pagedkv.model_tests.teaching").joinpath(name).read_text(encoding="utf-8")
    )


def _cell_key(cell: BlockCell) -> tuple[object, ...]:
    """What makes a block drawn differently: a change of any of it outlines the block."""
    return (cell.state, cell.ref_count, cell.tokens, cell.content_hash, cell.computed)


def _before_cells(device: DevicePicture) -> dict[BlockId, tuple[object, ...]]:
    return {cell.block: _cell_key(cell) for cell in device.cells}


def _cells_by_block(picture: DevicePicture | RequestPicture) -> dict[BlockId, object]:
    return {cell.block: cell for cell in picture.cells}


PAGES = environment(
    max_blocks_drawn=MAX_BLOCKS_DRAWN,
    null_block=NULL_BLOCK,
    tokens_text=tokens_text,
    copies_text=copies_text,
    heading=heading,
    cell_key=_cell_key,
    before_cells=_before_cells,
    cells_by_block=_cells_by_block,
    devices_by_name=lambda picture: {device.name: device for device in picture.devices},
    indent=lambda depth: f"{1.4 * depth:g}",
    is_request_picture=lambda picture: isinstance(picture, RequestPicture),
    is_device_picture=lambda picture: isinstance(picture, Picture),
    is_defrag_picture=lambda picture: isinstance(picture, DefragPicture),
)
"""What the templates call: the terminal's own wording of tokens, copies and a step's heading,
and the few lookups a step's drawing needs."""


def render(walk: Walk) -> str:
    return PAGES.get_template("page.html").render(
        walk=walk, css=_asset("page.css"), js=_asset("page.js")
    )


def write(walk: Walk, path: str | Path) -> Path:
    return write_text(path, render(walk))
