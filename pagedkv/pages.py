"""The trace viewer's pages as the ``pagedkv`` command writes them: beside a divergence's trace
(``check``), for ``show`` and for ``demo -o``.

Its own module, with the teaching tools and jinja2 behind it, so that a check that passes never
loads them: ``pagedkv.cli`` imports it only once there is a page to write (start-up,
``specs/oracle.md`` §6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.trace import Trace
from pagedkv.model_tests.teaching import page
from pagedkv.model_tests.teaching.frames import Walk
from pagedkv.model_tests.teaching.walkthrough import walk_trace


def divergence_page(
    loaded: Trace, trace_path: Path, factory: Any, target: str, shown: Path | None = None
) -> tuple[str, Path | None]:
    """The trace viewer's page for a divergence, next to its trace; the note that says where
    (beside ``shown``, the trace as the report names it), and that name of the page if it was
    written."""
    path = page_beside(trace_path)
    try:
        html = page.render(walk_trace(loaded, str(trace_path), factory, target))
        trace.write_text(path, html)
    except OSError as error:
        return f"page: not written ({error.strerror or error})", None
    except Exception as error:  # the verdict above stands whatever happens to its page
        return f"page: not written ({type(error).__name__}: {error})", None
    sides = "the target" if loaded.safety else "both sides"
    named = page_beside(shown or trace_path)
    return f"page: {named} ({sides}, step by step, in a browser)", named


def page_beside(trace_path: Path) -> Path:
    """``x.jsonl`` -> ``x.html``; never the trace itself."""
    path = trace_path.with_suffix(".html")
    return trace_path.with_name(trace_path.name + ".html") if path == trace_path else path


def trace_walk(loaded: Trace, path: str, factory: Any, target: str | None) -> Walk:
    """A trace as the viewer's steps (``show``), replayed against ``factory`` too if given."""
    return walk_trace(loaded, path, factory, target)


def write_page(walk: Walk, path: str | Path) -> Path:
    """``walk`` as one self-contained page at ``path``; an ``OSError`` if it cannot be written."""
    return trace.write_text(path, page.render(walk))
