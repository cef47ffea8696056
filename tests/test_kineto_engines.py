"""The DuckDB fast path and the Python reference mapper of the Kineto ingestor agree.

Both read real traces (../shared/traces, the bundled sample, a synthetic trace with string
thread labels, begin/end pairs and instants); every events and threads row and every count
of what was skipped must be identical. The Python mapper is the one the fuzz and bad-input
tests hold to its rules, so this keeps the fast path to them too.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO, shared_params, shared_traces
from tracekit.errors import TraceFormatError
from tracekit.ingest import json_scan, kineto
from tracekit.store.build import create_schema
from tracekit.store.derive import derive

EVENT_COLUMNS = ("event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device, stream, "
                 "correlation, external_id, parent_id, depth, self_ns, launch_id, stage, "
                 "request_id, args::VARCHAR")  # fmt: skip


def _ingest(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setenv(kineto.ENGINE_ENV, engine)
    con = duckdb.connect()
    create_schema(con)
    info = kineto.ingest(con, path, 1)
    derive(con, [])  # the fast path leaves its rows in the staging table: derive moves them
    events = con.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY event_id").fetchall()
    threads = con.execute("SELECT * FROM threads ORDER BY ALL").fetchall()
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    con.close()
    stats = (info.stats.events, dict(info.stats.skipped), dict(info.stats.elsewhere))
    return events, threads, stats, info.metadata, tables


def _assert_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _ingest(path, "duckdb", monkeypatch)
    ref = _ingest(path, "python", monkeypatch)
    assert fast[2] == ref[2], "counts differ"
    assert fast[1] == ref[1], "threads differ"
    assert len(fast[0]) == len(ref[0]) > 0
    # Rows equal as fetched (args text too) need no JSON reading: only unequal ones are parsed.
    unequal = [(a, b) for a, b in zip(fast[0], ref[0], strict=True) if a != b]
    for a, b in unequal:
        a, b = list(a), list(b)
        # args: same JSON value (number spelling may differ: 1e-05 vs 1e-5)
        ja = json.loads(a.pop()) if a[-1] is not None else None
        jb = json.loads(b.pop()) if b[-1] is not None else None
        assert (a, ja) == (b, jb)
    assert fast[3] == ref[3], "trace metadata differs"
    assert not {t for t in fast[4] if t.startswith("_")}, "temp tables left behind"


def _name(p: object) -> str:
    return getattr(p, "name", "absent")


@pytest.mark.parametrize("src", shared_params("kineto_*.json*"), ids=_name)
def test_engines_agree_on_shared_traces(src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_same(src, monkeypatch)


def test_engines_agree_on_the_bundled_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_same(REPO / "sample_traces" / "torch.pt.trace.json", monkeypatch)


def test_engines_agree_on_odd_but_valid_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "spans"}},
        {
            "ph": "X",
            "cat": "Trace",
            "name": "profiler",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 1,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 7,
            "tid": "stream 9",
            "ts": 1700000000003.0625,
            "dur": 2.5,
            "args": {"External id": 4.0, "Input Dims": [[2]]},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 3,
            "args": {"correlation": 11, "stream": 7, "device": 0},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "old_cat",
            "pid": 0,
            "tid": "stream 8",
            "ts": 11,
            "dur": 1,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "my_category",
            "name": "custom",
            "pid": 7,
            "tid": 7,
            "ts": 12,
            "dur": 1,
            "args": {"cat": "shadowed", "k": None},
        },
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "sync",
            "pid": 0,
            "tid": 7,
            "ts": 13,
            "dur": 1,
            "args": {"stream": 7},
        },
        {"ph": "B", "name": "begin_end", "pid": 7, "tid": 7, "ts": 20, "args": {"a": 1}},
        {"ph": "i", "name": "mark", "pid": 7, "tid": "Other Label", "ts": 21, "s": "t"},
        {"ph": "E", "pid": 7, "tid": 7, "ts": 25, "args": {"b": 2}},
        {"ph": "B", "name": "never_ends", "pid": 7, "tid": 7, "ts": 26},
        {"ph": "X", "name": "negative", "pid": 7, "tid": 7, "ts": -1, "dur": 1},
        {"ph": "X", "name": "neg_dur", "pid": 7, "tid": 7, "ts": 1, "dur": -1},
        {"ph": "X", "name": "huge", "pid": 7, "tid": 7, "ts": 1e300, "dur": 1},
        {"ph": "X", "name": "no_ts", "pid": 7, "tid": 7, "dur": 1},
        {"ph": "C", "name": "counter", "pid": 7, "ts": 3, "args": {"v": 1}},
        {"ph": "s", "id": 11, "pid": 7, "tid": 7, "ts": 9, "cat": "ac2g", "name": "ac2g"},
        {"ph": "Z", "name": "unknown phase", "pid": 7, "tid": 7, "ts": 1},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "main"}},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events, "samples": [1, 2], "x": {"y": "]"},
                                "schemaVersion": 7}))  # fmt: skip
    _assert_same(path, monkeypatch)
    fast = _ingest(path, "duckdb", monkeypatch)
    assert fast[2][1] == {"negative ts": 1, "negative dur": 1, "ts or dur out of range": 1,
                          "missing or non-numeric ts": 1, "counter event": 1,
                          "unsupported phase 'Z'": 1, "begin without end": 1}  # fmt: skip
    # top-level keys are read past traceEvents; only the recording's facts are stored (issue 40)
    assert fast[3]["schemaVersion"] == 7 and "samples" not in fast[3] and "x" not in fast[3]


@pytest.mark.parametrize("value", [4.6e15, 4.7e15, 8.99e15, 9.0e15, 1e300])
def test_times_around_the_cheap_range_test(value: float, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The fast path tests ts + dur < 9e15 µs first and the exact int64-ns bound only where
    that fails: 4.6e15 twice still fits, 4.7e15 twice does not; huge and negative values
    next to each other must neither fit nor break the conversion (or fall back to Python)."""
    _python_mapper_not_used(monkeypatch)
    ev = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": value, "dur": value}
    events = [ev, {**ev, "dur": 1.5}, {**ev, "ts": 1, "dur": 1},
              {**ev, "ts": -1e300, "dur": 1e301}, {**ev, "ts": 1e301, "dur": -1e300}]  # fmt: skip
    path = tmp_path / "near.json"
    path.write_text(json.dumps({"traceEvents": events}))
    _assert_same(path, monkeypatch)


def _python_mapper_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only TRACEKIT_KINETO_ENGINE=python may reach the Python mapper: no silent fallback."""
    real = kineto._ingest_python

    def only_when_asked(*args: object) -> object:
        assert kineto.os.environ.get(kineto.ENGINE_ENV) == "python", "fell back to Python"
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(kineto, "_ingest_python", only_when_asked)


def _paced_unzip(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make the unzip write only what the parse waits for, in blocks of 97 bytes, so chunks
    are cut and parsed while the scratch file is still being written; returns, per chunk
    parsed, whether the unzip had finished when it was cut."""
    real_wait, real_parse = json_scan.EventsArray.wait_for, kineto._parse_parts
    complete_when_cut: list[bool] = []
    parsed: list[bool] = []

    def wait_for(self: json_scan.EventsArray, offset: int) -> bool:
        complete_when_cut.append(real_wait(self, offset))
        return complete_when_cut[-1]

    def parse_parts(*args: object) -> None:
        real_parse(*args)  # type: ignore[arg-type]
        parsed.append(complete_when_cut[-1])

    monkeypatch.setattr(json_scan, "UNZIP_AHEAD", 0)
    monkeypatch.setattr(json_scan, "BLOCK_BYTES", 97)
    monkeypatch.setattr(json_scan.EventsArray, "wait_for", wait_for)
    monkeypatch.setattr(kineto, "_parse_parts", parse_parts)
    monkeypatch.setattr(kineto, "UNZIP_CUT_ROOM", 64)
    return parsed


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("chunk_bytes", [1, 300, 64 * 1024])
def test_engines_agree_in_small_chunks(chunk_bytes: int, gz: bool, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Cut into many chunks and parts (event_ids, labels and begin/end pairs across their
    ends), and cuts where the pattern lies: strings ending in '}, {', objects in an array in
    args; the cut is then made again by scanning, never by the Python mapper. gzip: chunks
    are cut while the unzip is still writing the scratch file."""
    monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk_bytes)
    _python_mapper_not_used(monkeypatch)
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "tricky}, {",
            "pid": 7,
            "tid": 7,
            "ts": 1,
            "dur": 9,
            "args": {"list": [{"a": 1}, {"b": '}, {"c": 2'}, {}], "x": "}, {"},
        },
        {"ph": "B", "name": "pair", "pid": 7, "tid": "Label A", "ts": 2},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": "Label B",
            "tid": "stream 3",
            "ts": 3,
            "dur": 1,
            "args": {"correlation": 5},
        },
        *(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i}" + "}, {" * (i % 5 == 0),
                "pid": 7,
                "tid": "Label A",
                "ts": 3 + i,
                "dur": 0.5,
                "args": {"External id": i},
            }
            for i in range(40)
        ),
        {"ph": "E", "pid": 7, "tid": "Label A", "ts": 60},
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "old",
            "pid": "Label C",
            "tid": "Label D",
            "ts": 61,
            "dur": 1,
        },
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": "Label A", "args": {"name": "t"}},
    ]
    path = tmp_path / "chunks.json"
    text = json.dumps({"traceEvents": events, "after": [{"a": 1}, {"b": 2}]}, indent=1)
    if gz:
        path = tmp_path / "chunks.json.gz"
        path.write_bytes(gzip.compress(text.encode()))
        parsed = _paced_unzip(monkeypatch)
        _assert_same(path, monkeypatch)
        if chunk_bytes < 64 * 1024:  # (one chunk of 64 KiB holds the whole file)
            assert parsed.count(False) > 3, "chunks were parsed only after the whole unzip"
        return
    path.write_text(text)
    _assert_same(path, monkeypatch)
    if chunk_bytes == 64 * 1024:
        for src in shared_traces("kineto_*.json*")[:3]:
            _assert_same(src, monkeypatch)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_an_array_shorter_than_a_chunk_is_cut_even(
    gz: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last (here the only) chunk is cut into one even part per DuckDB thread, not into
    a full-size part and the rest (two threads: two halves), and the rows are still the
    Python mapper's."""
    _python_mapper_not_used(monkeypatch)
    parts: list[int] = []
    real_write = kineto.write_part

    def write_part(src: object, out: Path, start: int, end: int, close: bool) -> None:
        parts.append(end - start)
        real_write(src, out, start, end, close)  # type: ignore[arg-type]

    monkeypatch.setattr(kineto, "write_part", write_part)
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i,
               "dur": 1, "args": {"External id": i}} for i in range(3000)]  # fmt: skip
    text = json.dumps({"traceEvents": events})
    path = tmp_path / ("even.json.gz" if gz else "even.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    _assert_same(path, monkeypatch)
    threads = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()
    n_parts = min(int(threads[0]), kineto._MAX_PARTS) if threads else 1
    assert len(parts) == n_parts, parts  # (the Python mapper writes no parts)
    array = len(text) - len('{"traceEvents": []}')
    assert all(abs(n - array / n_parts) < 0.1 * array for n in parts), (parts, array)


HEADS = [
    b'{"traceEvents": [{"a": 1}]}',
    b'{"schemaVersion": 1, "deviceProperties": [{"x": "}, ["}], "traceEvents": [ {}]}',
    b'{"a": "\\"traceEvents\\": [", "traceEvents": []}',  # the key inside a string first
    b'{"a": {"traceEvents": [1]}, "traceEvents": []}',  # nested first: left to the scanner
    b'[{"ph": "X"}]',  # a root array
    b'  {\n "traceEvents"  :\n [',  # the array not closed within the head
    b'{"x": NaN, "traceEvents": []}',
    b'\xef\xbb\xbf{"traceEvents": []}',
    b'{"traceEvents": 5}',
    b'{"traceEvents": {"x": []}, "traceEvents": []}',
]


def test_the_head_shortcut_agrees_with_the_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the shortcut (no bracket scanner, no numpy) finds the events array's '[', the
    scanner finds the same one; everywhere else the scanner decides. Real traces take the
    shortcut."""
    n = json_scan._FIRST_HEAD_BYTES
    files = [*shared_traces("kineto_*.json*"), REPO / "sample_traces/torch.pt.trace.json"]
    real = [gzip.open(p).read(n) if p.suffix == ".gz" else p.read_bytes()[:n] for p in files]
    for head in [*HEADS, *real]:
        fast = json_scan._events_start_by_keys(head)
        with monkeypatch.context() as m:
            m.setattr(json_scan, "_events_start_by_keys", lambda block: -1)
            try:
                _, scanned = json_scan._head(io.BytesIO(head), Path("head.json"))
            except TraceFormatError:
                scanned = None  # (traceEvents is not a list)
        assert fast == -1 or fast == scanned, head[:80]
    assert all(json_scan._events_start_by_keys(head) > 0 for head in real)
    assert json_scan._events_start_by_keys(HEADS[2]) == HEADS[2].rindex(b"[")


def test_gzip_scratch_holds_a_window_not_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unzip runs a bounded way ahead of the parse and punches out what was parsed: the
    scratch file's allocated bytes stay near that window while the document is 6x bigger."""
    from tests.synth_kineto import generate

    path = generate(tmp_path / "big.json.gz", requests=1000, layers=4)
    size = len(gzip.decompress(path.read_bytes()))
    fd = os.open(tmp_path / "probe", os.O_RDWR | os.O_CREAT)
    os.pwrite(fd, b"x" * 65536, 0)
    punched = json_scan.punch_hole(fd, 0, 65536)
    os.close(fd)
    if not punched:
        pytest.skip("this file system cannot punch holes")
    window = 256 * 1024
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(kineto, "UNZIP_CUT_ROOM", 16 * 1024)
    monkeypatch.setattr(json_scan, "UNZIP_AHEAD", window)
    monkeypatch.setattr(json_scan, "BLOCK_BYTES", 32 * 1024)
    _python_mapper_not_used(monkeypatch)
    allocated: list[int] = []
    real_wait = json_scan.EventsArray.wait_for

    def wait_for(self: json_scan.EventsArray, offset: int) -> bool:
        complete = real_wait(self, offset)
        allocated.append(os.stat(self.path).st_blocks * 512)
        return complete

    monkeypatch.setattr(json_scan.EventsArray, "wait_for", wait_for)
    _assert_same(path, monkeypatch)
    bound = window + 1024 * 1024  # (ext4 here kept 1 MiB allocated whatever was punched)
    assert size > 6 * bound and len(allocated) > 20
    assert max(allocated) <= bound, (max(allocated), size)


def test_a_truncated_gzip_fails_from_the_unzip_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unzip thread's error is the build's (not a fallback's), and the thread and its
    scratch file are gone after it."""
    import threading

    from tests.synth_kineto import generate
    from tracekit.errors import TraceFormatError

    data = generate(tmp_path / "whole.json.gz", requests=1000).read_bytes()  # (> 1 MiB unzipped)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(json_scan, "UNZIP_AHEAD", 0)
    monkeypatch.setattr(json_scan, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(kineto, "UNZIP_CUT_ROOM", 4096)
    _python_mapper_not_used(monkeypatch)
    con = duckdb.connect()
    create_schema(con)
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        kineto.ingest(con, path, 1, scratch=tmp_path / "scratch")
    assert not [t for t in threading.enumerate() if t.name == "tracekit-gunzip"]
    assert not list(tmp_path.glob("scratch*"))


def test_an_interrupted_build_stops_the_unzip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle of a .gz parse: the unzip thread is stopped and joined, and its
    scratch file removed, before the interrupt goes on."""
    import threading

    from tests.synth_kineto import generate

    path = generate(tmp_path / "t.json.gz", requests=1000)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(json_scan, "UNZIP_AHEAD", 0)  # (the unzip waits on the parse)
    monkeypatch.setattr(json_scan, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(kineto, "UNZIP_CUT_ROOM", 4096)
    real_map, chunks = kineto._map_chunk_rows, []

    def map_then_interrupt(*args: object) -> int:
        chunks.append(1)
        if len(chunks) == 3:
            raise KeyboardInterrupt
        return real_map(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(kineto, "_map_chunk_rows", map_then_interrupt)
    con = duckdb.connect()
    create_schema(con)
    with pytest.raises(KeyboardInterrupt):
        kineto.ingest(con, path, 1, scratch=tmp_path / "scratch")
    assert not [t for t in threading.enumerate() if t.name == "tracekit-gunzip"]
    assert not list(tmp_path.glob("scratch*"))
