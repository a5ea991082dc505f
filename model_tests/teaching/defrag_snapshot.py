"""A defragmenter's state as a learner sees it (``specs/defragmenter.md`` §5's picture): per
physical id the logical block it holds (``backward``), whose KV sits there where the caller
knows it, and the references the tables hold; then each table in logical ids and as the model
reads it (resolved). ``pagedkv demo --level defrag`` and ``pagedkv show`` draw it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.types import TableKey


@dataclass(frozen=True)
class DefragPicture:
    reserved: frozenset[int]
    backward: tuple[int, ...]
    """Physical id -> the logical block there."""
    refs: tuple[int, ...]
    """Physical id -> references the told tables hold on it."""
    kv: tuple[str, ...] | None
    """Physical id -> whose KV sits there (``.`` nothing wanted), where the caller knows."""
    tables: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    """(key, the table in logical ids, the same resolved): what the manager says and what the
    model reads."""

    def rows(self) -> list[tuple[str, list[str]]]:
        """The picture's rows, a label and one cell per physical id."""
        ids = range(len(self.backward))
        rows = [
            ("physical", [str(p) for p in ids]),
            ("logical", [str(b) for b in self.backward]),
        ]
        if self.kv is not None:
            rows.append(("KV", list(self.kv)))
        rows.append(("refs", [str(n) if n else "." for n in self.refs]))
        return rows

    def lines(self) -> list[str]:
        """The picture as text, one column per physical id."""
        rows = self.rows()
        width = max(len(cell) for _, cells in rows for cell in cells)
        out = [f"{label:<9}" + " ".join(f"{c:>{width}}" for c in cells) for label, cells in rows]
        if self.reserved:
            out.append(f"reserved (never move): {', '.join(map(str, sorted(self.reserved)))}")
        for key, logical, physical in self.tables:
            out.append(f"table {key}: {list(logical)}, the model reads {list(physical)}")
        return out


def _by_key(item: tuple[TableKey, object]) -> tuple[bool, TableKey]:
    """Tables drawn in the order of their keys (integers first): the reference holds them in a
    hash map, whose order varies with Python's string hashing from one process to the next."""
    return (isinstance(item[0], str), item[0])


def defrag_picture(view: DefragmenterView, kv: Mapping[int, str] | None = None) -> DefragPicture:
    """``view`` drawn; ``kv`` labels the physical ids whose KV the caller knows."""
    ids = range(view.config.num_blocks)
    return DefragPicture(
        reserved=frozenset(view.config.reserved),
        backward=tuple(view.backward),
        refs=tuple(view.ref_counts.get(p, 0) for p in ids),
        kv=None if kv is None else tuple(kv.get(p, ".") for p in ids),
        tables=tuple(
            (str(key), tuple(table), tuple(view.forward[b] for b in table))
            for key, table in sorted(view.tables.items(), key=_by_key)
        ),
    )
