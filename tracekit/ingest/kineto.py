"""Chrome/Kineto JSON (torch.profiler export_chrome_trace, tensorboard_trace_handler) → store."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson

from tracekit import sqlfile
from tracekit.ingest.common import (
    STAGING_TABLE,
    EventWriter,
    IngestStats,
    TraceInfo,
    add_thread,
    insert_many,
    int64_or_none,
)
from tracekit.ingest.json_scan import (
    EventsArray,
    ScanResult,
    UnexpectedShape,
    document_size,
    exact_cut,
    iter_event_chunks,
    likely_cut,
    locate_events_array,
    write_part,
)
from tracekit.progress import NO_PROGRESS, Progress
from tracekit.redact import redact_value
from tracekit.store.literals import string_literal

# Category → kind. Old (2021) Kineto used Operator/Runtime/Kernel/Memcpy/Memset.
CATEGORY_KINDS = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "range",
    "gpu_user_annotation": "gpu_range",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "python_function": "python",
    "python": "python",
    "cuda_sync": "sync",
    "cpu_instant_event": "mark",
    "mtia_runtime": "runtime",
}
GPU_SIDE = {"kernel", "memcpy", "memset", "gpu_range"}
# A sync event on a stream is GPU-side; host-side cuda_sync has a numeric host tid.
_FLOW_PHASES = {"s", "t", "f"}
_NS_PER_US = 1000.0


def _to_ns(us: float) -> int:
    """µs -> ns without float rounding of large values: epoch-µs timestamps (~1.7e15) times
    1000 exceed 2**53, so the whole and fractional parts are scaled apart."""
    if isinstance(us, int):
        return us * 1000
    whole = int(us)
    return whole * 1000 + round((us - whole) * _NS_PER_US)


_INT64_MAX = 2**63 - 1
_INT32 = 2**31
_DIGITS = re.compile(r"-?[0-9]+")


class _Threads:
    """Maps Kineto pid/tid (ints, or strings like 'stream 7' in old traces) to integers."""

    def __init__(self) -> None:
        self.string_ids: dict[str, int] = {}

    def to_int(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int) and -_INT64_MAX <= value <= _INT64_MAX:
            return value
        if isinstance(value, float) and math.isfinite(value) and abs(value) < 2**63:
            return int(value)
        text = str(value)
        digits = text.rsplit(" ", 1)[-1]
        if _DIGITS.fullmatch(digits) and abs(int(digits)) <= _INT64_MAX:
            return int(digits)
        # Non-numeric labels ('Spans', 'PyTorch Profiler') get stable negative ids.
        return -self.string_ids.setdefault(text, len(self.string_ids) + 1)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return None


def _int_arg(args: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        v = args.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _INT64_MAX:
            return v
        if isinstance(v, float) and math.isfinite(v) and abs(v) < 2**63:
            return int(v)
    return None


ENGINE_ENV = "TRACEKIT_KINETO_ENGINE"  # "python" forces the reference mapper


def ingest(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    trace_id: int,
    scratch: Path | None = None,
    progress: Progress = NO_PROGRESS,
) -> TraceInfo:
    """Map every event of a Chrome/Kineto trace into `events` (or its staging table, see
    tracekit.ingest.common.STAGING_TABLE: tracekit.store.derive moves the rows) and `threads`.

    Fast path: the traceEvents array is copied out byte for byte and parsed by DuckDB's
    read_json (C++, both cores), and kineto.sql maps the complete events in SQL; the few
    other events (metadata, instants, begin/end pairs) go through the Python mapper. When
    DuckDB cannot read the events (NaN in a field it parses, duplicate keys, non-object
    elements), the Python mapper reads the whole file instead, and gives the exact error
    when the file is broken. `scratch` is a path prefix for the temporary files (next to
    the store being built); event_id is the event's 1-based position in traceEvents.
    """
    if os.environ.get(ENGINE_ENV, "duckdb") != "python":
        with _scratch_file(scratch) as events_json, contextlib.suppress(_DuckDBCannotRead):
            return _ingest_duckdb(con, path, trace_id, events_json, progress)
    # The events are acyclic dicts freed chunk by chunk: the cyclic collector finds nothing to
    # free, yet its passes over millions of young objects cost 3x the parse (docs/decisions.md).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _ingest_python(con, path, trace_id, progress)
    finally:
        if enabled:
            gc.enable()


class _DuckDBCannotRead(Exception):
    """The fast path cannot take this file: the Python mapper reads it instead."""


@contextlib.contextmanager
def _scratch_file(prefix: Path | None) -> Iterator[Path]:
    """The scratch path for a gzipped trace's unzipped events array (the parts parsed go
    beside it, under the same prefix); removed afterwards."""
    own_dir = None
    if prefix is None:
        own_dir = Path(tempfile.mkdtemp(prefix="tracekit-"))
        prefix = own_dir / "scratch"
    events_json = Path(f"{prefix}.events.json")
    try:
        yield events_json
    finally:
        with contextlib.suppress(FileNotFoundError):
            events_json.unlink()
        if own_dir is not None:
            with contextlib.suppress(OSError):
                own_dir.rmdir()


# Constants of this module only (never trace data), so they can be SQL literals.
_KIND_CASE = (
    "CASE x.cat_l "
    + " ".join(f"WHEN '{cat}' THEN '{kind}'" for cat, kind in sorted(CATEGORY_KINDS.items()))
    + " ELSE 'other' END"
)
_CLEANUP = (
    "DROP VIEW IF EXISTS _kineto_placed",
    "DROP VIEW IF EXISTS _kineto_fated",
    "DROP VIEW IF EXISTS _kineto_rows",
    "DROP TABLE IF EXISTS _kineto_instants",
    "DROP TABLE IF EXISTS _kineto_be",
    "DROP TABLE IF EXISTS _kineto_pairs",
    "DROP TABLE IF EXISTS _kineto_paired",
    "DROP TABLE IF EXISTS _kineto_meta",
    "DROP TABLE IF EXISTS _kineto_raw",
    "DROP TABLE IF EXISTS _kineto_rare",
    "DROP TABLE IF EXISTS _kineto_labels",
    "DROP TABLE IF EXISTS _kineto_labelled",
    "DROP TABLE IF EXISTS _kineto_relabel",
)


def _ingest_duckdb(con: duckdb.DuckDBPyConnection, path: Path, trace_id: int,
                   events_json: Path, progress: Progress) -> TraceInfo:  # fmt: skip
    scan = ScanResult()
    part_prefix = str(events_json).removesuffix(".events.json")
    sql = _sql_sections(trace_id)
    stats = IngestStats()
    try:
        size = document_size(path)
        progress.step("parsing events", total=size)
        array = None
        try:
            array = locate_events_array(path, events_json, scan)
            if array is None:
                raise _DuckDBCannotRead("unexpected document shape")
            con.execute(sql["setup"])
            groups = _load_chunks(con, array, part_prefix, sql, progress.update)
            progress.update(size)
        except (duckdb.InvalidInputException, duckdb.ConversionException, OSError,
                UnexpectedShape) as e:  # fmt: skip
            # (OSError: no room for the scratch copy, say: the Python mapper needs none)
            raise _DuckDBCannotRead(str(e)) from None
        finally:  # parsed: the copy is no longer needed
            if array is not None:
                array.close()
            with contextlib.suppress(FileNotFoundError):
                events_json.unlink()
        labels = _label_ids(groups)
        if labels:  # (one Arrow batch: a parameter per row costs ~1 ms here)
            insert_many(con, "_kineto_labels", [(label, -ident) for label, ident in labels.items()])
        rare = 0
        for fate, reason, _, _, n, _ in groups:  # (several groups per fate: one per label)
            if fate == "python":
                rare += n
            else:
                _count(stats, fate, reason, n)
        if rare:
            progress.step("mapping metadata, instants and begin/end pairs")
            _map_rare(con, sql, stats)
        if labels:
            con.execute(sql["labels"])
    except BaseException:
        con.execute(f"DROP TABLE IF EXISTS {STAGING_TABLE}")
        raise
    finally:
        for statement in _CLEANUP:
            con.execute(statement)
    return _trace_info(scan.top, stats)


# Bytes of the events array parsed per read_json call: the parse holds one chunk, not the
# file, in memory (a whole 1e6-event file took 290 MB). A chunk of 64 MB (~240k events, two
# of DuckDB's row groups) keeps both cores busy in the mapping; 32 MB ones mapped 1.7x slower.
CHUNK_BYTES = 64 * 1024 * 1024
_MAX_PARTS = 8  # files parsed at once per chunk: one per DuckDB thread, up to this
_Fates = dict[tuple[str, str | None, str | None, str | None], list[int]]
_Cut = tuple[int, int] | None


def _sql_sections(trace_id: int) -> dict[str, str]:
    """kineto.sql's blocks by name, the trace's constants spliced in (the chunk's later)."""
    constants = {"kind_case": _KIND_CASE, "trace_id": str(int(trace_id))}
    return {
        b.name: b.spliced(**{k: v for k, v in constants.items() if k in dict(b.splices)})
        for b in sqlfile.load("tracekit.ingest", "kineto.sql").blocks
    }


# How far past a chunk the unzip must be before the chunk is cut: room for the element
# boundary after its last part (likely_cut's first windows).
UNZIP_CUT_ROOM = 8 * 1024 * 1024


def _load_chunks(con: duckdb.DuckDBPyConnection, array: EventsArray, part_prefix: str,
                 sql: dict[str, str],
                 progress: Callable[[int], None]) -> list[tuple[Any, ...]]:  # fmt: skip
    """Parse and map the events array chunk by chunk, in order, into the tables of kineto.sql;
    return (fate, reason, pid_label, tid_label, count, first event_id) groups.

    A chunk is cut into one part per DuckDB thread, read in parallel. A part is cut where
    likely_cut finds an element boundary; when the chunk then fails to parse, a cut may be
    wrong, so the chunk is cut again by exact_cut and parsed once more (a second failure is
    the file's: the caller falls back to the Python mapper). While a gzip is still being
    unzipped, a chunk is cut only within the bytes already written, and never runs to the
    array's end (not known yet): when no cut is found there, it waits for more.
    """
    n_parts = min(max(_setting(con, "threads", 1), 1), _MAX_PARTS)
    part_bytes = max(CHUNK_BYTES // n_parts, 1)  # (once the end is known: _even_parts)
    files = [Path(f"{part_prefix}.chunk{i}.json") for i in range(n_parts)]
    kept = bool(_setting(con, "preserve_insertion_order", True))
    restore = f"SET preserve_insertion_order = {kept}"
    fates: _Fates = {}
    done = 0  # elements before this chunk
    start: int | None = array.start + 1  # the byte after the array's '['
    try:
        with open(array.path, "rb") as src:

            def likely(pos: int) -> _Cut:
                return likely_cut(src, pos + part_bytes, array.end)

            def exact(pos: int) -> _Cut:
                return exact_cut(src, pos, pos + part_bytes)

            while start is not None:
                complete = array.wait_for(start + CHUNK_BYTES + UNZIP_CUT_ROOM)
                while True:
                    if complete:
                        part_bytes = _even_parts(array.end - start, n_parts)
                    cuts = _cuts(start, n_parts, likely)
                    if complete or cuts[-1] is not None:
                        break
                    # no boundary in what is written yet
                    complete = array.wait_for(array.end + CHUNK_BYTES + UNZIP_CUT_ROOM)
                try:
                    _parse_parts(con, src, files, start, cuts, array.end, done)
                except duckdb.InvalidInputException:
                    if cuts == [None]:
                        raise
                    cuts = _cuts(start, n_parts, exact)
                    if not array.complete and cuts[-1] is None:  # (what is written ran out)
                        array.wait_for(sys.maxsize)
                        cuts = _cuts(start, n_parts, exact)
                    _parse_parts(con, src, files, start, cuts, array.end, done)
                finally:
                    con.execute(restore)  # (the mapping measured 1.5x slower with order kept)
                done += _map_chunk_rows(con, sql, fates)
                start = cuts[-1][1] if cuts[-1] is not None else None
                array.release(start or array.end)  # (parsed: never cut again)
                progress(start or array.end)
    finally:
        for done_with in files:
            with contextlib.suppress(FileNotFoundError):
                done_with.unlink()
    return [(*key, n, first) for key, (n, first) in fates.items()]


def _even_parts(rest: int, n_parts: int) -> int:
    """Bytes per part once the array's end is known: the parts of a chunk of CHUNK_BYTES,
    and even parts of a shorter rest, so each thread parses its share (a 35 MB array cut at
    32 MB parsed in 0.16-0.18 s, its halves in 0.10 s)."""
    if rest >= CHUNK_BYTES:
        return max(CHUNK_BYTES // n_parts, 1)
    return max(-(-rest // n_parts), 1)


def _setting(con: duckdb.DuckDBPyConnection, name: str, default: Any) -> Any:
    row = con.execute(f"SELECT current_setting('{name}')").fetchone()
    return row[0] if row else default


def _cuts(start: int, n_parts: int, cut: Callable[[int], _Cut]) -> list[_Cut]:
    """Up to n_parts cuts from `start`, each (where a part ends, where the next begins); a
    None last means the last part runs to the array's end."""
    cuts: list[_Cut] = []
    pos = start
    while len(cuts) < n_parts:
        found = cut(pos)
        cuts.append(found)
        if found is None:
            break
        pos = found[1]
    return cuts


def _parse_parts(con: duckdb.DuckDBPyConnection, src: Any, files: list[Path], start: int,
                 cuts: list[_Cut], end: int, done: int) -> None:  # fmt: skip
    """Parse the array's parts from `start` (to each cut; after no cut, to the array's end)."""
    pos = start
    for path, cut in zip(files, cuts, strict=False):
        write_part(src, path, pos, cut[0] if cut is not None else end, close=cut is not None)
        pos = cut[1] if cut is not None else end
    listed = ", ".join(string_literal(str(p)) for p in files[: len(cuts)])
    # The rows' order is their position: kept by the parse.
    con.execute("SET preserve_insertion_order = true")
    chunk = sqlfile.load("tracekit.ingest", "kineto.sql")["chunk"]
    con.execute(chunk.spliced(chunk_files=f"[{listed}]", offset=str(int(done))))


def _map_chunk_rows(con: duckdb.DuckDBPyConnection, sql: dict[str, str], fates: _Fates) -> int:
    """Map the parsed chunk into the staging tables, add its fates; return its elements."""
    groups = con.execute(sql["fates"]).fetchall()
    placed = [g for g in groups if g[0] == "placed"]
    if placed:
        con.execute(sql["placed"])
    if any(g[2] is not None or g[3] is not None for g in placed):
        con.execute(sql["labelled"])
    if any(g[0] == "python" for g in groups):
        con.execute(sql["rare"])
    for *key, n, first in groups:
        total = fates.setdefault(tuple(key), [0, first])
        total[0] += n
        total[1] = min(total[1], first)
    return sum(g[4] for g in groups)


def _label_ids(groups: list[tuple[Any, ...]]) -> dict[str, int]:
    """Ids for non-integer pid/tid labels as the Python mapper gives them: 1, 2, ... by first
    appearance, a pid before the tid of the same event (stored negated)."""
    first: dict[str, int] = {}
    for *_, pid_text, tid_text, _, min_id in groups:
        for label, pos in ((pid_text, min_id * 2), (tid_text, min_id * 2 + 1)):
            if label is not None and pos < first.get(label, pos + 1):
                first[label] = pos
    return {label: i for i, label in enumerate(sorted(first, key=first.__getitem__), 1)}


def _count(stats: IngestStats, fate: str, reason: str | None, n: int) -> None:
    if fate == "placed":
        stats.events += n
    elif fate == "skipped":
        stats.skipped[str(reason)] += n
    elif fate == "elsewhere":
        stats.elsewhere[str(reason)] += n


# Phases of the rare rows that kineto.sql maps (the rest are counted only).
_INSTANT_PHASES = {"i", "I", "R"}
_PAIR_PHASES = {"B", "E"}


def _map_rare(con: duckdb.DuckDBPyConnection, sql: dict[str, str], stats: IngestStats) -> None:
    """Map the rare rows (kineto.sql's _kineto_rare) in SQL, as the Python mapper would:
    instants and begin/end pairs into the staging table, metadata into `threads`. A section
    runs only when its phases are there (each costs a few ms to plan, rows or not)."""
    phases = dict(con.execute("SELECT ph, count(*) FROM _kineto_rare GROUP BY ph").fetchall())
    if phases.keys() & _INSTANT_PHASES:
        for fate, reason, n in con.execute(sql["instants"]).fetchall():
            _count(stats, fate, reason, n)
    if phases.keys() & _PAIR_PHASES:
        for fate, reason, n in con.execute(sql["pairs"]).fetchall():
            _count(stats, fate, reason, n)
        for fate, reason, _, _, n, _ in con.execute(sql["fates"]).fetchall():  # (the pairs')
            _count(stats, fate, reason, n)
        con.execute(sql["placed"])
        con.execute(sql["labelled"])
    if "M" in phases:
        odd = con.execute(sql["metadata"]).fetchall()
        if odd:  # labels only Python's str() spells (floats, lists, objects): a handful at most
            con.execute(
                "UPDATE _kineto_meta SET label = l.label FROM "
                "(SELECT unnest($ids) AS event_id, unnest($labels) AS label) l "
                "WHERE _kineto_meta.event_id = l.event_id",
                {"ids": [r[0] for r in odd], "labels": [str(_load_value(r[1])) for r in odd]},
            )
        con.execute(sql["threads"])
    for ph, n in phases.items():
        if ph == "M":
            stats.elsewhere["metadata (threads table)"] += n
        elif ph not in _INSTANT_PHASES | _PAIR_PHASES:
            stats.skipped["no phase" if ph is None else f"unsupported phase {ph!r}"] += n


def _load_value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN, Infinity
        import json

        return json.loads(text)


def _ingest_python(con: duckdb.DuckDBPyConnection, path: Path, trace_id: int,
                   progress: Progress = NO_PROGRESS) -> TraceInfo:  # fmt: skip
    writer = EventWriter(con, trace_id)
    threads = _Threads()
    names: dict[tuple[int | None, int | None], list[str | None]] = {}
    begin_stacks: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]] = {}
    scan = ScanResult()
    position = 1
    progress.step("parsing events (Python mapper)", total=path.stat().st_size)
    for chunk in iter_event_chunks(path, scan, progress=progress.update):
        cols: dict[str, list[Any]] = {k: [] for k in _COLS}
        ids = range(position, position + len(chunk))
        position += len(chunk)
        _map_chunk(chunk, ids, cols, threads, names, begin_stacks, writer)
        writer.add_columns(cols)
    _finish(con, trace_id, writer, names, begin_stacks)
    return _trace_info(scan.top, writer.stats)


def _finish(con: duckdb.DuckDBPyConnection, trace_id: int, writer: EventWriter,
            names: dict[tuple[int | None, int | None], list[str | None]],
            begin_stacks: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]],
            ) -> None:  # fmt: skip
    for stack in begin_stacks.values():
        if stack:  # (a thread whose pairs all closed leaves an empty stack: no count of 0)
            writer.skip("begin without end", len(stack))
    writer.flush()
    add_thread(
        con,
        trace_id,
        [(pid, tid, v[0], v[1]) for (pid, tid), v in sorted(names.items(), key=_sort_key)],
    )


def _map_chunk(chunk: list[Any], ids: Iterable[int], cols: dict[str, list[Any]],
               threads: _Threads, names: dict[tuple[int | None, int | None], list[str | None]],
               begin_stacks: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]],
               writer: EventWriter) -> None:  # fmt: skip
    """Map parsed events; `ids` are their positions in traceEvents (their event_ids)."""
    stats = writer.stats
    for ev, event_id in zip(chunk, ids, strict=True):
        if not isinstance(ev, dict):
            writer.skip("not an object")
            continue
        # Labels get ids by first appearance, pid before tid, whatever the event (kineto.sql).
        threads.to_int(ev.get("pid"))
        threads.to_int(ev.get("tid"))
        ph = ev.get("ph")
        if not isinstance(ph, str):  # a list or dict here is not hashable
            writer.skip("no phase")
            continue
        if ph == "X":
            _add_complete(ev, event_id, cols, threads, writer)
        elif ph in _FLOW_PHASES:
            stats.elsewhere["flow (links kept as correlation ids)"] += 1
        elif ph == "M":
            _add_metadata(ev, names, threads, stats)
        elif ph in ("i", "I", "R"):
            _add_instant(ev, event_id, cols, threads, writer)
        elif ph in ("B", "E"):
            _pair_begin_end(ev, event_id, begin_stacks, cols, threads, writer)
        elif ph == "C":
            writer.skip("counter event")
        else:
            writer.skip(f"unsupported phase {ph!r}" if isinstance(ph, str) else "no phase")


_COLS = ("event_id", "kind", "name", "start_ns", "end_ns", "pid", "tid", "device", "stream",
         "correlation", "external_id", "args")  # fmt: skip


def _times(ev: dict[str, Any], writer: EventWriter, need_dur: bool) -> tuple[int, int] | None:
    ts = _number(ev.get("ts"))
    if ts is None:
        raw = ev.get("ts")
        numeric = isinstance(raw, (int, float)) and not isinstance(raw, bool)
        writer.skip("non-finite ts" if numeric else "missing or non-numeric ts")
        return None
    if ts < 0:
        writer.skip("negative ts")
        return None
    dur = 0.0
    if need_dur:
        d = _number(ev.get("dur"))
        if d is None:
            writer.skip("missing or non-numeric dur")
            return None
        if d < 0:
            writer.skip("negative dur")
            return None
        dur = d
    start = _to_ns(ts)
    end = start + _to_ns(dur)
    if end > _INT64_MAX:
        writer.skip("ts or dur out of range")
        return None
    return start, end


def _append(cols: dict[str, list[Any]], event_id: int, kind: str, name: str, start: int, end: int,
            pid: int | None, tid: int | None, device: int | None, stream: int | None,
            correlation: int | None, external_id: int | None,
            args: dict[str, Any] | None) -> None:  # fmt: skip
    cols["event_id"].append(event_id)
    cols["kind"].append(kind)
    cols["name"].append(name)
    cols["start_ns"].append(start)
    cols["end_ns"].append(end)
    cols["pid"].append(pid)
    cols["tid"].append(tid)
    cols["device"].append(device)
    cols["stream"].append(stream)
    cols["correlation"].append(correlation)
    cols["external_id"].append(external_id)
    cols["args"].append(_dumps(args) if args else None)


def _dumps(args: dict[str, Any]) -> str:
    try:
        return orjson.dumps(args).decode()
    except TypeError:  # (orjson.JSONEncodeError) ints beyond 64 bits, lone surrogates, depth
        pass
    try:
        clean = _clean(args)
    except RecursionError:
        return _TOO_DEEP
    try:
        return orjson.dumps(clean).decode()
    except TypeError:  # nested past orjson's 254 levels: the standard library's encoder
        pass
    try:
        return json.dumps(clean, ensure_ascii=False)
    except (RecursionError, ValueError):
        return _TOO_DEEP


# args that no encoder writes back (nested past Python's recursion limit): kept as a note
_TOO_DEEP = '{"tracekit": "args nested too deep to store"}'


def _clean(value: Any) -> Any:
    """`value` with integers beyond 64 bits as strings and lone surrogates (which UTF-8
    cannot hold) replaced in every string, keys included."""
    if isinstance(value, str):
        return _utf8(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
        return str(value)
    if isinstance(value, dict):
        return {_utf8(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _utf8(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate: "?"
    return text


def _add_complete(ev: dict[str, Any], event_id: int, cols: dict[str, list[Any]],
                  threads: _Threads, writer: EventWriter) -> None:  # fmt: skip
    cat = ev.get("cat")
    cat_l = cat.lower() if isinstance(cat, str) else ""
    if cat_l == "trace":
        writer.stats.elsewhere["profiler span (traces row)"] += 1
        return
    times = _times(ev, writer, need_dur=True)
    if times is None:
        return
    kind = CATEGORY_KINDS.get(cat_l, "other")
    args = ev.get("args")
    if not isinstance(args, dict):
        args = {}
    name = ev.get("name")
    if not isinstance(name, str):
        name = "" if name is None else str(name)
    pid = threads.to_int(ev.get("pid"))
    tid = threads.to_int(ev.get("tid"))
    correlation = _int_arg(args, "correlation")
    external_id = _int_arg(args, "External id", "external id")
    extra = dict(args)
    if cat_l and kind == "other":
        extra["cat"] = cat
    device = stream = None
    if kind in GPU_SIDE or (kind == "sync" and "stream" in args):
        device = _int_arg(args, "device")
        if device is None:
            device = pid
        if device is not None and not -_INT32 <= device < _INT32:
            device = None  # the column is 32-bit
        stream = _int_arg(args, "stream")
        if stream is None:
            stream = tid
        pid, tid = None, None  # GPU rows carry device/stream; the host side comes via launch_id
    _append(cols, event_id, kind, name, times[0], times[1], pid, tid, device, stream,
            correlation, external_id, extra)  # fmt: skip


def _add_instant(ev: dict[str, Any], event_id: int, cols: dict[str, list[Any]],
                 threads: _Threads, writer: EventWriter) -> None:  # fmt: skip
    times = _times(ev, writer, need_dur=False)
    if times is None:
        return
    name = ev.get("name")
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    extra = dict(args or {})
    if ev.get("cat"):
        extra["cat"] = ev.get("cat")
    pid = threads.to_int(ev.get("pid"))
    tid = threads.to_int(ev.get("tid"))
    _append(cols, event_id, "mark", name if isinstance(name, str) else str(name), times[0],
            times[0], pid, tid, None, None, None, None, extra)  # fmt: skip


def _pair_begin_end(ev: dict[str, Any], event_id: int,
                    stacks: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]],
                    cols: dict[str, list[Any]], threads: _Threads,
                    writer: EventWriter) -> None:  # fmt: skip
    """A B/E pair becomes one complete event with the begin's position as its event_id."""
    key = (_hashable(ev.get("pid")), _hashable(ev.get("tid")))
    if ev.get("ph") == "B":
        stacks.setdefault(key, []).append((event_id, ev))
        return
    stack = stacks.get(key)
    if not stack:
        writer.skip("end without begin")
        return
    begin_id, begin = stack.pop()
    t0 = _times(begin, writer, need_dur=False)
    t1 = _times(ev, writer, need_dur=False)
    if t0 is None or t1 is None:
        return
    merged = {**begin, "ph": "X", "dur": (t1[0] - t0[0]) / _NS_PER_US}
    if isinstance(ev.get("args"), dict):
        merged["args"] = {**(begin.get("args") or {}), **ev["args"]}
    _add_complete(merged, begin_id, cols, threads, writer)


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, type(None))) else repr(value)


def _add_metadata(ev: dict[str, Any], names: dict[tuple[int | None, int | None], list[str | None]],
                  threads: _Threads, stats: Any) -> None:  # fmt: skip
    kind = ev.get("name")
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    label = args.get("name") if isinstance(args, dict) else None
    pid = threads.to_int(ev.get("pid"))
    if kind == "process_name":
        names.setdefault((pid, None), [None, None])[0] = str(label)
    elif kind == "thread_name":
        tid = threads.to_int(ev.get("tid"))
        names.setdefault((pid, tid), [None, None])[1] = str(label)
    stats.elsewhere["metadata (threads table)"] += 1


def _sort_key(item: tuple[tuple[int | None, int | None], list[str | None]]) -> tuple[int, int]:
    (pid, tid), _ = item
    return (pid if pid is not None else -(2**62), tid if tid is not None else -(2**62))


_ENV_KEYS = frozenset(("env", "environ", "environment", "environment_variables"))


def _without_env(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_env(v) for k, v in value.items()
                if not (isinstance(k, str) and k.lower() in _ENV_KEYS)}  # fmt: skip
    if isinstance(value, list):
        return [_without_env(v) for v in value]
    return value


# Top-level keys of a Kineto trace kept in traces.metadata (the rest of the top level, such
# as a program's own `metadata` object, may carry anything: it stays in the trace file).
KEPT_METADATA = frozenset({
    "schemaVersion", "distributedInfo", "baseTimeNanoseconds", "displayTimeUnit",
    "cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version",
    "roctracer_version", "trace_id", "with_stack", "record_shapes", "profile_memory",
    "with_modules", "with_flops",
})  # fmt: skip


def _trace_info(top: dict[str, Any], stats: IngestStats) -> TraceInfo:
    devices = top.get("deviceProperties")
    dist_info = top.get("distributedInfo")
    dist: dict[str, Any] = dist_info if isinstance(dist_info, dict) else {}
    rank = dist.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 2**31:
        rank = None  # (traces.rank is INTEGER: 2^40 failed the build with the statement)
    clock_offset = int64_or_none(top.get("baseTimeNanoseconds"))  # (2^70, 1e300: none)
    schema = top.get("schemaVersion")
    version = f"kineto schema {schema}" if schema is not None else "chrome trace"
    # Only the facts that say what recorded the trace, never environment variables (at any
    # depth), with secret-shaped values removed as scrub removes them: `export --parquet`
    # copies this column as it is.
    kept = {k: v for k, v in top.items() if k in KEPT_METADATA}
    meta = redact_value(_without_env(kept))
    host = top.get("host_name") or top.get("hostname")
    return TraceInfo(
        format="kineto",
        host=host if isinstance(host, str) else None,
        tool_version=version,
        devices=devices if isinstance(devices, list) else [],
        rank=rank,
        clock_offset_ns=clock_offset,
        metadata=meta,
        stats=stats,
    )
