"""Writes query results as a terminal table, CSV, JSON (array of row objects) or Parquet."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import shutil
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

from tracekit.traceset import Rows

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
    return str(value)


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
    # Shrink the widest columns until the table fits (never below 8 characters).
    sep = 2
    while sum(widths) + sep * (len(widths) - 1) > width and max(widths, default=0) > 8:
        i = widths.index(max(widths))
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


def write_result(df: Rows | pl.DataFrame, fmt: str, out: IO[str] | IO[bytes]) -> None:
    """Write `df` in `fmt`; parquet needs a binary stream; csv and parquet need a polars
    DataFrame, table and json take Rows too."""
    if fmt == "table":
        out.write(format_table(df) + "\n")  # type: ignore[arg-type]
    elif fmt == "json":
        res = _rows(df)
        dicts = [dict(zip(res.columns, row, strict=True)) for row in res.rows]
        out.write(json.dumps(dicts, default=_json_default, indent=None) + "\n")  # type: ignore[arg-type]
    elif isinstance(df, Rows):
        raise ValueError(f"{fmt} needs a polars DataFrame")
    elif fmt == "csv":
        out.write(df.write_csv())  # type: ignore[arg-type]
    elif fmt == "parquet":
        buf = io.BytesIO()
        df.write_parquet(buf)
        out.write(buf.getvalue())  # type: ignore[arg-type]
    else:
        raise ValueError(fmt)
