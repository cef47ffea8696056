"""`tracekit export --parquet`: the folder answers the same questions as the store."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import duckdb
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

REPO = Path(__file__).resolve().parent.parent

STAGES = (
    "SELECT stage, count(*) AS n, sum(dur_ns)::BIGINT AS ns, "
    "quantile_disc(dur_ns, 0.5) AS p50 FROM {src} GROUP BY 1 ORDER BY 1"
)
KERNELS = (
    "SELECT name, count(*) AS n, sum(dur_ns)::BIGINT AS ns FROM {src} "
    "WHERE kind = 'kernel' GROUP BY 1 ORDER BY 1"
)


def synth(path: Path, events: int = 3000, rank: int = 0) -> Path:
    """A small trace from bench/gen_kineto.py."""
    spec = importlib.util.spec_from_file_location("gen_kineto", REPO / "bench" / "gen_kineto.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_kineto", mod)
    spec.loader.exec_module(mod)
    with open(path, "w") as f:
        mod.generate(f, events, seed=rank, rank=rank, world=2)
    return path


def test_export_parquet_matches_store(tmp_path: Path) -> None:
    trace = synth(tmp_path / "t.json")
    out = tmp_path / "pq"
    r = CliRunner().invoke(main, ["export", str(trace), "--parquet", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Wrote {out} (")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["traces", "threads", "events", "stages", "requests", "attributes", "gpu_islands",
         "batches", "request_batches"]
    )  # fmt: skip
    assert (out / "events" / "trace_id=1").is_dir()
    with tracekit.open(trace) as t:
        want_stages = t.sql(STAGES.format(src="stages")).rows()
        want_kernels = t.sql(KERNELS.format(src="events")).rows()
    con = duckdb.connect()

    def pq(table: str) -> str:
        return f"read_parquet('{out}/{table}/**/*.parquet', hive_partitioning=true)"

    assert con.execute(STAGES.format(src=pq("stages"))).fetchall() == want_stages
    assert con.execute(KERNELS.format(src=pq("events"))).fetchall() == want_kernels
    assert want_stages and want_kernels
    # trace_id comes back from the folder names
    assert con.execute(f"SELECT DISTINCT trace_id FROM {pq('events')}").fetchall() == [(1,)]
    # An empty table (no attribute sidecar here) still has every column, trace_id included.
    with tracekit.open(trace) as t:
        want_cols = t.sql("SELECT * FROM attributes").columns
    got = con.execute(f"SELECT * FROM {pq('attributes')}")
    assert sorted(d[0] for d in got.description) == sorted(want_cols)
    assert got.fetchall() == []


def test_export_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    trace = synth(tmp_path / "t.json", 500)
    out = tmp_path / "pq"
    out.mkdir()
    r = CliRunner().invoke(main, ["export", str(trace), "--parquet", str(out)])
    assert r.exit_code == 2
    assert "pass --force" in r.output
    r = CliRunner().invoke(main, ["export", str(trace), "--parquet", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert (out / "events").is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pq")]
