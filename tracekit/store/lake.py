"""Parquet export folders (`tracekit export --parquet DIR`) as query sources.

An export folder holds one subfolder per table of the store (traces, threads, events,
stages, requests, attributes, gpu_islands), each hive-partitioned by `trace_id`. DuckDB reads
it through views over `read_parquet(..., hive_partitioning=true)`, so `tracekit sql`, `query` and
`report` take the folder like a trace or a store; Spark reads the same folders (spark.py).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from tracekit.store.build import ADDED_TABLES, TABLES, older_schema_problem


def is_export_dir(path: Path) -> bool:
    """A folder with a subfolder for every table of the store (what export_parquet writes;
    an older tracekit's lacks the tables added since: traceset refuses it in one line)."""
    return path.is_dir() and all((path / t).is_dir() for t in TABLES if t not in ADDED_TABLES)


def export_table_path(root: str | Path, table: str) -> str:
    """The folder of one table inside an export (a local path or a URI)."""
    return f"{str(root).rstrip('/')}/{table}"


def duckdb_table_sql(root: Path, table: str) -> str:
    """A SELECT over one exported table: trace_id first and INTEGER, as in the store (hive
    partitioning appends it last and infers BIGINT)."""
    pattern = str(root.resolve() / table / "**" / "*.parquet").replace("'", "''")
    return (
        "SELECT CAST(trace_id AS INTEGER) AS trace_id, * EXCLUDE (trace_id) "
        f"FROM read_parquet('{pattern}', hive_partitioning = true)"
    )


def export_tables(root: Path) -> dict[str, str]:
    """A SELECT per table the export holds (an older export lacks the tables added since)."""
    return {t: duckdb_table_sql(root, t) for t in TABLES if (root / t).is_dir()}


def older_export_problem(con: duckdb.DuckDBPyConnection, root: Path) -> str | None:
    """older_schema_problem for an export folder: what an older tracekit wrote lacks."""
    return older_schema_problem(con, {t: f"({sql})" for t, sql in export_tables(root).items()})
