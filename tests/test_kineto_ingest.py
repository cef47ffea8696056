"""Kineto ingest against an independent json-module pass over the same files."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

import tracekit
from tests.conftest import shared_params
from tests.kineto_oracle import complete_event_stats
from tracekit.ingest.formats import by_name


@pytest.mark.parametrize("trace", shared_params("kineto_*.json.gz"))
def test_counts_and_kernel_time_match_json_oracle(trace: Path, copy_trace) -> None:
    path = copy_trace(trace)
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    kinds, kcount, kns = complete_event_stats(path)
    with tracekit.open(path) as t:
        got_kinds = dict(
            t.sql(
                "SELECT kind, count(*) AS n FROM events WHERE kind <> 'mark' GROUP BY 1"
            ).iter_rows()
        )
        rows = t.sql(
            "SELECT name, count(*) AS n, sum(dur_ns)::BIGINT AS ns FROM events "
            "WHERE kind = 'kernel' GROUP BY 1"
        ).iter_rows()
        got = {name: (n, ns) for name, n, ns in rows}
    assert got_kinds == dict(kinds)
    assert set(got) == set(kcount)
    for name, n in kcount.items():
        assert got[name][0] == n
        # Rounding to integer ns: at most 1 ns per event.
        assert abs(got[name][1] - kns[name]) <= n, name
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before


def test_second_open_reuses_cache(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 10.0 + i,
            "dur": 0.5,
        }
        for i in range(10)
    ]
    trace.write_text(json.dumps({"traceEvents": events}))
    with tracekit.open(trace) as t:
        assert t.ingests[0].reused is False
    cache = t.ingests[0].store
    inode = cache.stat().st_ino  # a rebuild renames a new file into place
    with tracekit.open(trace) as t:
        assert t.ingests[0].reused is True
        assert t.sql("SELECT count(*) AS n FROM events")["n"][0] == 10
    assert cache.stat().st_ino == inode  # (its mtime moves: reuse marks it recently used)
    # Touching the source invalidates the cache.
    trace.write_text(json.dumps({"traceEvents": events[:5]}))
    with tracekit.open(trace) as t:
        assert t.ingests[0].reused is False
        assert t.sql("SELECT count(*) AS n FROM events")["n"][0] == 5


def _write(path: Path, events: list[dict], **top: object) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def test_nesting_self_time_and_stages(tmp_path: Path) -> None:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "tracekit:request",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "tracekit:preprocess",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 30,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::pad", "pid": 1, "tid": 1, "ts": 2, "dur": 10},
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "tracekit:inference",
            "pid": 1,
            "tid": 1,
            "ts": 40,
            "dur": 50,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::linear",
            "pid": 1,
            "tid": 1,
            "ts": 41,
            "dur": 20,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 42,
            "dur": 15,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 43,
            "dur": 5,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 50,
            "dur": 8,
            "args": {"correlation": 7, "device": 0, "stream": 7, "External id": 3},
        },
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    path = _write(tmp_path / "nest.json", ev, deviceProperties=[{"id": 0, "name": "GPU-X"}])
    with tracekit.open(path) as t:
        rows = {r["name"]: r for r in t.sql("SELECT * FROM events").to_dicts()}
        stages = t.sql("SELECT stage, request_id, dur_ns FROM stages ORDER BY start_ns").rows()
        threads = t.sql("SELECT pid, tid, thread_name FROM threads").rows()
        devices = t.sql("SELECT devices FROM traces").item()
    assert rows["aten::linear"]["depth"] == 2
    assert rows["aten::addmm"]["parent_id"] == rows["aten::linear"]["event_id"]
    assert rows["aten::linear"]["self_ns"] == 5_000
    assert rows["aten::addmm"]["self_ns"] == 10_000
    assert rows["aten::pad"]["stage"] == "preprocess"
    assert rows["gemm"]["launch_id"] == rows["cudaLaunchKernel"]["event_id"]
    assert rows["gemm"]["stage"] == "inference" and rows["gemm"]["request_id"] == 1
    assert rows["gemm"]["device"] == 0 and rows["gemm"]["stream"] == 7
    assert stages == [("preprocess", 1, 30_000), ("inference", 1, 50_000)]
    assert threads == [(1, 1, "main")]
    assert json.loads(devices)[0]["name"] == "GPU-X"


def test_stage_rules_and_stage_sequence_requests(tmp_path: Path) -> None:
    ev = []
    for i in range(3):
        base = i * 100
        ev += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "tokenize",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 10,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "forward",
                "pid": 1,
                "tid": 1,
                "ts": base + 20,
                "dur": 50,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "forward",
                "pid": 1,
                "tid": 1,
                "ts": base + 30,
                "dur": 10,
            },
        ]
    path = _write(tmp_path / "rules.json", ev)
    rules = [tracekit.parse_rule("preprocess=^tokenize$"), tracekit.parse_rule("inference=forward")]
    with tracekit.open(path, stage_rules=rules) as t:
        stages = t.sql("SELECT request_id, stage, dur_ns FROM stages ORDER BY start_ns").rows()
        reqs = t.sql("SELECT request_id, source, dur_ns FROM requests ORDER BY 1").rows()
    # The nested 'forward' is not a second inference stage: outermost match only.
    assert stages == [
        (r, s, d) for r in (1, 2, 3) for s, d in (("preprocess", 10_000), ("inference", 50_000))
    ]
    assert reqs == [(r, "stage-sequence", 70_000) for r in (1, 2, 3)]


def test_gzip_and_array_format_and_begin_end(tmp_path: Path) -> None:
    ev = [
        {"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 25},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 6, "dur": 1},
    ]
    path = tmp_path / "arr.json.gz"
    path.write_bytes(gzip.compress(json.dumps(ev).encode()))
    with tracekit.open(path) as t:
        rows = t.sql("SELECT kind, name, dur_ns, depth FROM events ORDER BY start_ns").rows()
    assert rows == [("range", "outer", 20_000, 0), ("cpu_op", "aten::add", 1_000, 1)]


def test_skipped_events_are_counted(tmp_path: Path) -> None:
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no-ts", "pid": 1, "tid": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 1, "dur": -1},
        {"ph": "X", "cat": "cpu_op", "name": "str", "pid": 1, "tid": 1, "ts": "x", "dur": 1},
    ]
    path = _write(tmp_path / "bad.json", ev)
    with tracekit.open(path) as t:
        n, skipped = t.sql("SELECT event_count, skipped_count FROM traces").row(0)
    assert (n, skipped) == (1, 3)


def test_environment_never_reaches_the_store(tmp_path):
    secret = "hunter2-token"
    trace = tmp_path / "env.json"
    trace.write_text(json.dumps({
        "schemaVersion": 1,
        "metadata": {"system": {"env": {"API_KEY": secret}, "hostname": "h"}},
        "environ": {"X": secret},
        "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                         "ts": 10, "dur": 5}],
    }))  # fmt: skip
    with tracekit.open(trace) as t:
        meta = t.sql("SELECT metadata::VARCHAR AS m FROM traces")["m"][0]
    # only the recording's facts are kept (issue 40): the program's own metadata stays in the file
    assert secret not in meta and "schemaVersion" in meta and "hostname" not in meta
    assert secret in trace.read_text()  # the input is untouched


def test_epoch_microsecond_timestamps_keep_nanosecond_precision(tmp_path):
    trace = tmp_path / "epoch.json"
    # Integer epoch-µs ts: ts * 1000.0 in floats would land on ...900992.
    trace.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1,'
                     ' "tid": 1, "ts": 1733212345678901, "dur": 3}]}')  # fmt: skip
    with tracekit.open(trace) as t:
        row = t.sql("SELECT start_ns, dur_ns FROM events")
    assert row["start_ns"][0] == 1733212345678901000
    assert row["dur_ns"][0] == 3000


def test_build_memory_limit_follows_the_json_size(tmp_path: Path, monkeypatch) -> None:
    from tracekit.ingest import json_scan
    from tracekit.store import build as store

    monkeypatch.delenv(store.MEMORY_ENV, raising=False)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(1_000_000_000)  # sparse: only the size is read
    assert store._memory_limit(big, by_name("kineto")) == ("600000000B", True)
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(b'{"traceEvents": []}' + b" " * 10_000))
    assert json_scan.document_size(small) == 10_019  # the gzip trailer's size
    assert store._memory_limit(small, by_name("kineto")) == (
        f"{128 * 1024**2}B",
        True,
    )  # the floor
    assert store._memory_limit(big, by_name("nsys")) == (
        "2000000000B",
        True,
    )  # 2x the file, capped
    assert store._memory_limit(small, by_name("nsys")) == (
        f"{512 * 1024**2}B",
        True,
    )  # the floor
    assert store._memory_limit(big, by_name("nsys-rep")) == ("2GB", False)
    monkeypatch.setenv(store.MEMORY_ENV, "3GB")
    assert store._memory_limit(big, by_name("kineto")) == ("3GB", False)


def test_build_retries_with_the_default_limit_when_the_derived_one_is_too_tight(
    tmp_path: Path, monkeypatch
) -> None:
    import duckdb

    from tracekit.store import build as store

    monkeypatch.delenv(store.MEMORY_ENV, raising=False)
    limits = []
    real = store._build

    def tight_first(source, out, rules, fmt, memory_limit):  # type: ignore[no-untyped-def]
        limits.append(memory_limit)
        if len(limits) == 1:
            raise duckdb.OutOfMemoryException("Out of Memory Error: test")
        return real(source, out, rules, fmt, memory_limit)

    monkeypatch.setattr(store, "_build", tight_first)
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "op",
                        "pid": 1,
                        "tid": 1,
                        "ts": 1,
                        "dur": 2,
                    }
                ]
            }
        )
    )
    with tracekit.open(path) as t:
        assert t.sql("SELECT count(*) AS n FROM events")["n"][0] == 1
    assert limits == [f"{128 * 1024**2}B", "2GB"]
