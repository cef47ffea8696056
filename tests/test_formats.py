"""The format registry's contract: every registered format, the built-ins and a toy one a
test registers without touching any other module, goes through the same invariants, with
figures checked against that format's own independent oracle (plain sqlite3 / json / csv)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES, shared_traces
from tracekit.ingest import formats
from tracekit.ingest.common import EventWriter, TraceInfo

# --- a toy format: "#csvtrace" then kind,name,tid,start_ns,dur_ns lines ---------------------


def _toy_ingest(con: Any, path: Path, trace_id: int, scratch: Path, progress: Any) -> TraceInfo:
    writer = EventWriter(con, trace_id)
    for line in path.read_text().splitlines()[1:]:
        kind, name, tid, start, dur = line.split(",")
        writer.add(kind, name, int(start), int(start) + int(dur), pid=1, tid=int(tid))
    writer.flush()
    return TraceInfo(format="csvtrace", stats=writer.stats)


TOY = formats.TraceFormat(
    "csvtrace", "a toy CSV trace", (".csvtrace",),
    lambda _p, head: head.startswith(b"#csvtrace\n"), _toy_ingest,
)  # fmt: skip


def _toy_file(path: Path) -> Path:
    rows = ["#csvtrace"]
    for r in range(5):  # a request holding a stage holding two ops, and a kernel
        t0 = r * 1000
        rows += [f"range,tracekit:request,1,{t0},900", f"range,tracekit:inference,1,{t0 + 10},800",
                 f"cpu_op,aten::mm,1,{t0 + 20},300", f"cpu_op,aten::add,1,{t0 + 400},100",
                 f"kernel,gemm,9,{t0 + 50},{200 + r}"]  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def toy_registered() -> Iterator[None]:
    saved = list(formats.FORMATS)
    formats.register(TOY)
    yield
    formats.FORMATS[:] = saved


# --- independent oracles: (kernel count, kernel ns) straight from the raw file --------------


def _nsys_oracle(path: Path) -> tuple[int, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = con.execute('SELECT count(*), coalesce(sum("end" - start), 0) '
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()  # fmt: skip
    except sqlite3.OperationalError:  # no CUDA tables: no kernels
        row = (0, 0)
    finally:
        con.close()
    return int(row[0]), int(row[1])


def _kineto_oracle(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    return len(kernels), sum(round(float(e["dur"]) * 1000) for e in kernels)


def _toy_oracle(path: Path) -> tuple[int, int]:
    rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
    kernels = [r for r in rows if r[0] == "kernel"]
    return len(kernels), sum(int(r[4]) for r in kernels)


ORACLES: dict[str, Callable[[Path], tuple[int, int]]] = {
    "nsys": _nsys_oracle,
    "kineto": _kineto_oracle,
    "csvtrace": _toy_oracle,
}


def samples(tmp: Path) -> list[Path]:
    return [
        SAMPLE_TRACES / "nsys.sqlite",
        SAMPLE_TRACES / "torch.pt.trace.json",
        *shared_traces("nsys_2022_gtx1060_concurrent_nvtx.sqlite"),
        *shared_traces("kineto_h100_bert_small_inference_tracelens.json.gz"),
        _toy_file(tmp / "toy.csvtrace"),
    ]


def test_every_registered_format_meets_the_contract(toy_registered: None, tmp_path: Path):
    seen = set()
    for path in samples(tmp_path):
        fmt = formats.detect(path)
        seen.add(fmt.name)
        with tracekit.open(path) as t:
            con: duckdb.DuckDBPyConnection = t.con
            (stored_format,) = con.execute("SELECT format FROM traces").fetchone()  # type: ignore[misc]
            assert stored_format == fmt.name
            n, ns = con.execute("SELECT count(*), coalesce(sum(dur_ns), 0) FROM events "
                                "WHERE kind = 'kernel'").fetchone()  # type: ignore[misc]  # fmt: skip
            assert (n, ns) == ORACLES[fmt.name](path), path.name
            # Nesting: a parent is open when its child starts, on the same thread, one level
            # up (real traces hold partial overlaps, so "encloses" is not an invariant of the
            # input). Known exception, under the parent's Python frames: torch's Python
            # tracer on the H100 BERT trace leaves 7 frames whose parent ended before them.
            bad = con.execute("""SELECT count(*) FROM events c JOIN events p
                ON p.trace_id = c.trace_id AND p.event_id = c.parent_id
                WHERE (p.start_ns > c.start_ns OR p.end_ns <= c.start_ns
                OR p.tid IS DISTINCT FROM c.tid OR c.depth <> p.depth + 1)
                AND p.kind <> 'python'""").fetchone()  # type: ignore[index]  # fmt: skip
            assert bad[0] == 0, path.name
            # Self time: never negative, never more than the event's duration.
            bad = con.execute("SELECT count(*) FROM events WHERE self_ns < 0 OR self_ns > dur_ns"
                              ).fetchone()  # type: ignore[index]  # fmt: skip
            assert bad[0] == 0, path.name
            # Stage rules: a stage lies inside its request.
            bad = con.execute("""SELECT count(*) FROM stages s JOIN requests r
                USING (trace_id, request_id)
                WHERE s.start_ns < r.start_ns OR s.end_ns > r.end_ns""").fetchone()  # type: ignore[index]  # fmt: skip
            assert bad[0] == 0, path.name
    assert {"nsys", "kineto", "csvtrace"} <= seen


def test_a_toy_format_needs_no_edit_elsewhere(toy_registered: None, tmp_path: Path):
    """Registered from a test, the toy format is detected, cached, found in folders and
    queried like a built-in; its stage comes from its tracekit ranges."""
    folder = tmp_path / "run"
    folder.mkdir()
    _toy_file(folder / "a.csvtrace")
    with tracekit.open(folder) as t:
        df = t.sql("SELECT stage, count(*) AS n FROM stages GROUP BY 1 ORDER BY 1")
        assert df.rows() == [("inference", 5)]
        top = t.query("top_ops", limit=1)
        assert top["name"].to_list() == ["aten::mm"]
    with pytest.raises(tracekit.TraceFormatError, match="scrub reads"):
        from tracekit.scrub import scrub_trace

        scrub_trace(folder / "a.csvtrace", tmp_path / "out.csvtrace")


def test_unknown_content_names_every_registered_format(toy_registered: None, tmp_path: Path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\n")
    with pytest.raises(tracekit.TraceFormatError) as e:
        formats.detect(p)
    assert str(e.value) == (
        f"{p}: not a trace tracekit can read (expected a toy CSV trace, an nsys SQLite export, "
        "a Chrome/Kineto JSON trace or an Nsight Systems report (.nsys-rep))"
    )
