"""Run the query catalogue on Spark over Parquet export folders (`tracekit export --parquet`).

    from tracekit.spark import open_spark
    with open_spark(["pq"]) as t:               # local[*] unless a session is given
        t.query("stage_summary", trace_id=1)     # polars DataFrame, same rows as DuckDB's

Optional: needs `pip install 'tracekit-profiler[spark]'` (pyspark, sqlglot) and a Java 17 runtime.
Nothing on the default (DuckDB) path imports this module. Each table of the export folder(s)
becomes a temp view of the same name; the catalogue's DuckDB SQL is transpiled by
tracekit.spark_sql (tracekit's macros expanded from tracekit/macros.sql). The GPU category
rules the macros read become the temp view `tk_category_rules`, with the rows a DuckDB
connection gets (tracekit.categories: a tracekit.toml's [[category]] tables, then the
built-in ones). Several folders are numbered 1..N in input order, as DuckDB does.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit.categories import CategoryRule, builtin_rules, user_rules
from tracekit.errors import QueryError, TracekitError
from tracekit.store.build import TABLES
from tracekit.store.lake import export_table_path, is_export_dir, older_export_problem

if TYPE_CHECKING:
    import polars as pl
    from pyspark.sql import DataFrame, SparkSession

RULES_VIEW = "tk_category_rules"  # tracekit/macros.sql's table, a temp view on Spark
MASTER_ENV = "TRACEKIT_SPARK_MASTER"  # default local[*]
PERCENTILES_ENV = "TRACEKIT_SPARK_PERCENTILES"  # 'exact' (default) or 'approx'


def spark_available() -> str | None:
    """None when Spark can run here, else why not (for errors and test skips)."""
    try:
        import pyspark  # noqa: F401
        import sqlglot  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (pip install 'tracekit-profiler[spark]')"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java runtime (install a JDK/JRE 17, e.g. Debian's openjdk-17-jre-headless)"
    return None


def local_session(
    master: str | None = None, conf: dict[str, str] | None = None, java_options: str = ""
) -> SparkSession:
    """A SparkSession for the CLI: TRACEKIT_SPARK_MASTER or local[*], quiet, UTC, small
    shuffles (the tables of one query are small next to Spark's default 200 partitions).
    `conf` adds Spark settings and `java_options` JVM flags (the driver's JVM starts here)."""
    from pyspark.sql import SparkSession

    master = master or os.environ.get(MASTER_ENV) or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to loopback" warning
    log_conf = files("tracekit").joinpath("spark-log4j2.properties")
    builder = (
        SparkSession.builder.master(master)
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log_conf} {java_options}".strip(),
        )
        .appName("tracekit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.log.structuredLogging.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("OFF")
    return session


class SparkTraceSet:
    """Export folders behind one SparkSession: `.sql(q)` and `.query(name, **params)` return
    polars DataFrames, like tracekit.TraceSet. `.sql` takes DuckDB SQL (transpiled) unless
    `dialect="spark"`."""

    def __init__(self, spark: SparkSession, sources: list[str], approx_percentiles: bool,
                 owns_session: bool) -> None:  # fmt: skip
        self.spark = spark
        self.sources = sources
        self.approx_percentiles = approx_percentiles
        self._owns_session = owns_session
        self._traces: dict[int, str] | None = None

    def sql(
        self, query: str, params: dict[str, Any] | None = None, dialect: str = "duckdb"
    ) -> pl.DataFrame:
        from tracekit.spark_sql import to_spark  # lazy: sqlglot, only when Spark runs SQL

        try:
            text = query if dialect == "spark" else to_spark(query, self.approx_percentiles)
        except Exception as e:  # sqlglot's ParseError and friends
            raise QueryError(f"cannot translate the query to Spark SQL: {_first_line(e)}") from None
        try:
            df = self.spark.sql(text, args=params or None)
            return to_polars(df)
        except Exception as e:
            if type(e).__module__.startswith(("pyspark", "py4j")):
                raise QueryError(f"Spark: {_first_line(e)}") from None
            raise

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run the named query over every trace (or `trace_id=N`), as TraceSet.query."""
        from tracekit.sql import list_traces, run_named_query  # lazy: the catalogue at first use

        if self._traces is None:  # the views are fixed for this object's life: list them once
            self._traces = list_traces(self.sql)
        return run_named_query(self.sql, name, params, self._traces)

    def query_dicts(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """The named query's rows as dicts (TraceSet.query_dicts)."""
        return self.query(name, **params).to_dicts()

    def close(self) -> None:
        for table in (*TABLES, RULES_VIEW):
            self.spark.catalog.dropTempView(table)
        if self._owns_session:
            self.spark.stop()

    def __enter__(self) -> SparkTraceSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(e: BaseException) -> str:
    text = getattr(e, "getMessage", lambda: str(e))()
    lines = str(text).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def to_polars(df: DataFrame) -> pl.DataFrame:
    """A Spark result as polars; DECIMAL columns (Spark types `100.0 * x` so, DuckDB a DOUBLE)
    become Float64, or Int64 at scale 0."""
    import polars as pl

    out = pl.from_arrow(df.toArrow())
    assert isinstance(out, pl.DataFrame)
    casts = [
        pl.col(name).cast(pl.Int64 if dtype.scale == 0 else pl.Float64)
        for name, dtype in out.schema.items()
        if isinstance(dtype, pl.Decimal)
    ]
    return out.with_columns(casts) if casts else out


def open_spark(
    paths: str | Path | Sequence[str | Path],
    spark: SparkSession | None = None,
    approx_percentiles: bool | None = None,
    rules: list[CategoryRule] | None = None,
) -> SparkTraceSet:
    """Register the tables of export folders (local paths or URIs Spark reads) as temp views,
    and the GPU category rules (default: tracekit.toml's, then the built-in ones)."""
    why = spark_available()
    if why:
        raise TracekitError(f"--engine spark: {why}")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    sources = [str(p) for p in paths]
    for s in sources:
        if "://" in s:
            continue
        if not is_export_dir(Path(s)):
            raise TracekitError(
                f"{s}: not a Parquet export folder (--engine spark reads the folders "
                "`tracekit export TRACES --parquet DIR` writes)"
            )
        with duckdb.connect() as con:  # (DuckDB reads the Parquet schemas: no Spark job)
            why = older_export_problem(con, Path(s))
        if why is not None:
            raise TracekitError(f"{s}: {why}")
    if approx_percentiles is None:
        approx_percentiles = os.environ.get(PERCENTILES_ENV, "exact").lower() == "approx"
    if rules is None:
        rules = user_rules() + list(builtin_rules())
    owns = spark is None
    session = spark or local_session()
    try:
        _register(session, sources)
        register_rules(session, rules)
    except Exception as e:
        if owns:
            session.stop()
        if type(e).__module__.startswith(("pyspark", "py4j")):
            raise TracekitError(f"Spark cannot read the export: {_first_line(e)}") from None
        raise
    return SparkTraceSet(session, sources, approx_percentiles, owns)


def _register(spark: SparkSession, sources: list[str]) -> None:
    from pyspark.sql import functions as F

    frames: dict[str, list[DataFrame]] = {t: [] for t in TABLES}
    next_id = 1
    for src in sources:
        tables = {t: spark.read.parquet(export_table_path(src, t)) for t in TABLES}
        mapping = None
        if len(sources) > 1:  # renumber 1..N in input order, as DuckDB's union of stores does
            ids = sorted(r[0] for r in tables["traces"].select("trace_id").collect())
            mapping = {old: next_id + k for k, old in enumerate(ids)}
            next_id += len(ids)
        for t, df in tables.items():
            tid = F.col("trace_id").cast("int")
            if mapping is not None:
                tid = F.lit(None).cast("int")
                for old, new in mapping.items():
                    tid = F.when(F.col("trace_id") == old, F.lit(new)).otherwise(tid)
            rest = [F.col(c) for c in df.columns if c != "trace_id"]
            frames[t].append(df.select(tid.alias("trace_id"), *rest))
    for t, parts in frames.items():
        df = parts[0]
        for more in parts[1:]:
            df = df.unionByName(more)
        df.createOrReplaceTempView(t)


def register_rules(spark: SparkSession, rules: list[CategoryRule]) -> None:
    """The temp view tk_category_rules: (priority, category, target, pattern), the rows
    tracekit.categories.install puts in DuckDB's table (priority = position, first wins)."""
    rows = [(i, r.category, r.target, r.pattern) for i, r in enumerate(rules)]
    schema = "priority INT, category STRING, target STRING, pattern STRING"
    spark.createDataFrame(rows, schema).createOrReplaceTempView(RULES_VIEW)
