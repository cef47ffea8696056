"""The one table model of every rendered page, report and diff alike: a `Table` of `Column`s
and rows of `Cell`s, built once per section; HTML (templates), Markdown (present.md_table) and
the terminal draw the same object. Formatting a value into a cell is the section's job; a
table only holds what is shown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.report.charts import Chart


@dataclass(frozen=True)
class Cell:
    text: str = field(metadata={"help": "the value as shown"})
    sort: str = field(
        default="", metadata={"help": "the raw value as text: the sort key (numbers as numbers)"}
    )
    title: str = field(default="", metadata={"help": "hover text (the full name when shortened)"})
    name: bool = field(
        default=False, metadata={"help": "a trace string (kernel, op, shape): set in monospace"}
    )


@dataclass(frozen=True)
class Column:
    key: str = field(metadata={"help": "the row field (query column) it shows"})
    label: str = field(metadata={"help": "header text"})
    numeric: bool = field(metadata={"help": "right-aligned, sorted as numbers"})


@dataclass(frozen=True)
class Table:
    """One table of a page: its rows formatted once, drawn by every format."""

    id: str = field(metadata={"help": "HTML id, unique in the page"})
    title: str = field(metadata={"help": "section heading"})
    columns: tuple[Column, ...] = field(metadata={"help": "shown columns"})
    rows: tuple[tuple[Cell, ...], ...] = field(metadata={"help": "formatted cells"})
    note: str = field(default="", metadata={"help": "a line under the table"})
    query: str = field(
        default="", metadata={"help": "queries/<name>.sql that produced the rows ('' if none)"}
    )
    params: str = field(default="", metadata={"help": "parameters the query ran with"})
    sql: str = field(default="", metadata={"help": "the query text"})
    charts: tuple[Chart, ...] = field(default=(), metadata={"help": "drawn after it"})
    pinned: int = field(
        default=0, metadata={"help": "last rows kept below the others when sorting (totals)"}
    )
    shown: int = field(
        default=0,
        metadata={"help": "rows drawn at first; the rest wait behind 'show all' (0: all)"},
    )


def columns(spec: Sequence[tuple[str, str, bool]]) -> tuple[Column, ...]:
    """Columns from (key, label, numeric) triples."""
    return tuple(Column(k, label, numeric) for k, label, numeric in spec)
