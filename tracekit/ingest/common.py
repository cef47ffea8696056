"""Shared by the ingestors: a column buffer that streams events into DuckDB in Arrow batches."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tracekit.store.literals import execute, row_literal

EVENT_KINDS = (
    "range",
    "gpu_range",
    "cpu_op",
    "python",
    "runtime",
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "osrt",
    "mark",
    "other",
)
GPU_KINDS = ("kernel", "memcpy", "memset", "gpu_range")
# An ingestor may leave its rows in this temp table (events' columns, extra ones ignored)
# instead of `events`: tracekit.store.derive then writes `events` once, derived, instead of twice.
STAGING_TABLE = "_events_raw"

_COLUMNS: list[tuple[str, str]] = [  # (name, Arrow type name)
    ("event_id", "int64"),
    ("kind", "string"),
    ("name", "string"),
    ("start_ns", "int64"),
    ("end_ns", "int64"),
    ("pid", "int64"),
    ("tid", "int64"),
    ("device", "int32"),
    ("stream", "int64"),
    ("correlation", "int64"),
    ("external_id", "int64"),
    ("args", "string"),
]


@dataclass
class IngestStats:
    """What one ingest read, wrote and could not place."""

    events: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # read, not placed anywhere
    elsewhere: Counter[str] = field(default_factory=Counter)  # placed in another table

    @property
    def skipped_count(self) -> int:
        return sum(self.skipped.values())


class EventWriter:
    """Buffers events column-wise and appends them to `events` every `batch_rows` rows.

    Memory stays bounded by one batch whatever the size of the trace. `args` is an
    already-encoded JSON string (or None) so the hot path never builds nested Arrow types.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, trace_id: int, batch_rows: int = 200_000,
                 table: str = "events") -> None:  # fmt: skip
        self.con = con
        self.table = table
        self.trace_id = trace_id
        self.batch_rows = batch_rows
        self.next_id = 1
        self.stats = IngestStats()
        self._cols: dict[str, list[Any]] = {name: [] for name, _ in _COLUMNS}

    def add(
        self,
        kind: str,
        name: str,
        start_ns: int,
        end_ns: int,
        pid: int | None = None,
        tid: int | None = None,
        device: int | None = None,
        stream: int | None = None,
        correlation: int | None = None,
        external_id: int | None = None,
        args: str | None = None,
    ) -> int:
        event_id = self.next_id
        self.next_id += 1
        c = self._cols
        c["event_id"].append(event_id)
        c["kind"].append(kind)
        c["name"].append(name)
        c["start_ns"].append(start_ns)
        c["end_ns"].append(end_ns)
        c["pid"].append(pid)
        c["tid"].append(tid)
        c["device"].append(device)
        c["stream"].append(stream)
        c["correlation"].append(correlation)
        c["external_id"].append(external_id)
        c["args"].append(args)
        if len(c["event_id"]) >= self.batch_rows:
            self.flush()
        return event_id

    def add_columns(self, columns: dict[str, list[Any]]) -> None:
        """Append a whole batch at once: columns keyed like _COLUMNS, event_id included (the
        Kineto ingestor numbers events by their position in the file)."""
        self.flush()
        n = len(columns["kind"])
        if n:
            self._write(columns, n)

    def skip(self, reason: str, count: int = 1) -> None:
        self.stats.skipped[reason] += count

    def flush(self) -> None:
        n = len(self._cols["event_id"])
        if n:
            self._write(self._cols, n)
            self._cols = {name: [] for name, _ in _COLUMNS}

    def _write(self, cols: dict[str, list[Any]], n: int) -> None:
        """One Arrow table per batch, whatever its size: Python values bound as parameters
        cost 0.1-0.3 ms each here (DuckDB's conversion retries the pandas import per value
        where pandas is absent), so 2,450 instant rows once took 13.7 s as rows."""
        import pyarrow as pa

        arrays = {}
        for name, t in _COLUMNS:
            try:
                arrays[name] = pa.array(cols[name], type=getattr(pa, t)())
            except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): replaced
                arrays[name] = pa.array([_utf8(v) for v in cols[name]], type=getattr(pa, t)())
        batch = pa.table(arrays)
        self.con.register("_tk_batch", batch)
        execute(
            self.con,
            f"""
            INSERT INTO {self.table} (trace_id, event_id, kind, name, start_ns, end_ns, dur_ns,
                                      pid, tid, device, stream, correlation, external_id, args)
            SELECT $trace_id, event_id, kind, name, start_ns, end_ns, end_ns - start_ns, pid,
                   tid, device, stream, correlation, external_id, args::JSON
            FROM _tk_batch
            """,
            {"trace_id": self.trace_id},
        )
        self.con.unregister("_tk_batch")
        self.stats.events += n


def add_thread(
    con: duckdb.DuckDBPyConnection,
    trace_id: int,
    rows: list[tuple[int | None, int | None, str | None, str | None]],
) -> None:
    """Insert (pid, tid, process_name, thread_name) rows into `threads` (as one Arrow table)."""
    insert_many(con, "threads", [(trace_id, *r) for r in rows])


def _utf8(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")  # (lone surrogates)
    return value


def insert_many(
    con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[tuple[Any, ...]]
) -> None:
    """INSERT rows (all columns, in order). Up to LITERAL_ROWS rows (thread names, labels,
    a capture's attributes) go in as literal VALUES (tracekit.store.literals): no bound
    Python value, and no pyarrow, whose import costs 0.07 s and whose arrays built from
    Python lists import pandas where installed (0.3 s). More go as one Arrow batch
    (executemany cost milliseconds a row: 200k thread labels took minutes)."""
    if not rows:
        return
    if len(rows) > LITERAL_ROWS:
        import pyarrow as pa

        try:
            batch = pa.table(
                {f"c{i}": pa.array([_utf8(r[i]) for r in rows]) for i in range(len(rows[0]))}
            )
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            batch = None  # mixed types in a column: as literals below
        if batch is not None:
            con.register("_tk_rows", batch)
            try:
                con.execute(f"INSERT INTO {table} SELECT * FROM _tk_rows")
            finally:
                con.unregister("_tk_rows")
            return
    for k in range(0, len(rows), LITERAL_ROWS):
        values = ", ".join(row_literal([_utf8(v) for v in r]) for r in rows[k : k + LITERAL_ROWS])
        con.execute(f"INSERT INTO {table} VALUES {values}")


# Rows inserted as literals at most (0.05 s of parsing; Arrow's import alone is 0.07 s).
LITERAL_ROWS = 2000


@dataclass
class TraceInfo:
    """What an ingestor learned about the trace as a whole; becomes the `traces` row."""

    format: str
    tool_version: str | None = None
    host: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    rank: int | None = None
    clock_offset_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    stats: IngestStats = field(default_factory=IngestStats)
    warnings: list[str] = field(default_factory=list)


def int64_or_none(value: Any) -> int | None:
    """`value` (an int, an integral float, or decimal digits) as a signed 64-bit integer; None
    when it is not one. Trace files hold whatever a writer stored (2^200, 1e300, text), and a
    store column is BIGINT: a value past it failed the build with a traceback."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 40:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if -(2**63) <= value < 2**63 else None
