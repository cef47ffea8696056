"""A folder of per-rank traces: parallel ingest and the rank_summary query."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import tracekit
from tests.test_export import synth
from tracekit.cli import main
from tracekit.parallel import ensure_many
from tracekit.traceset import find_traces


def _ranks(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    synth(folder / "rank0.json", 3000, rank=0)
    synth(folder / "rank1.json", 3000, rank=1)
    return folder


def test_ensure_many_matches_sequential(tmp_path: Path) -> None:
    folder = _ranks(tmp_path)
    paths = find_traces(folder)
    results = ensure_many(paths, [], workers=2)
    assert [r.source for r in results] == paths
    assert all(not r.reused and r.events > 0 for r in results)
    again = ensure_many(paths, [], workers=2)
    assert all(r.reused for r in again)
    refreshed = ensure_many(paths, [[], []], refresh=True, workers=1)
    assert [r.events for r in refreshed] == [r.events for r in results]


def test_rank_summary_over_a_folder(tmp_path: Path) -> None:
    folder = _ranks(tmp_path)
    ensure_many(find_traces(folder), [], workers=2)
    with tracekit.open(folder) as t:
        rows = t.query("rank_summary").to_dicts()
        ranks = t.sql("SELECT trace_id, rank FROM traces ORDER BY 1").rows()
        kernel_ms = dict(t.sql("SELECT trace_id, sum(dur_ns) / 1e6 FROM events "
                               "WHERE kind = 'kernel' GROUP BY 1").rows())
    assert ranks == [(1, 0), (2, 1)]
    assert [(r["rank"], r["stage"]) for r in rows] == [
        (rank, stage) for rank in (0, 1) for stage in ("inference", "postprocess", "preprocess")
    ]
    for r in rows:
        assert r["requests"] > 0 and r["stage_count"] == r["requests"]
        assert r["p50_ms"] <= r["p99_ms"]
        assert abs(r["gpu_kernel_ms"] - kernel_ms[r["trace_id"]]) < 1e-9
    # Two ranks: the median lies halfway, so the skews are equal and opposite.
    g0, g1 = rows[0]["gpu_skew_pct"], rows[3]["gpu_skew_pct"]
    assert abs(g0 + g1) < 1e-9


def test_cli_ingest_folder(tmp_path: Path) -> None:
    folder = _ranks(tmp_path)
    r = CliRunner().invoke(main, ["ingest", str(folder)])
    assert r.exit_code == 0, r.output
    assert r.output.count(" events, 0 skipped -> ") == 2
