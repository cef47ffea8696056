"""nsys SQLite ingest against nsys's own `nsys stats` reports on the same files.

Inputs: every nsys export in ../shared/traces (copied to tmp first), plus an export this suite
makes itself with the real nsys (`nsys profile -t nvtx,osrt` of tests/data/nsys_workload.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

import tracekit
from tests import nsys_oracle as oracle
from tests import procs
from tests.conftest import REPO, shared_traces
from tracekit.errors import TraceFormatError
from tracekit.ingest import nsys
from tracekit.store.derive import derive

SCHEMA = (REPO / "tracekit" / "store" / "schema.sql").read_text()
QUERIES = REPO / "queries"
WORKLOAD = REPO / "tests" / "data" / "nsys_workload.py"
HAS_NSYS = oracle.nsys_path() is not None
needs_nsys = pytest.mark.skipif(not HAS_NSYS, reason="nsys is not on PATH")
CAPTURED = "captured-nvtx-osrt"


def _nvtx_rows(path: Path) -> int:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            return 0
        return int(con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0])
    finally:
        con.close()


# nsys's nvtxgpuproj takes ~30 s on each 17k-range export, the most of any oracle here. This
# export is mfu_before's program one change later (the same ranges on the same threads), so its
# projection is checked through mfu_before's; its totals are checked like every export's.
PROJECTION_CHECKED_BY = {"nsys_2026_h100x2_mfu_after.sqlite": "nsys_2026_h100x2_mfu_before.sqlite"}


def _file_params(projection: bool = False) -> list[Any]:
    params: list[Any] = [pytest.param(CAPTURED, id=CAPTURED, marks=[pytest.mark.nsys])]
    found = shared_traces("nsys_*.sqlite")
    if projection:
        found = [p for p in found if p.name not in PROJECTION_CHECKED_BY]
    if not found:
        params.append(pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces absent")))
    for p in found:
        # nsys's own nvtxgpuproj takes ~30-50 s on the 17k-range exports.
        marks = [pytest.mark.nsys] + ([pytest.mark.slow] if _nvtx_rows(p) > 5000 else [])
        params.append(pytest.param(p, id=p.name, marks=marks))
    return params


@pytest.fixture(scope="session")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Profile the NVTX workload with the real nsys once, export it to SQLite."""
    if not HAS_NSYS:
        pytest.skip("nsys is not on PATH")
    out = tmp_path_factory.mktemp("nsys_capture")
    rep = out / "workload.nsys-rep"
    cmd = [
        "nsys",
        "profile",
        "-t",
        "nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "-f",
        "true",
        "-o",
        str(out / "workload"),
        sys.executable,
        str(WORKLOAD),
    ]
    proc = procs.run(cmd, cwd=out, capture_output=True, text=True, check=False)  # hang: fails
    if proc.returncode != 0 or not rep.is_file():
        pytest.fail(f"`nsys profile` failed ({proc.returncode}), no {rep.name}: {proc.stderr}")
    sqlite = out / "workload.sqlite"
    proc = procs.run(
        ["nsys", "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(rep)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not sqlite.is_file():
        pytest.fail(f"`nsys export` failed ({proc.returncode}): {proc.stderr}")
    return sqlite


@pytest.fixture
def nsys_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A writable copy of the parametrized export (the captured one or a shared one)."""
    src = request.getfixturevalue("captured") if request.param == CAPTURED else request.param
    dst = tmp_path / "in" / Path(src).name
    dst.parent.mkdir()
    shutil.copyfile(src, dst)
    return dst


_ORACLE: dict[tuple[str, tuple[str, ...]], dict[str, list[dict[str, str]]]] = {}


def _oracle(
    path: Path, tmp_path: Path, reports: tuple[str, ...]
) -> dict[str, list[dict[str, str]]]:
    # Keyed by the bytes and the reports: each test gets its own copy of the export, and each
    # `nsys stats` report (nvtxgpuproj takes ~30 s on the big exports) runs once per export.
    key = hashlib.sha256(path.read_bytes()).hexdigest()
    if (key, reports) not in _ORACLE:
        _ORACLE[key, reports] = oracle.run_stats(path, list(reports), tmp_path / "oracle")
    return _ORACLE[key, reports]


def _ingest(path: Path, **kw: Any) -> tuple[duckdb.DuckDBPyConnection, Any]:
    con = duckdb.connect()
    con.execute(SCHEMA)
    info = nsys.ingest(con, path, 1, **kw)
    derive(con, [])  # the rows are left in the staging table: derive moves them to events
    return con, info


def _query(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple[Any, ...]]:
    return con.execute((QUERIES / f"{name}.sql").read_text(), {"trace_id": 1}).fetchall()


def _stamp(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), os.stat(path).st_mtime_ns


def _sums(con: duckdb.DuckDBPyConnection, kinds: str) -> dict[str, list[int]]:
    rows = con.execute(
        f"SELECT name, count(*), sum(dur_ns)::BIGINT FROM events WHERE kind IN ({kinds}) GROUP BY 1"
    ).fetchall()
    return {n: [c, s] for n, c, s in rows}


@needs_nsys
@pytest.mark.parametrize("nsys_file", _file_params(), indirect=True)
def test_totals_match_nsys_stats(nsys_file: Path, tmp_path: Path) -> None:
    before = _stamp(nsys_file)
    o = _oracle(nsys_file, tmp_path, ("nvtxsum", "gpukernsum", "cudaapisum", "gpumemtimesum"))
    con, info = _ingest(nsys_file)
    assert info.format == "nsys" and info.tool_version.startswith("nsys")
    # nvtxsum: per (range, style) instance counts and totals exactly, stats to nsys's 0.1 ns.
    want = oracle.nvtx_sum(o["nvtxsum"])
    got = {(r[1], r[2]): r for r in _query(con, "nvtx_summary")}
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        assert (g[3], g[4], g[7], g[8]) == (w["count"], w["total"], w["min"], w["max"]), key
        for i, stat in ((5, "avg"), (6, "med"), (9, "stddev")):
            assert abs(g[i] - w[stat]) <= 0.051, (key, stat, g[i], w[stat])
    # gpukernsum / cudaapisum / gpumemtimesum: per-name counts and totals exactly.
    assert _sums(con, "'kernel'") == oracle.totals(o["gpukernsum"], ("Name",))
    assert _sums(con, "'runtime'") == oracle.totals(o["cudaapisum"], ("Name",))
    mem = oracle.totals(o["gpumemtimesum"], ("Operation",))
    assert _sums(con, "'memcpy', 'memset'") == mem
    assert _stamp(nsys_file) == before


@needs_nsys
@pytest.mark.parametrize("nsys_file", _file_params(projection=True), indirect=True)
def test_gpu_projection_matches_nvtxgpuproj(nsys_file: Path, tmp_path: Path) -> None:
    o = _oracle(nsys_file, tmp_path, ("nvtxgpuproj",))
    want = oracle.gpu_projection(o["nvtxgpuproj"])
    con, _ = _ingest(nsys_file)
    rows = _query(con, "nvtx_gpu_projection")
    got = {(r[2], r[6], r[5]): (r[8], r[10], r[11], r[12], r[14]) for r in rows}
    assert set(got) == set(want)
    # Projected start, duration and GPU op count: exact for every range.
    assert {k: v[:3] for k, v in got.items()} == {k: v[:3] for k, v in want.items()}
    # Nesting (Lvl, NumChild): nsys finds parents through an SQLite R*Tree, which keeps
    # coordinates as float32; with raw-clock timestamps (~1e11 ns, float32 step 8 us) it
    # mis-nests ranges that start within microseconds. Exact where timestamps are small.
    big = con.execute("SELECT max(end_ns) >= 2147483648 FROM events").fetchone()[0]
    same = sum(got[k][3:] == want[k][3:] for k in want)
    if not big:
        assert same == len(want)
    else:
        assert same >= 0.7 * len(want)


@needs_nsys
@pytest.mark.nsys
def test_captured_workload_mapping(captured: Path, tmp_path: Path) -> None:
    path = tmp_path / "w.sqlite"
    shutil.copyfile(captured, path)
    con, info = _ingest(path)
    names = dict(
        con.execute("SELECT name, count(*) FROM events WHERE kind = 'range' GROUP BY 1").fetchall()
    )
    assert names["tk_requests:request"] == 3
    assert names["tk_model:layer"] == 6
    assert names["postprocess"] == 3  # default domain: plain message
    assert names["tk_model:worker_step"] == 5
    marks = con.execute(
        "SELECT name, start_ns = end_ns FROM events WHERE kind = 'mark' ORDER BY start_ns"
    ).fetchall()
    assert marks[0] == ("startup", True) and ("tk_requests:request_done", True) in marks
    args = dict(
        con.execute(
            "SELECT name, args FROM events WHERE name IN ('tk_requests:preprocess', "
            "'tk_requests:cross_thread', 'tk_model:layer') ORDER BY start_ns"
        ).fetchall()
    )
    assert '"category":"cpu"' in args["tk_requests:preprocess"]
    assert '"endTid"' in args["tk_requests:cross_thread"]
    assert '"payload":1' in args["tk_model:layer"]
    # Main thread: tid == pid; the worker thread differs; GPU-less capture has no GPU rows.
    threads = con.execute(
        "SELECT DISTINCT pid, tid FROM events WHERE name LIKE 'tk_model:%'"
    ).fetchall()
    assert len(threads) == 2 and any(p == t for p, t in threads)
    assert con.execute("SELECT count(*) FROM threads WHERE tid IS NULL").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM events WHERE kind = 'osrt'").fetchone()[0] > 0
    assert info.devices == [] and info.clock_offset_ns is not None
    assert any("end exactly at the end of the capture" in w for w in info.warnings)


def test_sqlite3_fallback_reads_the_same(tmp_path: Path) -> None:
    found = shared_traces("nsys_2022_gtx1060_*.sqlite") + shared_traces("nsys_2022.4_*.sqlite")
    if not found:
        pytest.skip("../shared/traces absent")
    for src in found:
        path = tmp_path / src.name
        shutil.copyfile(src, path)
        a, ia = _ingest(path)
        b, ib = _ingest(path, reader="sqlite3")
        assert (ia.metadata["reader"], ib.metadata["reader"]) == ("sqlite_scanner", "sqlite3")
        q = "SELECT * FROM events ORDER BY event_id"
        assert a.execute(q).fetchall() == b.execute(q).fetchall()
        q = "SELECT * FROM threads ORDER BY ALL"
        assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_reads_in_place_from_a_read_only_folder() -> None:
    found = shared_traces("nsys_2024_*.sqlite")
    if not found:
        pytest.skip("../shared/traces absent")
    before = _stamp(found[0])
    con, info = _ingest(found[0])
    assert con.execute("SELECT count(*) FROM events WHERE kind = 'kernel'").fetchone()[0] > 0
    assert _stamp(found[0]) == before
    # Secrets stay out of metadata: capture environment is only counted.
    text = str(info.metadata)
    assert "ENVIRONMENT_VARIABLE" not in text and "PMI_" not in text
    assert info.metadata["capture"].get("redacted_entries", 0) > 0


def _real_export(tmp_path: Path) -> Path:
    found = shared_traces("nsys_2022.4_*.sqlite")
    if not found:
        pytest.skip("../shared/traces absent")
    dst = tmp_path / "real.sqlite"
    shutil.copyfile(found[0], dst)
    return dst


def test_not_an_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "plain.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE foo (a INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match=r"^.*plain\.sqlite: .*not an Nsight Systems"):
        _ingest(path)


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_export(tmp_path: Path, keep: float) -> None:
    real = _real_export(tmp_path)
    data = real.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(TraceFormatError) as e:
        _ingest(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_garbage_after_sqlite_magic(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 40)
    with pytest.raises(TraceFormatError, match="not an SQLite database"):
        _ingest(path)


def test_locked_export(tmp_path: Path) -> None:
    path = _real_export(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(TraceFormatError, match="locked"):
            _ingest(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_export_without_nvtx_or_cuda_is_empty_with_warning(tmp_path: Path) -> None:
    path = _real_export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE NVTX_EVENTS")
    con.execute("DROP TABLE OSRT_API")
    con.commit()
    con.close()
    before = _stamp(path)
    duck, info = _ingest(path)
    assert duck.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert any("no NVTX and no CUDA" in w for w in info.warnings)
    assert _stamp(path) == before


def test_store_open_derives_nesting(tmp_path: Path) -> None:
    path = _real_export(tmp_path)
    with tracekit.open(path) as t:
        rows = t.sql(
            "SELECT e.name, e.depth, p.name AS parent FROM events e "
            "LEFT JOIN events p ON p.event_id = e.parent_id "
            "WHERE e.kind = 'range' AND e.name LIKE 'tracekit_demo:%' ORDER BY e.start_ns"
        ).rows()
        traces = t.sql("SELECT format, tool_version, event_count FROM traces").rows()
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name["tracekit_demo:layer0"] == (2, "tracekit_demo:forward")
    assert by_name["tracekit_demo:inference"][0] == 0
    assert traces[0][:2] == ("nsys", "nsys 2022.4.2.1") and traces[0][2] > 0


@needs_nsys
@pytest.mark.nsys
def test_export_nsys_rep(captured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = captured.with_suffix(".nsys-rep")
    folder = tmp_path / "ro"
    folder.mkdir()
    rep = folder / "w.nsys-rep"
    shutil.copyfile(src, rep)
    before = (_stamp(rep), sorted(os.listdir(folder)))
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = nsys.export_nsys_rep(rep)
    assert out.is_file() and tmp_path / "cache" in out.parents
    assert (_stamp(rep), sorted(os.listdir(folder))) == before
    con, _ = _ingest(out)
    assert con.execute("SELECT count(*) FROM events WHERE kind = 'range'").fetchone()[0] > 0
    assert nsys.export_nsys_rep(rep) == out  # reused while the report is unchanged


def test_nsys_rep_without_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "x.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TraceFormatError, match=r"x\.nsys-rep: .*nsys is not on PATH"):
        nsys.export_nsys_rep(rep)
