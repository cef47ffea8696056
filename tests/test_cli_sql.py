"""`tracekit sql`, `tracekit ingest`, `tracekit query` through the real CLI entry point."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import procs
from tests.conftest import SAMPLE_TRACES, shared_traces
from tracekit.cli import main

TOP5 = (
    "SELECT name, count(*) AS calls, round(sum(self_ns) / 1e6, 3) AS self_ms FROM events "
    "WHERE kind = 'cpu_op' GROUP BY name ORDER BY self_ms DESC, name LIMIT 5"
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True)


def _sample_kineto(tmp_path: Path) -> Path:
    sample = SAMPLE_TRACES / "torch.pt.trace.json"  # named: users write into sample_traces/
    if sample.is_file():
        dst = tmp_path / sample.name
        dst.write_bytes(sample.read_bytes())
        return dst
    shared = shared_traces("kineto_h100_bert_small*.json.gz")
    if not shared:
        pytest.skip("no sample trace and no shared traces")
    dst = tmp_path / shared[0].name
    dst.write_bytes(shared[0].read_bytes())
    return dst


def test_top5_aten_ops_by_self_time_table(tmp_path: Path) -> None:
    trace = _sample_kineto(tmp_path)
    r = _cli("sql", str(trace), TOP5)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["name", "calls", "self_ms"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[-1] == "(5 rows)"
    assert all(row.split()[0].startswith("aten::") for row in lines[2:7])
    # Independent check: self time from the JSON with a plain Python interval pass.
    from tests.kineto_oracle import load

    doc = load(trace)
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    host = [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") in HOST_CATS
        and isinstance(e.get("ts"), (int, float))
    ]
    self_ms = _python_self_time_ms(host)
    assert ops
    first = lines[2].split()
    assert int(first[1]) == sum(1 for e in ops if e["name"] == first[0])
    assert abs(float(first[2]) - round(self_ms[first[0]], 3)) <= 0.002


HOST_CATS = (
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "Operator",
    "Runtime",
)


def _python_self_time_ms(host: list[dict]) -> dict[str, float]:
    """Self time per cpu_op name with a plain stack over each thread's events (the oracle)."""
    from collections import defaultdict

    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in host:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out: dict[str, float] = defaultdict(float)
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, child_us]

        def close(item: list) -> None:
            ev, child = item
            if ev.get("cat") in ("cpu_op", "Operator"):
                out[ev["name"]] += (ev["dur"] - child) / 1000.0

        for e in events:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                close(stack.pop())
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        while stack:
            close(stack.pop())
    return out


def test_csv_and_json_pipe_cleanly(tmp_path: Path) -> None:
    trace = _sample_kineto(tmp_path)
    r = _cli("sql", str(trace), TOP5, "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 5 and set(rows[0]) == {"name", "calls", "self_ms"}
    r = _cli("sql", str(trace), TOP5, "--format", "json")
    data = json.loads(r.stdout)
    assert [d["name"] for d in data] == [row["name"] for row in rows]
    out = tmp_path / "top.parquet"
    r = _cli("sql", str(trace), TOP5, "--format", "parquet", "-o", str(out))
    assert r.returncode == 0 and out.read_bytes()[:4] == b"PAR1"


def test_ingest_reports_counts_and_store(tmp_path: Path) -> None:
    trace = _sample_kineto(tmp_path)
    store = tmp_path / "store.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(trace), "-o", str(store)])
    assert r.exit_code == 0, r.output
    assert "events" in r.output and f"Wrote {store}" in r.output
    r2 = _cli("sql", str(store), "SELECT count(*) AS n FROM traces", "--format", "csv")
    assert r2.stdout.splitlines() == ["n", "1"]
    r3 = CliRunner().invoke(main, ["ingest", str(trace), "-o", str(store)])
    assert r3.exit_code == 2 and "--force" in r3.output


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"hello world", "not a trace"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X"', "truncated JSON"),
        (b'{"other": 1}', "without a traceEvents list"),
    ],
)
def test_bad_inputs_one_line_exit_2(tmp_path: Path, content: bytes, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    r = _cli("sql", str(bad), "SELECT 1")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ")
    assert str(bad) in r.stderr and message in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_truncated_gzip_and_missing_file(tmp_path: Path) -> None:
    import gzip

    good = gzip.compress(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": i, "dur": 1}
                    for i in range(2000)
                ]
            }
        ).encode()
    )
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(good[: len(good) // 2])
    r = _cli("sql", str(bad), "SELECT 1")
    assert r.returncode == 2 and "truncated gzip" in r.stderr and str(bad) in r.stderr
    r = _cli("sql", str(tmp_path / "nope.json"), "SELECT 1")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_query_list_and_bad_sql(tmp_path: Path) -> None:
    r = _cli("query", "--list")
    assert r.returncode == 0
    trace = _sample_kineto(tmp_path)
    r = _cli("sql", str(trace), "SELECT * FROM no_such_table")
    # the error, then DuckDB's hint for the user's own SQL (`Did you mean ...?`), no LINE n:
    assert r.returncode == 2 and r.stderr.startswith("Error: ") and "LINE" not in r.stderr
    assert all(line.startswith(("Error: ", "Did you mean")) for line in r.stderr.splitlines())


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for name in main.list_commands(None):  # type: ignore[arg-type]
        r = runner.invoke(main, [name, "--help"])
        assert r.exit_code == 0 and len(r.output.splitlines()) > 3, name
