"""The progress line of a store build: which steps a build reports, how the line is drawn, and
that nothing is drawn when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs
from tests.conftest import REPO, SAMPLE_TRACES
from tracekit import progress
from tracekit.store import build as store
from tracekit.store.derive import derive_steps


class _Recorder(progress.Progress):
    def __init__(self) -> None:
        self.steps: list[tuple[str, int | None]] = []
        self.updates: list[int] = []

    def step(self, name: str, total: int | None = None) -> None:
        self.steps.append((name, total))

    def update(self, done: int) -> None:
        self.updates.append(done)


def _record_build(source: Path, monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    recorder = _Recorder()

    @contextlib.contextmanager
    def build_progress(label: str) -> Iterator[progress.Progress]:
        assert label == f"ingest {source.name}"
        yield recorder

    monkeypatch.setattr(store, "build_progress", build_progress)
    store.ensure_trace_store(source, [], refresh=True)
    return recorder


def _derive_names() -> list[str]:
    steps = derive_steps()
    return [f"deriving {k}/{len(steps)}: {what}" for k, (what, _) in enumerate(steps, 1)]


def test_a_kineto_build_reports_parse_progress_then_each_step(
    copy_trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = copy_trace(SAMPLE_TRACES / "torch.pt.trace.json")
    rec = _record_build(src, monkeypatch)
    names = [name for name, _ in rec.steps]
    assert rec.steps[0] == ("parsing events", src.stat().st_size)
    assert rec.updates and rec.updates[-1] == src.stat().st_size  # the array's end: the file's
    assert rec.updates == sorted(rec.updates)
    assert names[-len(_derive_names()) - 1 :] == [*_derive_names(), "writing the store"]


def test_a_gzip_build_counts_the_unzipped_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    raw = (SAMPLE_TRACES / "torch.pt.trace.json").read_bytes()
    src = tmp_path / "t.json.gz"
    src.write_bytes(gzip.compress(raw))
    rec = _record_build(src, monkeypatch)
    assert rec.steps[0] == ("parsing events", len(raw))
    assert rec.updates[-1] <= len(raw) and rec.updates[-1] > len(raw) // 2


def test_an_nsys_build_reports_each_table(copy_trace, monkeypatch: pytest.MonkeyPatch) -> None:
    src = copy_trace(SAMPLE_TRACES / "nsys.sqlite")
    rec = _record_build(src, monkeypatch)
    names = [name for name, _ in rec.steps]
    assert names[0] == "checking the SQLite export"
    with sqlite3.connect(src) as con:
        nvtx = con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
    assert nvtx and f"reading NVTX_EVENTS ({nvtx:,} rows)" in names
    assert names[-len(_derive_names()) - 1 :] == [*_derive_names(), "writing the store"]


def test_the_line_shows_step_bar_and_time_then_is_blanked() -> None:
    out = io.StringIO()
    line = progress.ProgressLine("ingest t.json", out, delay_s=0, redraw_s=0.01)
    line.step("parsing events", total=200_000_000)
    line.update(50_000_000)
    deadline = time.monotonic() + 120  # a wait, not a limit: ends once drawn
    while "25%" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    line.step("deriving 1/8: nesting")
    while "nesting" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    line.close()
    text = out.getvalue()
    assert "ingest t.json: parsing events [#####...............]  25% 50/200 MB" in text
    assert "ingest t.json: deriving 1/8: nesting  " in text
    drawn = [d for d in text.split("\r") if d]
    assert all(len(d) < 100 for d in drawn), "one line: never wider than the terminal"
    assert text.endswith("\r") and not drawn[-1].strip(), "the line is blanked at the end"


def test_nothing_is_drawn_before_the_delay() -> None:
    out = io.StringIO()
    line = progress.ProgressLine("ingest t.json", out, delay_s=60, redraw_s=0.01)
    line.step("parsing events", total=100)
    time.sleep(0.1)
    line.close()
    assert out.getvalue() == ""


def test_quiet_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_bytes((SAMPLE_TRACES / "torch.pt.trace.json").read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_PROGRESS"}
    code = (
        "import sys, pathlib, tracekit.progress as p, tracekit.store.build as s\n"
        "p.DRAW_DELAY_S = 0; p.REDRAW_S = 0.001\n"
        "s.ensure_trace_store(pathlib.Path(sys.argv[1]), [], refresh=True)\n"
    )
    run = procs.run([sys.executable, "-c", code, str(src)], capture_output=True,
                         env=env, cwd=REPO, check=True)  # fmt: skip
    assert run.stderr == b""
    env["TRACEKIT_PROGRESS"] = "1"  # forced on: the same build draws
    run = procs.run([sys.executable, "-c", code, str(src)], capture_output=True,
                         env=env, cwd=REPO, check=True)  # fmt: skip
    assert f"\ringest {src.name}: ".encode() in run.stderr
    assert b"\n" not in run.stderr, "one line, rewritten in place"


def test_a_shorter_line_covers_the_longer_one_before_it() -> None:
    out = io.StringIO()
    line = progress.ProgressLine("ingest t.json", out, delay_s=0, redraw_s=60)
    line.step("reading CUPTI_ACTIVITY_KIND_KERNEL (12,345,678 rows)")
    line._draw(line.line(time.monotonic()))
    long_width = line.width
    line.step("nesting")
    line._draw(line.line(time.monotonic()))
    line.close()
    drawn = out.getvalue().split("\r")
    assert len(drawn[2]) == long_width and drawn[2].startswith("ingest t.json: nesting  ")


def test_the_line_is_blanked_when_the_build_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setenv("TRACEKIT_PROGRESS", "1")
    monkeypatch.setattr(progress, "DRAW_DELAY_S", 0)
    monkeypatch.setattr(progress, "REDRAW_S", 0.005)
    with pytest.raises(KeyboardInterrupt), progress.build_progress("ingest t.json", out) as p:
        p.step("deriving 1/8: nesting")
        deadline = time.monotonic() + 120  # a wait, not a limit: ends once drawn
        while "nesting" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.005)
        raise KeyboardInterrupt
    text = out.getvalue()
    assert "nesting" in text and text.endswith("\r") and not text.split("\r")[-2].strip()
    assert not [t for t in threading.enumerate() if t.name == "tracekit-progress"]


def test_width_falls_back_to_columns_when_the_stream_cannot_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "55")
    out = io.StringIO()  # (no terminal behind it: as a pty that reports 0 columns)
    assert progress._columns(out) == 55
    line = progress.ProgressLine("ingest a-rather-long-trace-name.json", out, 0, 60)
    line.step("deriving 6/8: stage and request of each event")
    line._draw(line.line(time.monotonic()))
    line.close()
    assert max(len(d) for d in out.getvalue().split("\r")) == 54
