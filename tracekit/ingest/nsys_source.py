"""Opening an nsys SQLite export read-only: probe it with sqlite3, then expose it to DuckDB.

The probe (Python's sqlite3, `mode=ro`) validates the file, lists tables and columns, counts
rows and reads the small key/value tables; its errors are turned into one-line
TraceFormatErrors. The bulk read then goes through DuckDB's sqlite_scanner extension
(ATTACH ... READ_ONLY), or, when that cannot load or cannot decode the file, through a copy of
the needed tables made with sqlite3 into a temporary DuckDB file attached under the same
alias, so the mapping SQL is the same on both paths.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit.errors import TraceFormatError
from tracekit.ingest.bounded_strings import MAX_CHARS, TRUNCATED_MARK
from tracekit.store.literals import string_literal

if TYPE_CHECKING:
    import pyarrow as pa

CHUNK_ROWS = 200_000
# Tables whose presence marks a file as an nsys export (besides StringIds).
NSYS_MARKERS = (
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "PROCESSES",
    "ThreadNames",
    "ANALYSIS_DETAILS",
    "TARGET_INFO_SESSION_START_TIME",
    "OSRT_API",
)
# The text that becomes names, NVTX messages and domain names (the environment table's long
# values are never read, so they need no cut).
_NAME_COLUMNS = {"StringIds": ("value",), "NVTX_EVENTS": ("text", "jsonText")}
_DECL_TYPES = {"INTEGER": "int64", "INT": "int64", "REAL": "float64"}  # else string


@dataclass
class Probe:
    """What sqlite3 saw in the file: tables, their columns, row counts and max rowid."""

    path: Path
    columns: dict[str, list[str]] = field(default_factory=dict)
    decl: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    max_rowid: dict[str, int] = field(default_factory=dict)
    long_text: dict[str, list[str]] = field(default_factory=dict)  # columns past MAX_CHARS

    def has(self, table: str) -> bool:
        """True when the table exists and has at least one row (missing = empty)."""
        return self.rows.get(table, 0) > 0

    def col(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, ())


def wal_mode(path: Path) -> bool:
    """Whether the SQLite header says write-ahead log (file format versions 2 at 18/19)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and (head[18] == 2 or head[19] == 2)


_WAL_HEADER_BYTES = 32  # a WAL file of its header alone holds no committed page


def refuse_pending_wal(path: Path) -> None:
    """A WAL-mode export is read immutable (nothing written beside it), which ignores its
    `-wal` file: pages committed there would be missing from every figure. Refuse instead."""
    if not wal_mode(path):
        return
    wal = path.with_name(path.name + "-wal")
    try:
        size = wal.stat().st_size
    except OSError:
        return  # no WAL beside it: every committed page is in the file
    if size > _WAL_HEADER_BYTES:
        raise TraceFormatError(
            f"{path}: {wal.name} holds {size} bytes of committed changes not yet in the file "
            "(is a writer still open?); read partly it would give wrong figures: checkpoint it "
            f"(sqlite3 {path.name} 'PRAGMA wal_checkpoint(TRUNCATE)') or ingest a copy made with "
            f"sqlite3 {path.name} '.backup copy.sqlite'"
        )


def _uri(path: Path) -> str:
    # A rollback-journal export read `mode=ro` leaves nothing beside it and still sees a
    # writer's lock ("is nsys still writing it?"); a WAL-mode one would get -wal/-shm files,
    # so it is read immutable=1 (as is any file in a folder SQLite could not write anyway).
    immutable = wal_mode(path) or not os.access(path.parent, os.W_OK)
    q = "mode=ro&immutable=1" if immutable else "mode=ro"
    return f"{path.resolve().as_uri()}?{q}"


def sqlite_error(path: Path, e: BaseException) -> TraceFormatError:
    """One clear line for the ways an SQLite file can fail to open or read."""
    msg = str(e)
    low = msg.lower()
    if "not a database" in low:
        return TraceFormatError(f"{path}: not an SQLite database, or its header is damaged ({msg})")
    if "malformed" in low or "corrupt" in low or "disk i/o" in low:
        return TraceFormatError(
            f"{path}: the SQLite file is damaged or truncated ({msg}); re-export it with "
            "`nsys export --type sqlite`"
        )
    if "locked" in low or "busy" in low:
        return TraceFormatError(
            f"{path}: the file is locked by another process (is nsys still writing it?); "
            "wait for it to finish or ingest a copy"
        )
    return TraceFormatError(f"{path}: cannot read the SQLite file ({msg})")


@contextlib.contextmanager
def connect_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only sqlite3 connection that decodes bad UTF-8 instead of failing."""
    refuse_pending_wal(path)
    try:
        con = sqlite3.connect(_uri(path), uri=True, timeout=1.0)
    except sqlite3.Error as e:
        raise sqlite_error(path, e) from None
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        yield con
    except sqlite3.Error as e:
        raise sqlite_error(path, e) from None
    finally:
        con.close()


def probe(con: sqlite3.Connection, path: Path) -> Probe:
    """List tables/columns, count rows, and reject files that are not nsys exports."""
    p = Probe(path)
    names = [
        r[0]
        for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    if "StringIds" not in names or not any(t in names for t in NSYS_MARKERS):
        hint = " (nvprof .nvvp databases are not supported)" if "StringTable" in names else ""
        raise TraceFormatError(
            f"{path}: SQLite file is not an Nsight Systems export (no StringIds and nsys "
            f"tables){hint}; export a report with `nsys export --type sqlite`"
        )
    for name in names:
        info = con.execute(f'PRAGMA table_info("{_ident(name)}")').fetchall()
        p.columns[name] = [r[1] for r in info]
        p.decl[name] = [(r[2] or "").upper() for r in info]
        if name.startswith("ENUM_"):
            continue
        # count(*) walks every page: it also finds truncated files before the bulk read. The
        # longest value of each text column, in the same pass: one past MAX_CHARS is cut.
        texts = [c for c in p.columns[name] if c in _NAME_COLUMNS.get(name, ())]
        lengths = "".join(f', max(length("{_ident(c)}"))' for c in texts)
        row = con.execute(f'SELECT count(*){lengths} FROM "{_ident(name)}"').fetchone()
        p.rows[name] = row[0]
        long = [c for c, n in zip(texts, row[1:], strict=True) if (n or 0) > MAX_CHARS]
        if long:
            p.long_text[name] = long
        if p.rows[name] and "WITHOUT ROWID" not in _create_sql(con, name):
            p.max_rowid[name] = con.execute(f'SELECT max(rowid) FROM "{_ident(name)}"').fetchone()[
                0
            ]
    return p


def _ident(name: str) -> str:
    """A name for inside double quotes (a `"` doubled)."""
    return name.replace('"', '""')


def _create_sql(con: sqlite3.Connection, name: str) -> str:
    row = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return (row[0] or "").upper() if row else ""


def key_values(con: sqlite3.Connection, p: Probe, table: str) -> dict[str, str]:
    """name -> value of a key/value table (first value wins for repeated keys)."""
    if not p.col(table, "name") or not p.col(table, "value"):
        return {}
    out: dict[str, str] = {}
    for k, v in con.execute(f'SELECT name, value FROM "{_ident(table)}"'):
        out.setdefault(str(k), v)
    return out


def extension_path() -> Path | None:
    """The sqlite_scanner extension file shipped by the duckdb-extension-sqlite-scanner wheel."""
    spec = importlib.util.find_spec("duckdb_extension_sqlite_scanner")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    exact = base / "extensions" / f"v{duckdb.__version__}" / "sqlite_scanner.duckdb_extension"
    if exact.is_file():
        return exact
    return next(iter(sorted(base.rglob("sqlite_scanner.duckdb_extension"))), None)


def attach_scanner(con: duckdb.DuckDBPyConnection, path: Path, alias: str) -> None:
    """ATTACH the export read-only through sqlite_scanner (raises duckdb.Error if it cannot)."""
    ext = extension_path()
    if ext is None:
        raise duckdb.IOException("duckdb-extension-sqlite-scanner is not installed")
    con.execute(f"LOAD {string_literal(str(ext))}")
    con.execute(f"ATTACH {string_literal(str(path.resolve()))} AS {alias} (TYPE sqlite, READ_ONLY)")


class FallbackCopy:
    """Copies the needed tables with sqlite3 into a temp DuckDB file attached as `alias`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, alias: str) -> None:
        self.con = con
        self.alias = alias
        self.dir = tempfile.TemporaryDirectory(prefix="tracekit-nsys-")
        db = Path(self.dir.name) / "copy.duckdb"
        con.execute(f"ATTACH {string_literal(str(db))} AS {alias}")

    def copy(self, src: sqlite3.Connection, p: Probe, tables: list[str]) -> None:
        import pyarrow as pa  # (the fallback only: a store build otherwise never loads it)

        for table in tables:
            cols = p.columns[table]
            types = [pa.type_for_alias(_DECL_TYPES.get(d.split("(")[0], "string"))
                     for d in p.decl[table]]  # fmt: skip
            schema = pa.schema([("_rid", pa.int64())] + list(zip(cols, types, strict=True)))
            long = p.long_text.get(table, [])
            collist = ", ".join(
                f'CASE WHEN length("{_ident(c)}") > {MAX_CHARS} THEN substr("{_ident(c)}", 1, '
                f'{MAX_CHARS}) || \'{TRUNCATED_MARK}\' ELSE "{_ident(c)}" END AS "{_ident(c)}"'
                if c in long
                else f'"{_ident(c)}"'
                for c in cols
            )
            rid = "rowid" if table in p.max_rowid else "NULL"
            cur = src.execute(f'SELECT {rid}, {collist} FROM "{_ident(table)}"')
            created = False
            while rows := cur.fetchmany(CHUNK_ROWS):
                batch = _to_arrow(rows, schema)
                self.con.register("_tk_copy", batch)
                if not created:
                    self.con.execute(
                        f'CREATE TABLE {self.alias}."{_ident(table)}" AS FROM _tk_copy'
                    )
                    created = True
                else:
                    self.con.execute(f'INSERT INTO {self.alias}."{_ident(table)}" FROM _tk_copy')
                self.con.unregister("_tk_copy")

    def close(self) -> None:
        with contextlib.suppress(duckdb.Error):
            self.con.execute(f"DETACH {self.alias}")
        self.dir.cleanup()


def _to_arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    arrays = []
    for i, f in enumerate(schema):
        values = [r[i] for r in rows]
        try:
            arrays.append(pa.array(values, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            # A value that does not fit the declared type: keep it as text.
            arrays.append(pa.array([None if v is None else str(v) for v in values], pa.string()))
    return pa.Table.from_arrays(arrays, names=schema.names)
