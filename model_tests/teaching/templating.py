"""The Jinja2 environment the pages are rendered in: templates beside this module (``templates/``,
shipped in the wheel), every value escaped unless marked safe, an undefined name an error.

The templates of a step's parts are written indented, one tag a line, for the reader; their line
breaks and indentation are layout of the source only and are dropped when they are loaded
(``Compact``), so that the page holds exactly the elements and text it always held (a space
between two inline elements would show). Text that needs a space writes it inside a tag's text.
"""

from __future__ import annotations

import re
from typing import Any

import jinja2
from jinja2.ext import Extension

COMPACT = frozenset({"step.html", "request_picture.html", "defrag_picture.html", "cells.html"})
"""Templates whose line breaks and indentation are the source's layout only."""


class Compact(Extension):
    """Drops each line break and the indentation after it from the templates of ``COMPACT``."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return re.sub(r"\n\s*", "", source) if name in COMPACT else source


def environment(**names: Any) -> jinja2.Environment:
    """An environment over ``templates/`` in which the templates may call ``names``."""
    made = jinja2.Environment(
        loader=jinja2.PackageLoader("pagedkv.model_tests.teaching", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        extensions=[Compact],
        keep_trailing_newline=True,
    )
    made.globals.update(names)
    return made
