"""Progress of a store build on stderr: one line, rewritten in place, shown on a terminal only.

    with build_progress(f"ingest {path.name}") as progress:
        progress.step("parsing events", total=file_bytes)
        progress.update(bytes_done)
        progress.step("nesting")

The line names the build, its current step, a bar for steps measured in bytes, and the time
since the build began:

    ingest big.json: parsing events [#########.....] 64% 173/270 MB 85 MB/s  2.1 s
    ingest big.json: deriving 3/8, stages  3.4 s

A thread redraws it every 0.2 s, so it keeps moving through one long SQL statement (DuckDB
releases the GIL). Nothing is drawn for the first second: small traces finish before a line
would help. Quiet when stderr is not a terminal (piped, pytest, CliRunner) or with
TRACEKIT_PROGRESS=0; drawn even then with TRACEKIT_PROGRESS=1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO

DRAW_DELAY_S = 1.0  # nothing is drawn before this: short builds stay silent
REDRAW_S = 0.2


def enabled(stream: IO[str] | None = None) -> bool:
    """Whether a progress line should be drawn on `stream` (default stderr)."""
    flag = os.environ.get("TRACEKIT_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false", "no")
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """What a build reports as it goes; this base class draws nothing."""

    def step(self, name: str, total: int | None = None) -> None:
        """A new step begins; `total` is its size in bytes when it has one."""

    def update(self, done: int) -> None:
        """Bytes of the current step done so far."""


NO_PROGRESS = Progress()


class ProgressLine(Progress):
    """Draws the build's progress line on `stream` from a thread of its own."""

    def __init__(self, label: str, stream: IO[str], delay_s: float = DRAW_DELAY_S,
                 redraw_s: float = REDRAW_S) -> None:  # fmt: skip
        self.label, self.stream = label, stream
        self.delay_s, self.redraw_s = delay_s, redraw_s
        self.began = time.monotonic()
        self.name = "starting"
        self.total: int | None = None
        self.done = 0
        self.step_began = self.began
        self.width = 0  # characters drawn last, to blank them
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="tracekit-progress", daemon=True)
        self.ticker.start()

    def step(self, name: str, total: int | None = None) -> None:
        with self.lock:
            self.name, self.total, self.done = name, total, 0
            self.step_began = time.monotonic()

    def update(self, done: int) -> None:
        self.done = done

    def line(self, now: float) -> str:
        """The text of the line at time `now`."""
        with self.lock:
            name, total, done, step_began = self.name, self.total, self.done, self.step_began
        text = f"{self.label}: {name}"
        if total and done > total:  # (a size that was only an estimate)
            text += f" {done / 1e6:.0f} MB"
        elif total:
            frac = min(max(done / total, 0.0), 1.0)
            fill = int(frac * 20)
            rate = done / max(now - step_began, 1e-6) / 1e6
            text += (f" [{'#' * fill}{'.' * (20 - fill)}] {frac * 100:3.0f}% "
                     f"{done / 1e6:.0f}/{total / 1e6:.0f} MB {rate:.0f} MB/s")  # fmt: skip
        return f"{text}  {now - self.began:.1f} s"

    def _tick(self) -> None:
        while not self.stopped.wait(self.redraw_s):
            now = time.monotonic()
            if now - self.began >= self.delay_s:
                self._draw(self.line(now))

    def _draw(self, text: str) -> None:
        # One line only: a wrapped line could not be rewritten by '\r'.
        text = text[: max(_columns(self.stream) - 1, 20)]
        with contextlib.suppress(OSError, ValueError):
            self.stream.write("\r" + text.ljust(self.width))
            self.stream.flush()
            self.width = len(text)

    def close(self) -> None:
        """Stop drawing and blank the line."""
        self.stopped.set()
        self.ticker.join()
        if self.width:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()


def _columns(stream: IO[str]) -> int:
    """The width of the terminal `stream` writes to (stdout may be piped while it is not)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    # (0: a terminal that does not say, as under `script`: $COLUMNS, else 100)
    return columns if columns > 0 else shutil.get_terminal_size((100, 20)).columns


@contextlib.contextmanager
def build_progress(label: str, stream: IO[str] | None = None) -> Iterator[Progress]:
    """A ProgressLine on `stream` (default stderr) when enabled there, else NO_PROGRESS."""
    out = stream or sys.stderr
    if not enabled(out):
        yield NO_PROGRESS
        return
    line = ProgressLine(label, out, DRAW_DELAY_S, REDRAW_S)
    try:
        yield line
    finally:
        line.close()
