"""``make docs``: writes the parts of ``specs/policy.md`` that ``pagedkv.specs.policy`` generates
(the table of options, each option's values) between the page's markers, so that the page never
restates by hand what the code says. ``test_policy`` fails while the page is not current.

    python -m pagedkv.model_tests.formal.policy_page [specs/policy.md]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pagedkv.specs.policy import markdown_table, markdown_values

PAGE = Path(__file__).resolve().parents[2] / "specs" / "policy.md"
TABLE = ("<!-- the options: written by make docs -->", "<!-- end of the options -->")
VALUES = ("<!-- the values: written by make docs -->", "<!-- end of the values -->")


def _between(text: str, markers: tuple[str, str], body: str) -> str:
    """``text`` with what lies between the two markers (each on a line of its own) replaced."""
    begin, end = markers
    head, found, rest = text.partition(begin + "\n")
    _, found_end, tail = rest.partition("\n" + end)
    if not (found and found_end):
        raise ValueError(f"the page lacks the markers {begin!r} ... {end!r}")
    return head + begin + "\n" + body + "\n" + end + tail


def current(page: str) -> str:
    """The page with its generated parts as the code generates them now."""
    return _between(_between(page, TABLE, markdown_table()), VALUES, markdown_values())


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    path = Path(args[0]) if args else PAGE
    text = path.read_text(encoding="utf-8")
    written = current(text)
    if written != text:
        path.write_text(written, encoding="utf-8")
    print(f"{path}: {'rewritten' if written != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
