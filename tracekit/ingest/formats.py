"""The trace formats tracekit reads: one registry that detection, caching, folder scanning,
scrubbing and the CLI consult. Adding a format is a module under `tracekit/ingest/` plus one
`TraceFormat` in `FORMATS` (or `register(...)` from outside, as the contract test does).

A format's `ingest` honours the ingestor contract: it inserts its events (through
`EventWriter`) and its `threads` rows for one trace and returns a `TraceInfo`; the store
then writes the `traces` row and runs the derivation (nesting, launches, stages, requests).
Formats are detected from content, never from the file name alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.atomic import check_input_file
from tracekit.errors import TraceFormatError

if TYPE_CHECKING:
    import duckdb

    from tracekit.ingest.common import TraceInfo
    from tracekit.progress import Progress

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 4096

Ingest = Callable[["duckdb.DuckDBPyConnection", Path, int, Path, "Progress"], "TraceInfo"]
Scrub = Callable[[Path, Path, Any, dict[str, int]], None]


@dataclass(frozen=True)
class TraceFormat:
    """One input format."""

    name: str  # stored in traces.format and capture.json
    description: str  # for error messages and docs
    suffixes: tuple[str, ...]  # file names a folder scan considers
    sniff: Callable[[Path, bytes], bool]  # from the file's first HEAD_BYTES bytes
    ingest: Ingest
    # DuckDB memory limit for building its store (bytes), None: the default.
    memory_limit: Callable[[Path], int | None] = lambda _path: None
    # Settings applied to the build's connection before ingest (e.g. allocator flushing).
    tune: Callable[[duckdb.DuckDBPyConnection], None] = lambda _con: None
    scrub: Scrub | None = None  # write a scrubbed copy: (source, tmp, options, removed)
    # In a folder scan, whether this file of the format is a trace (not any JSON, say).
    in_folder: Callable[[Path], bool] = lambda _path: True


# --- the built-in formats (their modules are imported only when used) ---------------------


def _ingest_nsys(con: Any, path: Path, trace_id: int, scratch: Path, progress: Any) -> Any:
    from tracekit.ingest import nsys  # lazy: a format's module when it is used

    return nsys.ingest(con, path, trace_id, progress=progress)


def _ingest_nsys_rep(con: Any, path: Path, trace_id: int, scratch: Path, progress: Any) -> Any:
    from tracekit.ingest import nsys  # lazy: a format's module when it is used

    progress.step("exporting the report to SQLite (nsys export)")
    return nsys.ingest(con, nsys.export_nsys_rep(path), trace_id, progress=progress)


def _ingest_kineto(con: Any, path: Path, trace_id: int, scratch: Path, progress: Any) -> Any:
    from tracekit.ingest import kineto  # lazy: a format's module when it is used

    return kineto.ingest(con, path, trace_id, scratch=scratch, progress=progress)


def _scrub_nsys(source: Path, tmp: Path, options: Any, removed: dict[str, int]) -> None:
    from tracekit.ingest.scrubbers import scrub_sqlite  # lazy: only `scrub` needs it (start-up)

    scrub_sqlite(source, tmp, options, removed)


def _scrub_kineto(source: Path, tmp: Path, options: Any, removed: dict[str, int]) -> None:
    from tracekit.ingest.scrubbers import scrub_json  # lazy: only `scrub` needs it (start-up)

    scrub_json(source, tmp, options, removed)


# An nsys export's staged rows take ~7x the SQLite file: a limit of twice the file (at least
# 512 MiB) built a 1e6-kernel export (127 MB) in the same 5.0 s as 2 GB with an 810 MiB peak
# instead of 2.2 GB, and 5e6 kernels (647 MB) at 1 GB in the same 35 s (1.5 GB, not 2.4 GB);
# 256 MB at 1e6 was 20 % slower.
_NSYS_MEMORY_FRACTION = 2.0
_NSYS_MEMORY_FLOOR = 512 * 1024**2
# A Kineto build's limit scales with the JSON's size: DuckDB spills its temp tables beyond it,
# and the process's peak RSS was about the limit + 260 MB (libraries, Python, DuckDB's own
# allocations) at 1e6 events. The derivation's joins failed below ~110 MiB there: the floor.
# (A lower limit while the events are read, 96 MiB, took that step's peak from ~385 to
# ~315 MB but cost 0.3 s, while the derivation's peak, ~395 MB, stayed the build's.)
# 0.45 until events gained launch_op: the events write then ran out of memory at 128 MiB
# on the 1e6-event trace about one build in two (and the build ran again at 2 GB: 10 s, not
# 5); at 150 MiB three of three passed, with peaks of 354-374 MB (1.3-1.4x the JSON).
_KINETO_MEMORY_FRACTION = 0.6
_KINETO_MEMORY_FLOOR = 128 * 1024**2
# DuckDB's allocator returns freed memory to the system only after a query that allocated
# more than this (default 128 MiB): at 16 MB a 1e6-event build peaked 30-50 MiB lower (1.3x
# the JSON instead of up to 1.5x, .gz included), for 0.1-0.2 s.
_ALLOCATOR_FLUSH = "16MB"


def _nsys_memory(path: Path) -> int:
    return max(int(path.stat().st_size * _NSYS_MEMORY_FRACTION), _NSYS_MEMORY_FLOOR)


def _kineto_memory(path: Path) -> int:
    from tracekit.ingest.json_scan import document_size  # lazy: orjson, ctypes (start-up)

    return max(int(document_size(path) * _KINETO_MEMORY_FRACTION), _KINETO_MEMORY_FLOOR)


def _kineto_tune(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"SET allocator_flush_threshold = '{_ALLOCATOR_FLUSH}'")
    con.execute(f"SET allocator_bulk_deallocation_flush_threshold = '{_ALLOCATOR_FLUSH}'")


def _is_json(path: Path, head: bytes) -> bool:
    return head.startswith(GZIP_MAGIC) or head.lstrip().startswith((b"{", b"["))


def _is_nsys_rep(path: Path, head: bytes) -> bool:
    return (
        path.suffix == ".nsys-rep" or head[:4] in (b"QDRP", b"NSYS") or b"nsys" in head[:64].lower()
    )


_SNIFF_BYTES = 1 << 20


def _looks_like_chrome_trace(path: Path) -> bool:
    """A JSON file in a folder counts as a trace only if `traceEvents` shows up early, so a
    report.json or diff.json written into a run folder is not taken for one."""
    import zlib

    from tracekit.ingest.json_scan import open_trace_bytes  # lazy: orjson, ctypes (start-up)

    try:
        with open_trace_bytes(path) as fh:  # (gzip bounded: a bomb stops at its bound)
            return b'"traceEvents"' in fh.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error, TraceFormatError):
        return True  # let the ingestor name what is wrong with it


NSYS = TraceFormat(
    "nsys", "an nsys SQLite export", (".sqlite",),
    lambda _p, head: head.startswith(SQLITE_MAGIC), _ingest_nsys,
    memory_limit=_nsys_memory, scrub=_scrub_nsys,
)  # fmt: skip
KINETO = TraceFormat(
    "kineto", "a Chrome/Kineto JSON trace", (".json", ".gz"), _is_json, _ingest_kineto,
    memory_limit=_kineto_memory, tune=_kineto_tune, scrub=_scrub_kineto,
    in_folder=_looks_like_chrome_trace,
)  # fmt: skip
# (an .nsys-rep says little of the size of its export: the default memory limit)
NSYS_REP = TraceFormat(
    "nsys-rep", "an Nsight Systems report (.nsys-rep)", (".nsys-rep",), _is_nsys_rep,
    _ingest_nsys_rep,
)  # fmt: skip

# Sniffed in this order: the first whose sniff says yes reads the file.
FORMATS: list[TraceFormat] = [NSYS, KINETO, NSYS_REP]


def register(fmt: TraceFormat) -> None:
    """Add a format (or replace the one of the same name), sniffed before the built-ins."""
    FORMATS[:] = [fmt, *(f for f in FORMATS if f.name != fmt.name)]


def by_name(name: str) -> TraceFormat:
    for f in FORMATS:
        if f.name == name:
            return f
    raise TraceFormatError(f"unknown trace format {name!r}")


def suffixes() -> tuple[str, ...]:
    return tuple(s for f in FORMATS for s in f.suffixes)


def detect(path: Path) -> TraceFormat:
    """The format of `path`, from its first bytes."""

    check_input_file(path)  # a FIFO would block the open below forever
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except IsADirectoryError:
        raise TraceFormatError(f"{path}: is a directory, not a trace file") from None
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except PermissionError:
        raise TraceFormatError(f"{path}: permission denied") from None
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read ({e.strerror})") from None
    if not head:
        raise TraceFormatError(f"{path}: empty file, not a trace")
    for fmt in FORMATS:
        if fmt.sniff(path, head):
            return fmt
    names = [f.description for f in FORMATS]
    expected = ", ".join(names[:-1]) + (" or " if len(names) > 1 else "") + names[-1]
    raise TraceFormatError(f"{path}: not a trace tracekit can read (expected {expected})")
