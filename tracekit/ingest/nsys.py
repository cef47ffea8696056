"""Nsight Systems ingest: an `nsys export --type sqlite` file (or an .nsys-rep) -> events.

`ingest(con, path, trace_id)` validates the export with sqlite3, then maps every table it
knows (NVTX, CUDA runtime/driver API, kernels, memcpy, memset, synchronization, OS runtime,
processes and threads) with one INSERT ... SELECT per table inside DuckDB, over the file
attached read-only through sqlite_scanner (see nsys_map.py and docs/nsys.md). The events go to
the temp staging table (tracekit.ingest.common.STAGING_TABLE), which store.derive turns into
`events`; threads go straight to `threads`. The user's file is never written: sqlite3 opens it
`mode=ro`, DuckDB attaches it READ_ONLY.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import duckdb

from tracekit.atomic import folder_for
from tracekit.config import cache_dir
from tracekit.errors import TraceFormatError
from tracekit.ingest import nsys_meta as meta
from tracekit.ingest.bounded_strings import MAX_CHARS
from tracekit.ingest.common import STAGING_TABLE, EventWriter, TraceInfo
from tracekit.ingest.nsys_map import STR, Mapper
from tracekit.ingest.nsys_source import (
    FallbackCopy,
    Probe,
    attach_scanner,
    connect_ro,
    probe,
    sqlite_error,
    wal_mode,
)
from tracekit.progress import NO_PROGRESS, Progress
from tracekit.store.literals import execute

NEEDED_TABLES = (
    "StringIds",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "OSRT_API",
    "PROCESSES",
    "ThreadNames",
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
)
CUDA_TABLES = NEEDED_TABLES[2:8]
EXPORT_TIMEOUT_S = 600


def ingest(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    trace_id: int,
    *,
    reader: str = "auto",
    progress: Progress = NO_PROGRESS,
) -> TraceInfo:
    """Stage the events and insert the threads of one nsys SQLite export; return what it says
    of itself. The events are left in the temp staging table: run tracekit.store.derive next.

    reader: "auto" (sqlite_scanner, falling back to sqlite3) or "sqlite3" (force the fallback).
    """
    path = Path(path)
    progress.step("checking the SQLite export")
    with connect_ro(path) as sq:
        p = probe(sq, path)
        info = _trace_info(sq, p)
    _create_staging(con)
    try:
        return _ingest(con, path, trace_id, p, info, reader, progress)
    except BaseException:
        con.execute(f"DROP TABLE IF EXISTS {STAGING_TABLE}")
        raise


def _create_staging(con: duckdb.DuckDBPyConnection) -> None:
    # The rows go to the temp staging table, not `events`: tracekit.store.derive then writes the
    # compressed `events` once instead of twice (the mapping statements ran in 2/3 of the time
    # at 5e6 kernels; derive's read of the uncompressed temp rows costs back part of that).
    cols = "trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device, stream, "
    cols += "correlation, external_id, args"
    sql = f"CREATE OR REPLACE TEMP TABLE {STAGING_TABLE} AS SELECT {cols} FROM events LIMIT 0"
    con.execute(sql)


def _ingest(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    trace_id: int,
    p: Probe,
    info: TraceInfo,
    reader: str,
    progress: Progress,
) -> TraceInfo:
    alias = f"_tk_nsys_src{trace_id}"
    writer = EventWriter(con, trace_id)
    if p.long_text:
        # Text past bounded_strings.MAX_CHARS (a 4 MB NVTX domain name took 1.8 GB): the
        # sqlite3 copy cuts it before the mapping copies it into every event of its domain.
        cut = sum(len(c) for c in p.long_text.values())
        info.warnings.append(
            f"text columns with values past {MAX_CHARS:,} characters ("
            + ", ".join(f"{t}.{c}" for t, cols in sorted(p.long_text.items()) for c in cols)
            + f"): cut to that length, read with Python's sqlite3 ({cut} column(s))"
        )
    if reader == "sqlite3" or wal_mode(path) or p.long_text:
        # (sqlite_scanner opens a WAL-mode file so as to leave -wal/-shm beside it; sqlite3
        # reads it immutable)
        return _finish(con, path, p, info, _fallback(con, path, p, alias, trace_id, progress))
    try:
        attach_scanner(con, path, alias)
    except duckdb.Error as e:
        info.warnings.append(
            f"sqlite_scanner extension unavailable ({str(e).splitlines()[0]}); read with "
            "Python's sqlite3 instead (slower)"
        )
        return _finish(con, path, p, info, _fallback(con, path, p, alias, trace_id, progress))
    try:
        extra = _map_all(Mapper(con, alias, p, writer, rid="rowid", progress=progress))
        info.metadata["reader"] = "sqlite_scanner"
    except duckdb.Error as e:
        _raise_if_damaged(path, e)
        # Text the scanner cannot decode (bad UTF-8, a value not of its declared type):
        # start over through sqlite3, which decodes leniently.
        _detach(con, alias)
        _discard(con, trace_id)
        info.warnings.append(
            f"DuckDB's SQLite reader failed ({str(e).splitlines()[0]}); re-read with "
            "Python's sqlite3 (slower)"
        )
        return _finish(con, path, p, info, _fallback(con, path, p, alias, trace_id, progress))
    finally:
        _detach(con, alias)
    return _finish(con, path, p, info, (writer, extra))


def _map_all(m: Mapper) -> dict[str, Any]:
    m.load_strings()
    nvtx = m.nvtx()
    m.runtime()
    m.runtime("CUPTI_ACTIVITY_KIND_DRIVER")  # only in nvprof-style schemas; no-op if absent
    m.kernels()
    m.memcpy()
    m.memset()
    m.sync()
    m.memory()
    m.osrt()
    m.threads()
    m.con.execute(f"DROP TABLE IF EXISTS {STR}")
    return {"nvtx": nvtx, "counts": m.counts}


def _fallback(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    p: Probe,
    alias: str,
    trace_id: int,
    progress: Progress,
) -> tuple[EventWriter, dict[str, Any]]:
    writer = EventWriter(con, trace_id)
    copy = FallbackCopy(con, alias)
    try:
        progress.step("copying the export with Python's sqlite3")
        with connect_ro(path) as sq:
            copy.copy(sq, p, [t for t in NEEDED_TABLES if t == "StringIds" or p.has(t)])
        extra = _map_all(Mapper(con, alias, p, writer, rid="_rid", progress=progress))
    finally:
        copy.close()
    extra["reader"] = "sqlite3"
    return writer, extra


def _raise_if_damaged(path: Path, e: duckdb.Error) -> None:
    low = str(e).lower()
    if any(m in low for m in ("malformed", "not a database", "locked", "busy", "disk i/o")):
        raise sqlite_error(path, e) from None


def _detach(con: duckdb.DuckDBPyConnection, alias: str) -> None:
    with contextlib.suppress(duckdb.Error):
        con.execute(f"DETACH DATABASE IF EXISTS {alias}")


def _discard(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    _create_staging(con)
    execute(con, "DELETE FROM threads WHERE trace_id = $trace_id", {"trace_id": trace_id})


def _trace_info(sq: Any, p: Probe) -> TraceInfo:
    table, kv = meta.export_meta(sq, p)
    product = kv.get("EXPORT_PRODUCT_VERSION")
    host, system = meta.host_and_env(sq, p)
    offset, session = meta.clock_offset(sq, p)
    info = TraceInfo(
        format="nsys",
        tool_version=f"nsys {product}" if product else "nsys",
        host=host,
        devices=meta.devices(sq, p),
        clock_offset_ns=offset,
    )
    info.metadata = {
        "schema_version": kv.get("EXPORT_SCHEMA_VERSION"),
        "product_version": product,
        "meta_table": table,
        "export": {k: kv[k] for k in meta.SAFE_META_KEYS if k in kv},
        "tables": dict(sorted(p.rows.items())),
        "enum_tables": sum(1 for t in p.columns if t.startswith("ENUM_")),
        "session": session,
        "analysis": meta.analysis(sq, p),
        "system": system,
        "capture": meta.capture_meta(sq, p),
        "diagnostics": meta.diagnostics(sq, p),
    }
    if table is None:
        info.warnings.append("no export metadata table: nsys version unknown (very old export?)")
    return info


def _finish(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    p: Probe,
    info: TraceInfo,
    result: tuple[EventWriter, dict[str, Any]],
) -> TraceInfo:
    writer, extra = result
    writer.flush()
    info.stats = writer.stats
    md = info.metadata
    md["reader"] = extra.get("reader", md.get("reader", "sqlite_scanner"))
    md["events_by_table"] = extra["counts"]
    t = {"trace_id": writer.trace_id}
    w = info.warnings
    has_nvtx = p.has("NVTX_EVENTS")
    has_cuda = any(p.has(x) for x in CUDA_TABLES)
    if not has_nvtx and not has_cuda:
        w.append(
            "no NVTX and no CUDA data in this export (captured without `-t nvtx,cuda`, or "
            "nothing was emitted): there are no ranges or GPU work to attribute"
        )
    elif not has_cuda:
        w.append("no CUDA trace in this export (capture with `-t cuda` to see GPU work)")
    incomplete = extra["nvtx"].get("incomplete", 0)
    end = md["analysis"].get("duration"), md["analysis"].get("stopTime")
    at_end = execute(
        con,
        f"""SELECT count(*) FROM {STAGING_TABLE} WHERE trace_id = $trace_id AND kind = 'range'
           AND end_ns IN ($a, $b) AND (args->>'incomplete') IS NULL""",
        {**t, "a": end[0], "b": end[1]},
    ).fetchone()
    at_end_n = int(at_end[0]) if at_end else 0
    md["nvtx"] = {"incomplete_ranges": incomplete, "ranges_ending_at_trace_end": at_end_n}
    if incomplete:
        w.append(
            f"{incomplete} NVTX range(s) were never closed (end NULL): ended at the last NVTX "
            "timestamp as nsys does, flagged args.incomplete"
        )
    if at_end_n:
        w.append(
            f"{at_end_n} NVTX range(s) end exactly at the end of the capture: probably never "
            "closed (nsys closes open ranges at the trace end)"
        )
    # An anti join of the two key columns only: NOT EXISTS over the whole rows took 3x as long
    # (2.6 s against 0.8 s at 5e6 kernels). NULL keys never match, as in NOT EXISTS.
    orphans = execute(
        con,
        f"""SELECT count(*) FROM (
               SELECT pid, correlation FROM {STAGING_TABLE}
               WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')) g
           ANTI JOIN (
               SELECT pid, correlation FROM {STAGING_TABLE}
               WHERE trace_id = $trace_id AND kind = 'runtime') r
           ON r.correlation = g.correlation AND r.pid = g.pid""",
        t,
    ).fetchone()
    md["gpu_ops_without_api"] = int(orphans[0]) if orphans else 0
    if md["gpu_ops_without_api"] and has_cuda:
        w.append(
            f"{md['gpu_ops_without_api']} GPU operation(s) have no CUDA API call with the same "
            "correlation id in their process (call outside the capture window, or dropped)"
        )
    if p.has("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        n = p.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]
        writer.skip("cuda graph execution (graph-level trace)", n)
        w.append(
            f"{n} CUDA graph execution(s) were traced as whole graphs: their kernels are not in "
            "the kernel table (capture with `--cuda-graph-trace=node` for per-kernel rows)"
        )
    bad = {k: v for k, v in md["diagnostics"].items() if k in ("warning", "error")}
    if bad:
        w.append(f"nsys recorded capture diagnostics: {bad} (see DIAGNOSTIC_EVENT)")
    if not info.devices:
        rows = execute(
            con,
            f"""SELECT DISTINCT device FROM {STAGING_TABLE} WHERE trace_id = $trace_id
               AND kind IN ('kernel', 'memcpy', 'memset') AND device IS NOT NULL ORDER BY 1""",
            t,
        ).fetchall()
        info.devices = [{"id": r[0], "name": None, "source": "events"} for r in rows]
    return info


# -- .nsys-rep ---------------------------------------------------------------------------
def _cache_dir() -> Path:
    return cache_dir() / "nsys-export"


def export_nsys_rep(path: Path, timeout_s: float | None = None) -> Path:
    """Export an .nsys-rep to SQLite with the installed nsys; return the .sqlite path.

    The export goes to tracekit's cache directory (keyed by the report's path, size and mtime,
    reused while those are unchanged), never beside the input.
    """
    path = Path(path)
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceFormatError(
            f"{path}: is an Nsight Systems report (.nsys-rep) and nsys is not on PATH; install "
            "Nsight Systems, or export it yourself with `nsys export --type sqlite -o "
            f"{path.with_suffix('.sqlite').name} {path.name}` and ingest the .sqlite"
        )
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    out = _cache_dir() / f"{key[:16]}-{path.stem}.sqlite"
    if out.is_file():
        os.utime(out)  # recently used: least-recently-used eviction spares it
        return out
    with folder_for(out.parent):  # a failed export leaves no empty nsys-export/
        tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.sqlite")
        timeout = timeout_s or float(os.environ.get("TRACEKIT_NSYS_TIMEOUT", EXPORT_TIMEOUT_S))
        cmd = [
            nsys,
            "export",
            "--type",
            "sqlite",
            "--force-overwrite",
            "true",
            "--output",
            str(tmp),
            str(path),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            tmp.unlink(missing_ok=True)
            raise TraceFormatError(
                f"{path}: `nsys export` did not finish within {timeout:.0f} s (set "
                "TRACEKIT_NSYS_TIMEOUT to wait longer, or export it yourself)"
            ) from None
        except BaseException:  # Ctrl-C: nsys is killed, its partial output goes too
            tmp.unlink(missing_ok=True)
            raise
        if proc.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise TraceFormatError(
                f"{path}: `nsys export` failed (exit {proc.returncode}): "
                f"{lines[-1] if lines else 'no output'}"
            )
        os.replace(tmp, out)
    return out
