"""Export a store's normalized tables as Parquet, one folder per table, partitioned by trace.

    DIR/traces/trace_id=1/data_0.parquet
    DIR/events/trace_id=1/data_0.parquet ...

Readers treat `trace_id` as a hive partition column (DuckDB `read_parquet(...,
hive_partitioning=true)`, Spark `spark.read.parquet(DIR + "/events")`), so the queries of
queries/ run unchanged on a cluster engine (docs/export.md). The folder is written under a
temporary name beside DIR and renamed into place: readers never see half an export.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tracekit.atomic import check_output, make_temp_dir, output_error, temp_name
from tracekit.errors import StoreError
from tracekit.store.build import TABLES
from tracekit.store.db_errors import first_line
from tracekit.store.stages import StageRule


@dataclass(frozen=True)
class ExportResult:
    """What `export_parquet` wrote: the folder and the rows per table."""

    out: Path
    rows: dict[str, int]


def export_parquet(
    sources: Sequence[str | Path],
    out: Path,
    stage_rules: Sequence[StageRule] | None = None,
    force: bool = False,
) -> ExportResult:
    """Write the tables of the traces/stores `sources` as Parquet under `out`."""
    from tracekit.store.traceset import (  # lazy: duckdb at first use (start-up)
        input_files,
        open_traces,
    )

    out = Path(out)
    check_output(out, input_files(sources), force, folder=True)
    tmp = make_temp_dir(out)
    rows: dict[str, int] = {}
    try:
        with open_traces(list(sources), stage_rules=stage_rules) as ts:
            for table in TABLES:
                rows[table] = _copy_table(ts.con, table, tmp / table)
        if out.exists():
            old = temp_name(out)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise output_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out=out, rows=rows)


def _copy_table(con: duckdb.DuckDBPyConnection, table: str, folder: Path) -> int:
    n = int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
    if n == 0:
        # COPY ... PARTITION_BY writes nothing for no rows: keep the schema readable anyway,
        # under a partition folder so hive-partitioned readers still see a trace_id column.
        (folder / "trace_id=0").mkdir(parents=True)
        target = str(folder / "trace_id=0" / "empty.parquet").replace("'", "''")
        sql = f"COPY (SELECT * EXCLUDE (trace_id) FROM {table}) TO '{target}' (FORMAT parquet)"
    else:
        target = str(folder).replace("'", "''")
        sql = (f"COPY (SELECT * FROM {table}) TO '{target}' "
               "(FORMAT parquet, PARTITION_BY (trace_id), COMPRESSION zstd)")  # fmt: skip
    try:
        con.execute(sql)
    except duckdb.Error as e:
        raise StoreError(f"could not export {table} to {folder} ({first_line(e)})") from None
    return n
