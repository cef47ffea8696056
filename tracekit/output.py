"""Writes query results as a terminal table, CSV, JSON (array of row objects) or Parquet."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import shutil
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tracekit.present import term_text
from tracekit.store.traceset import Rows

if TYPE_CHECKING:  # (table and JSON are written from plain rows: polars is for csv/parquet)
    import polars as pl

FORMATS = ("table", "csv", "json", "parquet")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return term_text(value)  # a trace's control characters never reach the terminal raw


def _rows(result: Rows | pl.DataFrame) -> Rows:
    if isinstance(result, Rows):
        return result
    return Rows(result.columns, [t.is_numeric() for t in result.dtypes], result.rows())


def format_table(result: Rows | pl.DataFrame, width: int | None = None,
                 max_rows: int = 200) -> str:  # fmt: skip
    """A plain aligned table that fits `width` columns (long cells are cut with '…')."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    res = _rows(result)
    headers, numeric, height = res.columns, res.numeric, len(res.rows)
    rows = [[_cell(v) for v in row] for row in res.rows[:max_rows]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    # Shrink the widest text columns until the table fits (never below 12 characters).
    # Numbers and their headers are never cut: a cut number is a wrong number.
    sep = 2
    text_cols = [i for i in range(len(widths)) if not numeric[i]]
    while sum(widths) + sep * (len(widths) - 1) > width and text_cols:
        i = max(text_cols, key=lambda k: widths[k])
        if widths[i] <= 12:
            break
        widths[i] -= 1

    def fit(text: str, w: int, right: bool) -> str:
        if len(text) > w:
            text = text[: max(w - 1, 0)] + "…"
        return text.rjust(w) if right else text.ljust(w)

    lines = ["  ".join(fit(h, widths[i], numeric[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(fit(c, widths[i], numeric[i]) for i, c in enumerate(r)).rstrip())
    if height > max_rows:
        lines.append(f"… {height - max_rows} more rows (use --format csv for all)")
    lines.append(f"({height} row{'s' if height != 1 else ''})")
    return "\n".join(lines)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def render_result(df: Rows | pl.DataFrame, fmt: str) -> bytes:
    """`df` in `fmt` (table, csv, json: UTF-8 text; parquet), ready for a binary stream.
    csv and parquet need a polars DataFrame; table and json take Rows too."""
    if fmt == "table":
        return (format_table(df) + "\n").encode()
    if fmt == "json":
        res = _rows(df)
        dicts = [dict(zip(res.columns, row, strict=True)) for row in res.rows]
        return (json.dumps(dicts, default=_json_default) + "\n").encode()
    if isinstance(df, Rows):
        raise ValueError(f"{fmt} needs a polars DataFrame")
    if fmt == "csv":
        return df.write_csv().encode()
    if fmt == "parquet":
        buf = io.BytesIO()
        df.write_parquet(buf)
        return buf.getvalue()
    raise ValueError(fmt)
