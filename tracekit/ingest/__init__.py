"""Ingestors: one module per input format, each filling the normalized tables.

Contract: `ingest(con, path, trace_id) -> TraceInfo` inserts rows into `events` (through
EventWriter) and `threads` for one trace; the store then writes the `traces` row and runs
the derivation (parent/depth/self time, launches, stages, requests). Formats are detected
from content, never from the file name alone.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.errors import TraceFormatError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"


def detect_format(path: Path) -> str:
    """Return 'nsys', 'kineto' or 'nsys-rep' from the first bytes of the file."""
    from tracekit.atomic import check_input_file

    check_input_file(path)  # a FIFO would block the open below forever
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
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
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        return "kineto"
    stripped = head.lstrip()
    if stripped.startswith((b"{", b"[")):
        return "kineto"
    if path.suffix == ".nsys-rep" or head[:4] in (b"QDRP", b"NSYS") or b"nsys" in head[:64].lower():
        return "nsys-rep"
    raise TraceFormatError(
        f"{path}: not a trace tracekit can read (expected an nsys SQLite export, "
        "an .nsys-rep, or a Chrome/Kineto JSON trace)"
    )
