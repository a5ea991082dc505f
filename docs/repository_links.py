"""A mkdocs hook: the README names its image by the repository's raw URL, so that the package
page (PyPI renders the README without the repository's files) shows it; on the site the same
link becomes a relative one, so the site works offline, shows the checkout's image, and strict
mode fails when the file is gone."""

from __future__ import annotations

import posixpath

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

RAW_ROOT = "https://raw.githubusercontent.com/pagedkv/pagedkv/main/"
"""The repository's files as the README links them (pyproject.toml's Source URL, raw)."""


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    to_root = posixpath.relpath(".", posixpath.dirname(page.file.src_uri) or ".")
    return markdown.replace(f"]({RAW_ROOT}", f"]({to_root}/")
