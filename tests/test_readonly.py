"""`tracekit sql` opens stores read-only; named-query parameters are bound, never executed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 2},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3},
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    out = tmp_path / "t.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(trace), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def events_in(store: Path) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM events").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE evil (a INTEGER)",
        "DROP TABLE events",
        "DELETE FROM events",
        "INSERT INTO traces SELECT * FROM traces",
        "UPDATE events SET name = 'x'",
    ],
)
def test_sql_store_is_read_only(store: Path, statement: str):
    before = store.read_bytes()
    code, out, err = run("sql", str(store), statement)
    assert code == 2
    assert out == ""
    assert err.startswith("Error: ") and len(err.splitlines()) == 1
    assert "read-only" in err and "--write" in err
    assert store.read_bytes() == before
    assert events_in(store) == 3


def test_sql_on_trace_cache_is_read_only(tmp_path: Path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    code, _, err = run("sql", str(trace), "DROP TABLE events")
    assert code == 2 and "read-only" in err
    code, out, _ = run("sql", str(trace), "SELECT count(*) AS n FROM events", "--format", "csv")
    assert code == 0 and out.split() == ["n", "3"]


def test_sql_several_stores_leaves_them_unchanged(store: Path, tmp_path: Path):
    other = tmp_path / "t.json"
    before = store.read_bytes()
    code, _, err = run("sql", str(store), str(other), "INSERT INTO events SELECT * FROM events")
    assert code == 2 and err.startswith("Error: ")
    assert store.read_bytes() == before


def test_query_param_injection_is_rejected(store: Path):
    code, out, err = run(
        "query", "events_by_kind", str(store), "--param", "trace_id=1; DROP TABLE events"
    )
    assert code == 2 and out == ""
    assert (
        err == "Error: query events_by_kind: parameter trace_id must be INTEGER, "
        "got '1; DROP TABLE events'\n"
    )
    assert events_in(store) == 3


def test_query_events_by_kind(store: Path):
    code, out, err = run("query", "events_by_kind", str(store), "--format", "csv")
    assert code == 0, err
    assert out.splitlines() == [
        "trace_id,kind,events,total_ms",
        "1,cpu_op,2,0.007",
        "1,kernel,1,0.003",
    ]


def test_text_parameter_is_data(store: Path):
    """A string parameter is bound as a value: the SQL it holds is never run."""
    payload = "x'; DROP TABLE events; --"
    with tracekit.open(store) as ts:
        df = ts.sql(
            "SELECT count(*) AS n, $name AS echoed FROM events WHERE name = $name",
            {"name": payload},
        )
        assert df.to_dicts() == [{"n": 0, "echoed": payload}]
    assert events_in(store) == 3


def older_store(store: Path, tmp_path: Path, *statements: str) -> Path:
    """A copy of `store` as an older tracekit would have left it: `statements` run on it."""
    old = tmp_path / "old.duckdb"
    old.write_bytes(store.read_bytes())
    con = duckdb.connect(str(old))
    for statement in statements:
        con.execute(statement)
    con.close()
    return old


def test_store_or_export_of_an_older_schema_is_refused(store: Path, tmp_path: Path):
    """A store (alone or beside another) or a Parquet export whose events lack a column this
    version's queries read gets one line naming it and exit 2, and is left as it was."""
    old = older_store(store, tmp_path, "ALTER TABLE events DROP COLUMN launch_op")
    before = old.read_bytes()
    why = "an older tracekit wrote it (events has no launch_op); ingest or export the trace again"
    for args in (
        ["report", str(old), "-o", str(tmp_path / "r.html")],
        ["sql", str(old), str(store), "SELECT 1"],
    ):
        code, out, err = run(*args)
        assert code == 2, (args, out, err)
        assert err.strip().splitlines() == [f"Error: {old}: {why}"], err
    assert old.read_bytes() == before and not (tmp_path / "r.html").exists()

    export = tmp_path / "export"
    code, _, err = run("export", str(store), "--parquet", str(export))
    assert code == 0, err
    events = next((export / "events").glob("trace_id=*/*.parquet"))
    rewritten = tmp_path / "events.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * EXCLUDE (launch_op) FROM '{events}') TO '{rewritten}'")
    con.close()
    rewritten.replace(events)
    code, _, err = run("sql", str(export), "SELECT count(*) FROM events")
    assert code == 2 and err.strip().splitlines() == [f"Error: {export}: {why}"], err


def test_store_or_export_without_gpu_islands_is_refused(store: Path, tmp_path: Path):
    """A store or export from before gpu_islands (schema 5) gets one line naming the missing
    table and exit 2 (not "not a store tracekit wrote"), and is left as it was."""
    old = older_store(store, tmp_path, "DROP TABLE gpu_islands")
    before = old.read_bytes()
    why = "an older tracekit wrote it (no gpu_islands table); ingest or export the trace again"
    code, out, err = run("query", "gpu_utilization", str(old))
    assert code == 2 and err.strip().splitlines() == [f"Error: {old}: {why}"], (out, err)
    assert old.read_bytes() == before

    export = tmp_path / "export"
    code, _, err = run("export", str(store), "--parquet", str(export))
    assert code == 0, err
    shutil.rmtree(export / "gpu_islands")
    code, _, err = run("sql", str(export), "SELECT count(*) FROM events")
    assert code == 2 and err.strip().splitlines() == [f"Error: {export}: {why}"], err


def test_store_of_schema_4_is_refused_naming_both_gaps(store: Path, tmp_path: Path):
    """What schema 4 wrote (no stages.parent_stage) and what 2 wrote (nor gpu_islands, nor
    events.launch_op) are named in one line, every gap at once."""
    old = older_store(store, tmp_path, "ALTER TABLE stages DROP COLUMN parent_stage")
    code, _, err = run("query", "stage_summary", str(old))
    assert code == 2 and err.strip().splitlines() == [
        f"Error: {old}: an older tracekit wrote it (stages has no parent_stage); "
        "ingest or export the trace again"
    ], err
    (tmp_path / "older").mkdir()
    old = older_store(
        old,
        tmp_path / "older",
        "DROP TABLE gpu_islands",
        "ALTER TABLE events DROP COLUMN launch_op",
    )
    code, _, err = run("report", str(old), "-o", str(tmp_path / "r.html"))
    assert code == 2 and err.strip().splitlines() == [
        f"Error: {old}: an older tracekit wrote it (events has no launch_op; stages has no "
        "parent_stage; no gpu_islands table); ingest or export the trace again"
    ], err
    assert not (tmp_path / "r.html").exists()
