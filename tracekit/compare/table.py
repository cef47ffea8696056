"""The diff page's table model: sections of cells, formatted by tracekit.compare.render and
drawn by tracekit.compare.page (HTML), render (md, table, JSON)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    """One table cell: `text` shown, `sort` key (numbers sort numerically), `title` on hover
    (the full name where `text` is shortened)."""

    text: str
    sort: str = ""
    title: str = ""
    name: bool = False  # an untrusted trace string (escaped per format)


@dataclass(frozen=True)
class Section:
    """A table: its title, a note under it, column labels (numeric ones right-aligned)."""

    id: str
    title: str
    columns: tuple[tuple[str, bool], ...]
    rows: tuple[tuple[Cell, ...], ...]
    note: str = ""
