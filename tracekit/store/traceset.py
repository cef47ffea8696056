"""`tracekit.open(...)`: one object over one or more traces, queried with SQL."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import duckdb

from tracekit.atomic import check_input_file, folder_for
from tracekit.categories import install
from tracekit.errors import QueryError, StoreError, TraceFormatError, TracekitError
from tracekit.ingest import formats
from tracekit.sql import EACH_TRACE, ID_TYPES, TRACE_IDS, load_query, run_named_query
from tracekit.store.build import (
    CACHE_SUFFIX,
    SCHEMA_VERSION,
    TABLES,
    IngestResult,
    connect,
    create_schema,
    ensure_trace_store,
    is_duckdb_file,
    older_store_problem,
    store_problem,
)
from tracekit.store.cache import temp_beside
from tracekit.store.db_errors import first_line, with_hints
from tracekit.store.lake import export_tables, is_export_dir, older_export_problem
from tracekit.store.literals import execute
from tracekit.store.stages import StageRule, load_config_rules

# Copy a union of stores into memory (TraceSet.hold_in_memory) up to this many events a store
# on average: planning saved is ~50-70 ms a store over a report, the copy ~1.6 us an event.
IN_MEMORY_EVENTS_PER_STORE = 25_000
IN_MEMORY_EVENTS_MAX = 4_000_000  # whatever the count of stores: memory, and ~6 s of copying

if TYPE_CHECKING:  # polars is imported when a result is returned: a store build never needs it
    import polars as pl


def _capture_traces(directory: Path) -> list[Path] | None:
    """The traces a run folder's capture.json lists (None: no usable manifest)."""
    try:
        files = json.loads((directory / "capture.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not isinstance(files, list):
        return None
    roles = {
        f.get("role"): directory / f["path"]
        for f in files
        if isinstance(f, dict) and isinstance(f.get("path"), str) and "\x00" not in f["path"]
    }
    traces = [roles[r] for r in ("nsys-sqlite", "torch-trace") if r in roles]
    if "nsys-sqlite" not in roles and "nsys-report" in roles:
        traces.append(roles["nsys-report"])
    root = directory.resolve()
    found = [p for p in traces if p.is_file() and root in p.resolve().parents]
    return sorted(found) or None


def find_traces(directory: Path) -> list[Path]:
    """Trace files in a folder (a capture run dir or a folder of per-rank traces), sorted."""
    listed = _capture_traces(directory)
    if listed is not None:
        return listed
    found = []
    for p in sorted(directory.iterdir()):
        if not p.is_file() or p.name.endswith((CACHE_SUFFIX, ".lock", ".tmp")):
            continue
        if p.name == "capture.json" or not p.name.endswith(formats.suffixes()):
            continue
        if p.suffix == ".nsys-rep" and p.with_suffix(".sqlite").exists():
            continue
        try:
            fmt = formats.detect(p)
        except TraceFormatError:
            continue
        if not fmt.in_folder(p):
            continue
        found.append(p)
    if not found:
        raise TraceFormatError(f"{directory}: no trace files in this folder")
    return found


def input_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every file an output must never replace: the paths given, the traces and stores they
    stand for, and a run folder's capture.json and attribute sidecars."""
    found = [Path(p) for p in paths]
    for p in list(found):
        with contextlib.suppress(TracekitError, OSError, ValueError):
            if p.is_dir():
                found += [p / "capture.json", p / "attributes"]
            traces, stores = resolve_inputs([p])
            found += traces + stores
    return found


def resolve_inputs(paths: Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """Split inputs into (trace files, existing stores). Folders expand to their traces; a
    Parquet export folder (tracekit export --parquet) counts as a store."""
    traces: list[Path] = []
    stores: list[Path] = []
    for raw in paths:
        p = Path(raw)
        try:
            p.stat()
        except PermissionError:
            raise TraceFormatError(f"{p}: permission denied (on a folder above it)") from None
        except OSError:
            raise TraceFormatError(f"{p}: no such file or directory") from None
        check_input_file(p)
        if is_export_dir(p):
            stores.append(p)
        elif p.is_dir():
            traces.extend(find_traces(p))
        elif p.name == "capture.json":
            # A capture manifest stands for its run folder.
            traces.extend(find_traces(p.parent))
        elif is_duckdb_file(p):
            stores.append(p)
        else:
            traces.append(p)
    return traces, stores


# Per query, the id type its over_traces form plans with (learnt at the first try in this
# process; empty: neither, the query runs once per trace).
_LATERAL_TYPES: dict[str, tuple[str, ...]] = {}
_NOT_PLANNED = ("Not implemented Error", "INTERNAL Error")
_Result = TypeVar("_Result")


class QuerySource(Protocol):
    """What the report and the CLI need of an engine: tracekit.TraceSet (DuckDB) or
    tracekit.spark.SparkTraceSet. `sql` takes DuckDB SQL; both return polars DataFrames."""

    def sql(self, query: str, params: dict[str, Any] | None = None) -> pl.DataFrame: ...

    def query(self, name: str, **params: Any) -> pl.DataFrame: ...

    def query_dicts(self, name: str, **params: Any) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> QuerySource: ...

    def __exit__(self, *exc: object) -> None: ...


ENGINES = ("duckdb", "spark")


def open_engine(
    engine: str,
    paths: Sequence[str | Path],
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    read_only: bool = True,
) -> QuerySource:
    """`open_traces` for engine "duckdb"; for "spark", `tracekit.spark.open_spark` over
    Parquet export folders (the pyspark extra; stage rules and refresh do not apply there:
    an export already holds its stages)."""
    if engine == "spark":
        from tracekit.spark import open_spark  # lazy: pyspark, only for --engine spark

        if stage_rules or refresh or not read_only:
            raise TracekitError(
                "--engine spark reads export folders as they are: --stage, --refresh and "
                "--write apply to DuckDB stores only"
            )
        return open_spark(list(paths))
    if engine != "duckdb":
        raise TracekitError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    return open_traces(list(paths), stage_rules=stage_rules, refresh=refresh, read_only=read_only)


@dataclass(frozen=True)
class Rows:
    """A query's result as plain rows (TraceSet.rows)."""

    columns: list[str]
    numeric: list[bool]  # per column: a number (right-aligned in a table)
    rows: list[tuple[Any, ...]]


_NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                  "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")  # fmt: skip


def _is_numeric(duckdb_type: str) -> bool:
    return duckdb_type.split("(")[0] in _NUMERIC_TYPES


class TraceSet:
    """One or more ingested traces behind one DuckDB connection.

    `.con` is the DuckDB connection (tables: traces, threads, events, stages, requests,
    attributes, gpu_islands); `.sql(q)` returns a polars DataFrame; `.query(name, **params)`
    runs a named query from queries/.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        sources: list[Path],
        ingests: list[IngestResult],
        stores: int = 1,
    ) -> None:
        install(con)  # tracekit/macros.sql and the GPU category rules, on every connection
        self.con = con
        self.sources = sources
        self.ingests = ingests
        self.stores = stores  # >1: the tables are views over that many attached stores

    def hold_in_memory(self, events_per_store: int = IN_MEMORY_EVENTS_PER_STORE) -> bool:
        """Copy a union of several stores into in-memory tables, when they hold at most
        `events_per_store` events a store on average; whether it copied. For many small
        stores (the ranks of a job) before many queries (a report): DuckDB plans a query
        over the union once per store each table reference reads (64 ranks: 340 ms to plan
        program_kind, 64 ms on the copy), and the copy costs ~1.6 us an event."""
        if self.stores < 2:
            return False
        (events,) = self.rows("SELECT coalesce(sum(event_count), 0) FROM traces").rows[0]
        if int(events) > min(events_per_store * self.stores, IN_MEMORY_EVENTS_MAX):
            return False
        for t in TABLES:  # (not TEMP: the cursors of this connection see them too)
            self.con.execute(f"CREATE TABLE __tk_copy_{t} AS SELECT * FROM {t}")
            self.con.execute(f"DROP VIEW {t}")
            self.con.execute(f"ALTER TABLE __tk_copy_{t} RENAME TO {t}")
        self.stores = 1
        return True

    def sql(self, query: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
        """Run SQL and return a polars DataFrame."""
        rel = self._execute(query, params)
        if rel.description is None:
            import polars as pl

            return pl.DataFrame()
        return rel.pl()

    def rows(self, query: str, params: dict[str, Any] | None = None) -> Rows:
        """Run SQL and return its rows as Python tuples (no polars: `tracekit sql` prints a
        table or JSON from these, without the 0.3-0.5 s of importing polars and numpy)."""
        rel = self._execute(query, params)
        if rel.description is None:
            return Rows([], [], [])
        numeric = [_is_numeric(str(d[1])) for d in rel.description]
        return Rows([d[0] for d in rel.description], numeric, rel.fetchall())

    def query_dicts(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """The named query's rows as dicts (what `.query(...).to_dicts()` gives, without
        polars: a report's queries are small, and importing polars cost more than them)."""
        q = load_query(name)
        res = self.rows(q.text, q.bind(params))
        return [dict(zip(res.columns, row, strict=True)) for row in res.rows]

    def query_dicts_each(
        self, name: str, trace_ids: Sequence[int], **params: Any
    ) -> dict[int, list[dict[str, Any]]]:
        """`query_dicts(name, trace_id=i, **params)` for each id, in one statement where the
        query has its over_traces form and DuckDB can plan it (else once per trace)."""
        res = self._over_traces(name, trace_ids, params, self.rows)
        if res is None:
            return {i: self.query_dicts(name, trace_id=i, **params) for i in trace_ids}
        out: dict[int, list[dict[str, Any]]] = {i: [] for i in trace_ids}
        cols = res.columns[1:]
        for row in res.rows:
            out[row[0]].append(dict(zip(cols, row[1:], strict=True)))
        return out

    def _over_traces(
        self, name: str, trace_ids: Sequence[int], params: dict[str, Any],
        run: Callable[[str, dict[str, Any]], _Result],
    ) -> _Result | None:  # fmt: skip
        """The query's over_traces form for these ids, run by `run` with the first id type
        DuckDB plans it with; None when there is no such form or DuckDB plans neither."""
        q = load_query(name)
        if len(trace_ids) < 2 or q.over_traces() is None:
            return None
        bound = q.bind({"trace_id": trace_ids[0], **params})
        del bound["trace_id"]
        for id_type in _LATERAL_TYPES.get(name, ID_TYPES):
            try:
                out = run(q.over_traces(id_type) or "", {**bound, TRACE_IDS: list(trace_ids)})
            except QueryError as e:
                if not str(e).startswith(_NOT_PLANNED):
                    raise
                continue
            _LATERAL_TYPES[name] = (id_type,)
            return out
        _LATERAL_TYPES[name] = ()  # DuckDB plans neither form: once per trace
        return None

    def _execute(self, query: str, params: dict[str, Any] | None) -> duckdb.DuckDBPyConnection:
        try:
            return _interruptible(self.con, query, params or {})
        except duckdb.Error as e:
            msg = with_hints(e)
            if "read-only" in msg:
                msg += " (stores open read-only; `tracekit sql --write` opens a store read-write)"
            raise QueryError(msg) from None

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run the named query `queries/<name>.sql` over every trace (or `trace_id=N`); over
        every trace, in one statement where it can (query_dicts_each)."""
        takes_trace = "trace_id" in {p.name for p in load_query(name).params}
        if takes_trace and "trace_id" not in params:
            ids = [int(r[0]) for r in self.rows("SELECT trace_id FROM traces ORDER BY 1").rows]
            frame = self._over_traces(name, ids, params, self.sql)
            if frame is not None:
                return frame.drop(EACH_TRACE)
        return run_named_query(self.sql, name, params)

    def cursor(self) -> TraceSet:
        """The same stores on another DuckDB connection (a cursor of this one), for queries
        on another thread: a connection runs one query at a time."""
        return TraceSet(self.con.cursor(), self.sources, self.ingests, self.stores)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> TraceSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _interruptible(
    con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any]
) -> duckdb.DuckDBPyConnection:
    """`con.execute` on a worker thread, so Ctrl-C (delivered to the main thread, which
    DuckDB's execute would block) interrupts the query: KeyboardInterrupt, exit 130."""
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["rel"] = execute(con, query, params)
        except BaseException as e:  # raised again on the calling thread
            box["error"] = e

    worker = threading.Thread(target=work, name="tracekit-query", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
    except KeyboardInterrupt:
        con.interrupt()
        worker.join(10)
        raise
    if "error" in box:
        raise box["error"]
    rel: duckdb.DuckDBPyConnection = box["rel"]
    return rel


def _first_line(e: Exception) -> str:
    return first_line(e)


def _rules_for(trace: Path, rules: Sequence[StageRule] | None) -> list[StageRule]:
    if rules is not None:
        return list(rules)
    # A tracekit.toml beside the trace, else in the working directory.
    return load_config_rules(trace.resolve().parent) or load_config_rules(Path.cwd())


def ingest_many(
    traces: Sequence[Path],
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    workers: int | None = None,
) -> list[IngestResult]:
    """`ensure_trace_store` for every trace (in input order), in parallel over cores."""
    from tracekit.store.parallel import ensure_many  # lazy: multiprocessing, only for many traces

    if len(traces) == 1:
        return [ensure_trace_store(traces[0], _rules_for(traces[0], stage_rules), refresh)]
    return ensure_many(traces, [_rules_for(t, stage_rules) for t in traces], refresh, workers)


def open_traces(
    paths: str | Path | Sequence[str | Path],
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    read_only: bool = True,
    workers: int | None = None,
) -> TraceSet:
    """Open traces, run folders or stores for querying; traces are ingested (cached) first.

    Several traces that need ingesting are ingested in parallel, one process per trace, up to
    `workers` at a time (default: one per core)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    traces, stores = resolve_inputs(paths)
    ingests = ingest_many(traces, stage_rules, refresh, workers)
    store_files = [r.store for r in ingests] + stores
    # The caches ensure_trace_store just checked or built (store_problem, key, row counts) are
    # not checked again: with many ranks that second pass was ~15% of a warm report, and
    # ~27 ms of every one-trace open. A store file given by the user is checked here.
    checked = {r.store for r in ingests}
    if len(store_files) == 1 and not is_export_dir(store_files[0]):
        try:
            con = connect(str(store_files[0]), read_only=read_only)
        except duckdb.Error as e:
            raise StoreError(f"{store_files[0]}: cannot open store ({_first_line(e)})") from None
        if store_files[0] not in checked:
            _check_store(con, store_files[0])
        return TraceSet(con, traces or stores, ingests)
    con = connect(":memory:")
    _attach_union(con, store_files, checked=checked)
    return TraceSet(con, traces + stores, ingests, len(store_files))


def _check_store(con: duckdb.DuckDBPyConnection, path: Path, catalog: str | None = None) -> None:
    why = store_problem(con, catalog)
    if why is not None:
        if catalog is None:
            con.close()
        raise StoreError(f"{path}: not a store tracekit wrote ({why}); nothing in it was run")
    why = older_store_problem(con, catalog)
    if why is not None:
        if catalog is None:
            con.close()
        raise StoreError(f"{path}: {why}")


def _attach_union(
    con: duckdb.DuckDBPyConnection,
    store_files: list[Path],
    view_prefix: str = "",
    checked: set[Path] | None = None,
) -> None:
    """Expose several stores (or export folders) as one: views renumber trace_id 1..N in input
    order."""
    parts: dict[str, list[str]] = {t: [] for t in TABLES}
    next_id = 1
    for i, store in enumerate(store_files):
        alias = f"s{i}"
        tables = _source_tables(con, store, alias, store in (checked or set()))
        try:
            ids = [
                r[0]
                for r in con.execute(
                    f"SELECT trace_id FROM ({tables['traces']}) ORDER BY 1"
                ).fetchall()
            ]
        except duckdb.Error as e:
            raise StoreError(f"{store}: cannot read its traces ({_first_line(e)})") from None
        mapping = " ".join(f"WHEN {old} THEN {next_id + k}" for k, old in enumerate(ids))
        # One source keeps its ids (an export's partitions then prune on trace_id).
        renumber = ids and len(store_files) > 1
        expr = f"(CASE trace_id {mapping} END)::INTEGER" if renumber else "trace_id"
        if renumber and len(ids) == 1:
            # a store of one trace (a rank's cache): a constant id, so that a query's
            # `trace_id = N` prunes the other stores' branches (with CASE each query read
            # every store: a 64-rank report cost 6.3x 64 single reports)
            expr = f"{next_id}::INTEGER"
        next_id += len(ids)
        for t in TABLES:
            parts[t].append(f"SELECT * REPLACE ({expr} AS trace_id) FROM ({tables[t]})")
    # The in-memory union's views are not TEMP, so its cursors (TraceSet.cursor) see them too;
    # a store being written (view_prefix) keeps them out of the file.
    temp = "TEMP " if view_prefix else ""
    for t in TABLES:
        con.execute(f"CREATE {temp}VIEW {view_prefix}{t} AS " + " UNION ALL ".join(parts[t]))


def _source_tables(
    con: duckdb.DuckDBPyConnection, store: Path, alias: str, checked: bool = False
) -> dict[str, str]:
    """A SELECT per table of a store file (attached as `alias`) or of a Parquet export."""
    if is_export_dir(store):
        why = older_export_problem(con, store)
        if why is not None:
            raise StoreError(f"{store}: {why}")
        return export_tables(store)
    try:
        con.execute(f"ATTACH '{_quote(store)}' AS {alias} (READ_ONLY)")
    except duckdb.Error as e:
        raise StoreError(f"{store}: cannot open store ({_first_line(e)})") from None
    if not checked:
        _check_store(con, store, alias)
    return {t: f"SELECT * FROM {alias}.{t}" for t in TABLES}


def _quote(path: Path) -> str:
    return str(path.resolve()).replace("'", "''")


def write_store(
    paths: Sequence[str | Path],
    out: Path,
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    workers: int | None = None,
) -> tuple[Path, list[IngestResult]]:
    """Ingest traces and write one store holding all of them (one trace_id each) at `out`."""
    traces, stores = resolve_inputs(paths)
    ingests = ingest_many(traces, stage_rules, refresh, workers)
    store_files = [r.store for r in ingests] + stores
    if len(store_files) == 1 and not stores and out.resolve() == store_files[0].resolve():
        return out, ingests
    with folder_for(out.parent):
        fd, tmp = temp_beside(out)
    os.close(fd)
    tmp.unlink()
    try:
        con = connect(str(tmp))
        create_schema(con)
        _attach_union(con, store_files, view_prefix="_all_")
        for t in TABLES:
            con.execute(f"INSERT INTO {t} SELECT * FROM _all_{t}")
        con.execute(
            f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}'), ('kind', 'combined')"
        )
        con.close()
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return out, ingests
