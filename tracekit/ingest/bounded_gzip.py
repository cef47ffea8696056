"""gzip that refuses to expand without bound: a 10 MB `.json.gz` bomb fails in about a second.

Two bounds, both checked as bytes come out of the stream (never after the fact):
- ratio: once more than RATIO_FLOOR bytes are out, the bytes out per compressed byte read so
  far may not pass TRACEKIT_MAX_UNZIP_RATIO (default 100; real Kineto traces are 10-30:1);
- size: the bytes out may not pass TRACEKIT_MAX_UNZIPPED (default 32GB).
Either error names the variable that raises the bound.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import IO, Any

from tracekit.config import parse_size
from tracekit.errors import ConfigError, TraceFormatError

RATIO_ENV = "TRACEKIT_MAX_UNZIP_RATIO"
SIZE_ENV = "TRACEKIT_MAX_UNZIPPED"
DEFAULT_RATIO = 100.0
DEFAULT_SIZE = 32 * 1024**3
RATIO_FLOOR = 64 * 1024**2  # small documents may compress as well as they like
_CHUNK = 16 * 1024 * 1024


def limits() -> tuple[float, int]:
    """(max ratio, max bytes) from the environment."""
    ratio_text = os.environ.get(RATIO_ENV)
    try:
        ratio = float(ratio_text) if ratio_text else DEFAULT_RATIO
    except ValueError:
        raise ConfigError(f"{RATIO_ENV}={ratio_text!r}: not a number") from None
    if not ratio > 0:  # (also refuses nan)
        raise ConfigError(f"{RATIO_ENV}={ratio_text!r}: must be a positive number")
    size_text = os.environ.get(SIZE_ENV)
    size = parse_size(size_text, SIZE_ENV) if size_text else DEFAULT_SIZE
    return ratio, size


class BoundedGzipFile(gzip.GzipFile):
    """A GzipFile over `raw` that raises TraceFormatError past the bounds (see module)."""

    def __init__(self, raw: IO[bytes], path: Path) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw, self._path = raw, path
        self._out = 0
        self._ratio, self._max = limits()

    def _count(self, n: int) -> None:
        self._out += n
        if self._out > self._max:
            raise TraceFormatError(
                f"{self._path}: gzip expands past {self._max} bytes; if the trace is genuine, "
                f"raise the bound with {SIZE_ENV} (e.g. {SIZE_ENV}=100GB)"
            )
        if self._out > RATIO_FLOOR:
            compressed = max(self._raw.tell(), 1)
            if self._out > self._ratio * compressed:
                raise TraceFormatError(
                    f"{self._path}: gzip expands more than {self._ratio:g}:1 (a decompression "
                    f"bomb?); if the trace is genuine, raise the bound with {RATIO_ENV} "
                    f"(e.g. {RATIO_ENV}=1000)"
                )

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while block := self.read(_CHUNK):
                parts.append(block)
            return b"".join(parts)
        data = super().read(min(size, _CHUNK))
        self._count(len(data))
        return data

    def read1(self, size: int = -1) -> bytes:
        data = super().read1(_CHUNK if size < 0 else min(size, _CHUNK))
        self._count(len(data))
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data = super().readline(_CHUNK if size is None or size < 0 else min(size, _CHUNK))
        self._count(len(data))
        return data

    def peek(self, n: int) -> bytes:
        return super().peek(min(n, _CHUNK))


def open_bounded(path: Path, raw: IO[bytes] | None = None) -> Any:
    """A bounded gzip reader over `path` (or over the open file `raw`)."""
    return BoundedGzipFile(raw if raw is not None else open(path, "rb"), path)


def read_document(path: Path) -> bytes:
    """The whole document of a plain or gzipped file, within the bounds."""
    with open(path, "rb") as raw:
        if raw.read(2) != b"\x1f\x8b":
            raw.seek(0)
            return raw.read()
        raw.seek(0)
        with BoundedGzipFile(raw, path) as gz:
            try:
                return gz.read()
            except EOFError:
                raise TraceFormatError(f"{path}: truncated gzip") from None
            except (OSError, ValueError, zlib.error) as e:  # BadGzipFile too
                raise TraceFormatError(f"{path}: corrupt gzip ({e})") from None
