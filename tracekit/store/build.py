"""Build and check one trace's store: cached in tracekit's cache directory, keyed on the
source's identity, written atomically under a lock (the package docstring says more)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import duckdb

from tracekit.errors import StoreError, TraceFormatError, TracekitError
from tracekit.ingest import formats
from tracekit.ingest.bounded_strings import cut_staged, notice
from tracekit.ingest.common import STAGING_TABLE, IngestStats, TraceInfo
from tracekit.ingest.formats import TraceFormat
from tracekit.progress import build_progress
from tracekit.store import cache
from tracekit.store.attributes import apply_attributes, sidecars_for
from tracekit.store.db_errors import first_line
from tracekit.store.derive import derive, table_ddl
from tracekit.store.literals import execute, string_literal
from tracekit.store.stages import StageRule, rules_digest
from tracekit.structures import effective_structures, structures_digest
from tracekit.version import __version__

SCHEMA_VERSION = "6"
CACHE_SUFFIX = ".tracekit.duckdb"  # the caches older versions wrote beside a trace
TABLES = (
    "traces",
    "threads",
    "events",
    "stages",
    "requests",
    "attributes",
    "gpu_islands",
    "batches",
    "request_batches",
)
# Tables added since the first version: a store or export without one is an older tracekit's
# (refused in one line, see older_schema_problem), not something else.
ADDED_TABLES = ("gpu_islands", "batches", "request_batches")
DUCKDB_MAGIC_OFFSET = 8


@dataclass
class IngestResult:
    """What building one trace's store did (for `tracekit ingest` to print)."""

    source: Path
    store: Path
    reused: bool
    format: str = ""
    events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def is_duckdb_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return head[DUCKDB_MAGIC_OFFSET : DUCKDB_MAGIC_OFFSET + 4] == b"DUCK"


def cache_path_for(source: Path) -> Path:
    """Where the cached store of `source` lives (in the cache directory, never beside it)."""
    return cache.store_path_for(source)


def _sidecar_files(source: Path) -> list[Path]:
    """Attribute sidecars written next to `source` by `tracekit capture` (none elsewhere)."""
    run_dir = source.parent
    if not (run_dir / "capture.json").is_file() and not (run_dir / "attributes").is_dir():
        return []
    try:
        return [p for p in sidecars_for(run_dir, source) if p.is_file()]
    except (OSError, ValueError, RecursionError):  # unreadable or foreign capture.json
        return []


def _sidecar_digest(files: list[Path]) -> str:
    parts = []
    for p in files:
        st = p.stat()
        parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _sample_digest(source: Path) -> str:
    """A digest of the source's content that costs the same at any size: its size and
    1 MiB from its start, middle and end (the identity catches the rest: see cache.py)."""
    h = hashlib.sha256()
    size = source.stat().st_size
    h.update(str(size).encode())
    with open(source, "rb") as f:
        for offset in sorted({0, max(size // 2 - _SAMPLE // 2, 0), max(size - _SAMPLE, 0)}):
            f.seek(offset)
            h.update(f.read(_SAMPLE))
    return h.hexdigest()


_SAMPLE = 1 << 20


def _source_key(source: Path, rules: list[StageRule]) -> dict[str, str]:
    return {
        **cache.source_identity(source),
        "source_sample_sha256": _sample_digest(source),
        "sidecars": _sidecar_digest(_sidecar_files(source)),
        "schema_version": SCHEMA_VERSION,
        "tracekit_version": __version__,
        "stage_rules": rules_digest(rules),
        "serving_structures": structures_digest(effective_structures()),
    }


def _database(con: duckdb.DuckDBPyConnection, catalog: str | None) -> str:
    """The name of the database `catalog` names (None: the connection's own)."""
    if catalog is not None:
        return catalog
    return str(con.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]


def store_problem(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> str | None:
    """Why the open database is not a store tracekit wrote (None: it looks like one).

    Reads only DuckDB's catalog, so nothing stored in the file (a view, a macro) runs before
    it passes: tracekit stores hold base tables only."""
    db = _database(con, catalog)
    return store_problems(con, [db])[db]


def store_problems(con: duckdb.DuckDBPyConnection, catalogs: list[str]) -> dict[str, str | None]:
    """store_problem for each attached database of `catalogs`, in one statement: listing
    DuckDB's functions costs ~14 ms whatever it lists, once for all the stores of a report."""
    rows = execute(
        con,
        "WITH dbs AS (SELECT unnest($dbs) AS db),"
        " v AS (SELECT database_name AS db, list(view_name ORDER BY view_name) AS views"
        "       FROM duckdb_views() WHERE NOT internal GROUP BY 1),"
        " m AS (SELECT database_name AS db, list(function_name ORDER BY function_name) AS macros"
        "       FROM duckdb_functions() WHERE NOT internal"
        "         AND function_type IN ('macro', 'table_macro') GROUP BY 1),"
        " t AS (SELECT table_catalog AS db, list([table_name, table_type]) AS tables"
        "       FROM information_schema.tables GROUP BY 1)"
        " SELECT dbs.db, v.views, m.macros, t.tables"
        " FROM dbs LEFT JOIN v USING (db) LEFT JOIN m USING (db) LEFT JOIN t USING (db)",
        {"dbs": list(catalogs)},
    ).fetchall()
    return {str(db): _problem(views, macros, tables) for db, views, macros, tables in rows}


def _problem(views: list[str] | None, macros: list[str] | None,
             tables: list[list[str]] | None) -> str | None:  # fmt: skip
    if views:
        return "it holds views (" + ", ".join(str(v) for v in views[:3]) + ")"
    if macros:
        return "it holds macros (" + ", ".join(str(m) for m in macros[:3]) + ")"
    kinds = {str(name): str(kind) for name, kind in tables or []}
    missing = [
        t for t in (*TABLES, "meta") if kinds.get(t) != "BASE TABLE" and t not in ADDED_TABLES
    ]
    if missing:
        return f"missing tables: {', '.join(missing)}"
    return None


def table_columns(table: str) -> list[str]:
    """The columns of schema.sql's `table`, in order."""
    return re.findall(r"^\s+([a-z_]+)\s+[A-Z]", table_ddl(table), flags=re.M)


def older_schema_problem(con: duckdb.DuckDBPyConnection, relations: dict[str, str]) -> str | None:
    """Why a store or export is not this version's (None: it is): what an older tracekit
    wrote lacks the tables or the columns added since. `relations`: each table it holds, as
    a table name or a subquery in parentheses."""
    why = []
    for table in TABLES:
        if table not in relations:
            continue
        have = {d[0] for d in con.execute(f"SELECT * FROM {relations[table]} LIMIT 0").description}
        lacking = [c for c in table_columns(table) if c not in have]
        if lacking:
            why.append(f"{table} has no {', '.join(lacking)}")
    absent = [t for t in ADDED_TABLES if t not in relations]
    if absent:
        why.append(f"no {', '.join(absent)} table")
    if why:
        return f"an older tracekit wrote it ({'; '.join(why)}); ingest or export the trace again"
    return None


def older_store_problem(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> str | None:
    """older_schema_problem for a store file open on `con` (attached as `catalog`)."""
    db = _database(con, catalog)
    held = {r[0] for r in execute(
        con, "SELECT table_name FROM information_schema.tables WHERE table_catalog = $db",
        {"db": db},
    ).fetchall()}  # fmt: skip
    prefix = "" if catalog is None else f"{catalog}."
    return older_schema_problem(con, {t: prefix + t for t in TABLES if t in held})


def _truncated(con: duckdb.DuckDBPyConnection, path: Path) -> str | None:
    """Why the file is shorter than the blocks in use need (None: it is not): a cut store
    may still open and answer from its first blocks. (Not the blocks the header counts:
    DuckDB cuts free blocks off the file's end yet keeps counting them.)"""
    row = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    if row is not None and _cut_short(path, row[0], row[1]):
        return "it is truncated"
    return None


def _cut_short(path: Path, block_size: int, used_blocks: int) -> bool:
    return path.stat().st_size < int(block_size) * int(used_blocks)


def _content_sql(catalog: str = "") -> str:
    """What freshness reads of a store, in one statement (see store_problem): its meta key,
    its traces' count and event_count sum, its events' count."""
    p = f"{catalog}." if catalog else ""
    return (
        f"SELECT (SELECT list([key, value]) FROM {p}meta), (SELECT count(*) FROM {p}traces),"
        f" (SELECT sum(event_count) FROM {p}traces), (SELECT count(*) FROM {p}events)"
    )


def _content_problem(meta: list[list[str]] | None, n_traces: int, counted: int | None,
                     events: int, key: dict[str, str]) -> str | None:  # fmt: skip
    """Why a store's content does not serve the source of `key` ("": stale, the source
    changed; None: it does)."""
    held = {k: v for k, v in meta or []}
    if not all(held.get(k) == v for k, v in key.items()):
        return ""
    if n_traces != 1 or counted != events:
        return "its row counts disagree"
    return None


def _cache_is_fresh(cache: Path, key: dict[str, str], notice: bool = False) -> bool:
    """Whether the cached store can be used: ours (see store_problem), opens cleanly, its
    meta key matches the source's, and its row counts agree with its traces table."""
    if not cache.is_file() or cache.is_symlink():
        return False
    why = None
    if _wal_of(cache).exists() or _wal_of(cache).is_symlink():
        # A build ends with CHECKPOINT and closes: a WAL beside the store is not its own, and
        # opening the store would replay it (another database's WAL fails every open).
        why = f"{_wal_of(cache).name} beside it is not its own"
    else:
        why = _open_problem(cache, key)
        if why == "":
            return False  # stale: the source changed (no notice needed)
    if why is not None and notice:
        import sys

        print(f"tracekit: the cached store {cache} is not usable: {why}; rebuilding",
              file=sys.stderr)  # fmt: skip
    return why is None


def _wal_of(store: Path) -> Path:
    return store.with_name(store.name + ".wal")


def _open_problem(cache: Path, key: dict[str, str]) -> str | None:
    """Why the store cannot be used (None: it can; "": it is stale)."""
    why = None
    try:
        con = connect(str(cache), read_only=True)
    except duckdb.Error as e:
        why = f"it does not open ({first_line(e)})"
    else:
        try:
            why = store_problem(con) or _truncated(con, cache)
            if why is None:
                meta, n_traces, counted, events = con.execute(_content_sql()).fetchone() or (
                    None, 0, None, 0)  # fmt: skip
                why = _content_problem(meta, n_traces, counted, events, key)
        except duckdb.Error as e:
            why = f"it cannot be read ({first_line(e)})"
        finally:
            con.close()
    return why


def fresh_stores(caches: list[Path], keys: list[dict[str, str]]) -> list[bool]:
    """_cache_is_fresh for each cache and its source's key, on one in-memory connection: a
    store attached read-only costs ~4 ms where a connection of its own cost ~18, and each
    check is one statement for all of them. Any store in doubt is reported stale (its
    ingest then checks it alone, and says why it rebuilds)."""
    fresh = [False] * len(caches)
    con = connect(":memory:")
    try:
        attached: dict[str, int] = {}
        for i, store in enumerate(caches):
            if not store.is_file() or store.is_symlink() or os.path.lexists(_wal_of(store)):
                continue
            alias = f"s{i}"
            try:
                con.execute(f"ATTACH {string_literal(str(store))} AS {alias} (READ_ONLY)")
            except duckdb.Error:
                continue
            attached[alias] = i
        if not attached:
            return fresh
        problems = store_problems(con, list(attached))
        blocks = {str(db): (size, used) for db, size, used in con.execute(
            "SELECT database_name, block_size, used_blocks FROM pragma_database_size()"
        ).fetchall()}  # fmt: skip
        ours = [a for a in attached if problems[a] is None
                and not _cut_short(caches[attached[a]], *blocks.get(a, (0, 0)))]  # fmt: skip
        if not ours:
            return fresh
        rows = con.execute(
            " UNION ALL ".join(f"SELECT '{a}', * FROM ({_content_sql(a)})" for a in ours)
        ).fetchall()
        for alias, meta, n_traces, counted, events in rows:
            i = attached[alias]
            fresh[i] = _content_problem(meta, n_traces, counted, events, keys[i]) is None
    except (duckdb.Error, OSError):
        return [False] * len(caches)
    finally:
        con.close()
    return fresh


@contextlib.contextmanager
def _lock(source: Path) -> Iterator[None]:
    # An advisory lock on the (read-only opened) source itself: no lock file to leave behind.
    with open(source, "rb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


THREADS_ENV = "TRACEKIT_THREADS"  # DuckDB threads a connection (default: one a core)


def duckdb_config() -> dict[str, str | bool | int | float | list[str]]:
    """Settings every tracekit DuckDB connection gets: TRACEKIT_THREADS, when set, caps its
    threads (several tracekit processes at once, e.g. one per rank or a test worker per core,
    then share the cores without each one's threads contending for all of them)."""
    threads = os.environ.get(THREADS_ENV, "").strip()
    if not threads:
        return {}
    if not threads.isdigit() or int(threads) < 1:
        raise TracekitError(f"{THREADS_ENV}={threads!r}: not a whole number of threads >= 1")
    return {"threads": int(threads)}


def connect(path: str, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection without DuckDB's own progress bar (it would garble ours and the
    CLI's output on long queries), with duckdb_config's settings."""
    con = duckdb.connect(path, read_only=read_only, config=duckdb_config())
    con.execute("SET enable_progress_bar = false")
    return con


MEMORY_ENV = "TRACEKIT_MEMORY_LIMIT"  # DuckDB memory_limit while building a store
_MEMORY_DEFAULT = "2GB"
_MEMORY_CEILING = 2_000_000_000  # bytes: the default


def _memory_limit(source: Path, fmt: TraceFormat) -> tuple[str, bool]:
    """(DuckDB memory_limit for building this trace's store, whether it comes from the
    trace's size): TRACEKIT_MEMORY_LIMIT when set, else the format's own (from the file's
    size), else 2GB."""
    configured = os.environ.get(MEMORY_ENV)
    if configured:
        return configured, False
    derived = fmt.memory_limit(source)
    if derived is None:
        return _MEMORY_DEFAULT, False
    return f"{min(derived, _MEMORY_CEILING)}B", True


def _remove_stale_temps(cache: Path) -> None:
    """Delete temp stores left by a build that was killed (kill -9, power loss).

    Call only while holding the source's lock: a live builder holds it, so what is there
    now belongs to a dead one.
    """
    for p in cache.parent.glob(f".{glob.escape(cache.name)}.*.tmp*"):
        with contextlib.suppress(OSError):
            if p.is_dir():  # DuckDB's spill folder
                shutil.rmtree(p)
            else:
                p.unlink()


def _sweep_if_idle(source: Path, cache: Path) -> None:
    """Remove stale temps when no other process is building this trace right now."""
    try:
        with open(source, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                _remove_stale_temps(cache)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError:
        pass  # someone holds the lock (building): leave their temp file alone


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            h.update(chunk)
    return h.hexdigest()


def _import_ahead() -> None:
    """An import the build makes later, made on a thread while DuckDB connects and creates
    the schema (C++, without the GIL): numpy, which the JSON scanner needs (0.06 s). Not
    pandas: the build binds no Python value (tracekit.store.literals), so DuckDB never
    imports it, and importing it here took a core for 0.6-0.8 s beside the parse."""
    import numpy  # noqa: F401


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(files("tracekit.store").joinpath("schema.sql").read_text())


def build_trace_store(source: Path, out: Path, rules: list[StageRule]) -> IngestResult:
    """Ingest one trace into a new store at `out` (temp file + rename)."""
    fmt = formats.detect(source)
    limit, derived = _memory_limit(source, fmt)
    try:
        return _build(source, out, rules, fmt, limit)
    except duckdb.OutOfMemoryException:
        if not derived:
            raise
    # The limit from the file's size was too tight for this trace: once more with the default.
    return _build(source, out, rules, fmt, _MEMORY_DEFAULT)


def _build(source: Path, out: Path, rules: list[StageRule], fmt: TraceFormat,
           memory_limit: str) -> IngestResult:  # fmt: skip
    key = _source_key(source, rules)
    with cache.folder_for(out.parent):
        try:
            return _build_in(source, out, rules, fmt, memory_limit, key)
        except (RuntimeError, duckdb.InterruptException) as e:
            # DuckDB turns Ctrl-C inside a query into RuntimeError('Query interrupted').
            if isinstance(e, duckdb.InterruptException) or "interrupted" in str(e).lower():
                raise KeyboardInterrupt from None
            raise


def _build_in(source: Path, out: Path, rules: list[StageRule], fmt: TraceFormat,
              memory_limit: str, key: dict[str, str]) -> IngestResult:  # fmt: skip
    background = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    tmp: Path | None = None
    # Ctrl-C is held while the temp file is made, so that it lands inside the try below (which
    # removes the file) and never between the file's creation and the try (seen: a .tmp left).
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        try:
            fd, tmp = cache.temp_beside(out)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held Ctrl-C raises here
        os.close(fd)
        tmp.unlink()  # DuckDB wants to create the file itself
        # Beside the ingest: the imports the build would otherwise wait for on this thread,
        # and the digest, which reads the whole file (hashlib releases the GIL).
        background.submit(_import_ahead)
        digest = background.submit(_sha256, source)
        con = connect(str(tmp))
    except BaseException:  # (Ctrl-C while DuckDB creates the file, say)
        background.shutdown(wait=False)
        if tmp is not None:
            _discard(tmp)
        raise
    try:
        con.execute("SET preserve_insertion_order = false")
        # Bounded memory whatever the trace: DuckDB spills to <store>.tmp beyond this.
        # (a literal: see tracekit.store.literals)
        con.execute(f"SET memory_limit = {string_literal(memory_limit)}")
        fmt.tune(con)
        create_schema(con)
        with build_progress(f"ingest {source.name}") as progress:
            info = fmt.ingest(con, source, 1, tmp, progress)
            _bound_strings(con, info)
            derive(con, rules, progress)
            sidecars = _sidecar_files(source)
            if sidecars:
                progress.step("attributes")
                apply_attributes(con, 1, sidecars)
            progress.step("writing the store")
            _write_trace_row(con, source, info, digest.result())
            keys = sorted(key)  # (one statement: a row of parameters costs ~1 ms here)
            execute(con, "INSERT INTO meta SELECT unnest($k), unnest($v)",
                    {"k": keys, "v": [key[k] for k in keys]})  # fmt: skip
            con.execute("CHECKPOINT")
            con.close()
        with contextlib.suppress(FileNotFoundError):
            _wal_of(out).unlink()  # a stale WAL would be replayed onto the new store
        os.replace(tmp, out)
    except BaseException:
        con.close()
        digest.cancel()
        _discard(tmp)
        raise
    finally:
        background.shutdown(wait=False)
    return IngestResult(
        source=source,
        store=out,
        reused=False,
        format=info.format,
        events=info.stats.events,
        skipped=dict(info.stats.skipped),
        warnings=info.warnings,
    )


def _bound_strings(con: duckdb.DuckDBPyConnection, info: TraceInfo) -> None:
    """Cut names past bounded_strings.MAX_CHARS before derive copies them (see there)."""
    staged = execute(  # (literals: a bound Python value imports pandas where installed)
        con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = $t", {"t": STAGING_TABLE}
    ).fetchone()
    n = cut_staged(con, STAGING_TABLE if staged and staged[0] else "events", 1)
    if n:
        info.warnings.append(notice(n))


def _discard(tmp: Path) -> None:
    """Remove a build's temp store, its WAL and DuckDB's spill folder beside it."""
    for p in (tmp, Path(str(tmp) + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    shutil.rmtree(Path(str(tmp) + ".tmp"), ignore_errors=True)


def _write_trace_row(
    con: duckdb.DuckDBPyConnection, source: Path, info: TraceInfo, sha256: str
) -> None:
    stats: IngestStats = info.stats
    execute(
        con,
        """
        INSERT INTO traces
        SELECT 1, $path, $format, $tool_version, $host, min(start_ns), max(end_ns) - min(start_ns),
               $devices::JSON, $sha, $now, $rank, $clock, $metadata::JSON, count(*),
               $skipped_count, $skipped::JSON
        FROM events
        """,
        {
            "path": str(source.resolve()),
            "format": info.format,
            "tool_version": info.tool_version,
            "host": info.host,
            "devices": json.dumps(info.devices, default=str),
            "sha": sha256,
            "now": dt.datetime.now(dt.UTC).replace(tzinfo=None),
            "rank": info.rank,
            "clock": info.clock_offset_ns,
            "metadata": json.dumps(info.metadata, default=str),
            "skipped_count": stats.skipped_count,
            "skipped": json.dumps(dict(stats.skipped)),
        },
    )


def reuse_fresh_store(source: Path, store: Path) -> IngestResult:
    """The result for a store just found fresh (_cache_is_fresh): mark it used, sweep temps."""
    _sweep_if_idle(source, store)
    cache.touch(store)
    return IngestResult(source=source, store=store, reused=True)


def ensure_trace_store(
    source: Path, rules: list[StageRule], refresh: bool = False, out: Path | None = None
) -> IngestResult:
    """Return the cached store of `source`, building it if missing or stale."""
    try:
        source.stat()
    except PermissionError:
        raise TraceFormatError(f"{source}: permission denied") from None
    except OSError:
        raise TraceFormatError(f"{source}: no such file") from None
    if source.is_dir():
        raise TraceFormatError(f"{source}: is a directory, not a trace file")
    if not os.access(source, os.R_OK):
        raise TraceFormatError(f"{source}: permission denied")
    store = out or cache_path_for(source)
    key = _source_key(source, rules)
    if store.is_dir() and not store.is_symlink():
        raise StoreError(
            f"{store}: a folder is where the cached store goes; remove it (tracekit cache clear)"
        )
    if not refresh and _cache_is_fresh(store, key, notice=True):
        return reuse_fresh_store(source, store)
    formats.detect(source)  # fail on a non-trace before touching anything
    with _lock(source):
        # Another process may have built it while we waited for the lock.
        _remove_stale_temps(store)
        if not refresh and _cache_is_fresh(store, key):
            return IngestResult(source=source, store=store, reused=True)
        try:
            result = build_trace_store(source, store, rules)
        except TracekitError:
            raise
        except duckdb.Error as e:
            raise StoreError(f"{source}: could not build the store ({first_line(e)})") from None
    if out is None:
        cache.prune_to_configured_max(keep=store)
    return result
