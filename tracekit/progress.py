"""A progress bar on stderr for long ingests, shown only when stderr is a terminal.

    with progress_bar(path, total_bytes) as update:
        update(bytes_done)

Quiet when piped, under pytest/CliRunner, or with TRACEKIT_PROGRESS=0; forced on with
TRACEKIT_PROGRESS=1. Small files (under `min_bytes`) never draw: they finish before the bar
would help. Redraws at most every 0.2 s, so the callback is cheap to call per block.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO

ProgressCallback = Callable[[int], None]
MIN_BYTES = 64 * 1024 * 1024


def enabled(stream: IO[str] | None = None) -> bool:
    """Whether a bar should be drawn on `stream` (default stderr)."""
    flag = os.environ.get("TRACEKIT_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false", "no")
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Bar:
    """Draws `label [#####.....] 42% 120/290 MB 85 MB/s` on one line, rewritten in place."""

    def __init__(self, label: str, total: int, stream: IO[str], width: int = 30) -> None:
        self.label, self.total, self.stream, self.width = label, max(total, 1), stream, width
        self.start = time.monotonic()
        self.last = 0.0
        self.done = 0
        self.drawn = False

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if now - self.last < 0.2 and done < self.total:
            return
        self.last = now
        frac = min(done / self.total, 1.0)
        fill = int(frac * self.width)
        rate = done / max(now - self.start, 1e-6) / 1e6
        self.stream.write(
            f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {frac * 100:3.0f}% "
            f"{done / 1e6:.0f}/{self.total / 1e6:.0f} MB {rate:.0f} MB/s"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * (len(self.label) + self.width + 40) + "\r")
            self.stream.flush()


@contextlib.contextmanager
def progress_bar(label: str, total: int, stream: IO[str] | None = None,
                 min_bytes: int = MIN_BYTES) -> Iterator[ProgressCallback | None]:  # fmt: skip
    """Yield an update(bytes_done) callback, or None when no bar should be drawn."""
    out = stream or sys.stderr
    if total < min_bytes or not enabled(out):
        yield None
        return
    bar = Bar(label, total, out)
    try:
        yield bar.update
    finally:
        bar.close()
