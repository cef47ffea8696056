"""A folder of per-rank traces: parallel ingest and the rank_summary query."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
from click.testing import CliRunner

import tracekit
from tests.test_export import synth
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.store import parallel
from tracekit.store.build import IngestResult, cache_path_for, ensure_trace_store
from tracekit.store.parallel import ensure_many
from tracekit.store.traceset import find_traces


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
        kernel_ms = dict(
            t.sql(
                "SELECT trace_id, sum(dur_ns) / 1e6 FROM events WHERE kind = 'kernel' GROUP BY 1"
            ).rows()
        )
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


COUNTS = (
    "SELECT 'events/' || kind, count(*) FROM events GROUP BY 1 UNION ALL "
    "SELECT 'stages/' || stage, count(*) FROM stages GROUP BY 1 UNION ALL "
    "SELECT 'threads', count(*) FROM threads UNION ALL "
    "SELECT 'requests', count(*) FROM requests"
)


def _record_pid(path: Path, rules: list, refresh: bool) -> IngestResult:
    """Stands in for tracekit.store.parallel._one: notes which process built each trace."""
    (Path(os.environ["TK_TEST_PIDS"]) / f"{path.name}.{os.getpid()}").touch()
    return ensure_trace_store(path, rules, refresh)


def _store_counts(store: Path) -> dict[str, int]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return dict(con.execute(COUNTS).fetchall())
    finally:
        con.close()


def test_parallel_ingest_matches_one_by_one(tmp_path: Path, monkeypatch) -> None:
    sizes = (2000, 3500, 5000, 2500)
    one, many = tmp_path / "one", tmp_path / "many"
    for folder in (one, many):
        folder.mkdir()
        for rank, n in enumerate(sizes):
            synth(folder / f"rank{rank}.json", n, rank=rank)
    serial = [ensure_trace_store(p, []) for p in find_traces(one)]
    want = [_store_counts(r.store) for r in serial]
    assert [r.events for r in serial] == [
        sum(v for k, v in c.items() if k.startswith("events/")) for c in want
    ]

    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("TK_TEST_PIDS", str(pids))
    monkeypatch.setattr(parallel, "_one", _record_pid)
    r = CliRunner().invoke(main, ["ingest", "--jobs", "4", str(many)])
    assert r.exit_code == 0, r.output
    got_paths = find_traces(many)
    built_by = {p.name.rsplit(".", 1)[1] for p in pids.iterdir()}
    assert len(list(pids.iterdir())) == len(sizes)  # each trace built once, in a worker
    assert len(built_by) > 1 and str(os.getpid()) not in built_by
    for p, s, w in zip(got_paths, serial, want, strict=True):
        assert f"{p}: {s.events} events, 0 skipped -> " in r.output
        assert _store_counts(cache_path_for(p)) == w

    # The same through tracekit.open: a cached reopen builds nothing and starts no workers
    # (each store found fresh is reused as it was found).
    for p in pids.iterdir():
        p.unlink()
    with tracekit.open(got_paths) as t:
        rows = t.sql("SELECT trace_id, count(*) FROM events GROUP BY 1 ORDER BY 1").rows()
    assert list(pids.iterdir()) == []
    assert [n for _, n in rows] == [s.events for s in serial]
    for p in pids.iterdir():
        p.unlink()
    with tracekit.open(got_paths, refresh=True, workers=2) as t:
        rows = t.sql("SELECT trace_id, count(*) FROM events GROUP BY 1 ORDER BY 1").rows()
    assert [n for _, n in rows] == [s.events for s in serial]
    assert len({p.name.rsplit(".", 1)[1] for p in pids.iterdir()} - {str(os.getpid())}) == 2


def test_parallel_ingest_raises_the_first_bad_trace(tmp_path: Path) -> None:
    good = [synth(tmp_path / f"rank{i}.json", 2000, rank=i) for i in (0, 2)]
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "cut off')
    try:
        ensure_many([good[0], bad, good[1]], [], workers=2)
    except TracekitError as e:
        assert str(bad) in str(e)
    else:
        raise AssertionError("a damaged trace was ingested without an error")


def test_report_over_ranks_all_at_once_equals_one_trace_at_a_time(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The report runs each query once for all the ranks (report_rows, over_traces), spread
    over one cursor per core, on an in-memory copy of the rank stores (hold_in_memory): its
    JSON is the one that each query run once per trace, on one thread, over the stores
    themselves, writes."""
    from tracekit.report import context, report_rows
    from tracekit.report.render import render
    from tracekit.store.traceset import TraceSet

    folder = _ranks(tmp_path)
    each = report_rows._each
    hold = TraceSet.hold_in_memory
    out = []
    for cores, plain in ((1, True), (2, False), (1, False)):
        monkeypatch.setattr(report_rows, "_cores", lambda c=cores: c)
        monkeypatch.setattr(report_rows, "_each", each if not plain else (
            lambda ts, job, ids: {i: ts.query_dicts(job.query, trace_id=i, **job.params)
                                  for i in ids}))  # fmt: skip
        monkeypatch.setattr(TraceSet, "hold_in_memory", hold if not plain else lambda ts: False)
        with tracekit.open(folder) as ts:
            assert ts.stores == 2
            out.append(render(context.build_report_context(ts, [folder]), "json"))
            assert ts.stores == (2 if plain else 1)  # 1: copied into memory
            assert ts.sql("SELECT count(*) AS n FROM duckdb_views() WHERE NOT internal"
                          " AND view_name = 'events'")["n"][0] == (1 if plain else 0)  # fmt: skip
    assert out[0] == out[1] == out[2]
    assert '"late_rank"' in out[0]  # the cross-rank section


def test_stores_checked_at_once_are_fresh_exactly_when_checked_alone(tmp_path: Path) -> None:
    """fresh_stores (a folder's caches in one pass) agrees with _cache_is_fresh (one store,
    its own connection) on good, stale, foreign, truncated and WAL-shadowed caches."""
    from tracekit.store.build import _cache_is_fresh, _source_key, fresh_stores

    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(6):
        synth(folder / f"rank{r}.json", 500, rank=r)
    paths = find_traces(folder)
    ensure_many(paths, [], workers=1)
    caches = [cache_path_for(p) for p in paths]
    keys = [_source_key(p, []) for p in paths]
    assert fresh_stores(caches, keys) == [True] * 6
    keys[1] = {**keys[1], "size": "0"}  # the source changed since
    con = duckdb.connect(str(caches[2]))  # a view in it: not a store tracekit wrote
    con.execute("CREATE VIEW v AS SELECT 1")
    con.close()
    data = caches[3].read_bytes()  # cut short: DuckDB may still open it
    caches[3].write_bytes(data[: len(data) // 2])
    caches[4].with_name(caches[4].name + ".wal").write_bytes(b"not its WAL")
    caches[5].unlink()
    alone = [_cache_is_fresh(c, k) for c, k in zip(caches, keys, strict=True)]
    assert alone == [True, False, False, False, False, False]
    assert fresh_stores(caches, keys) == alone
    # and the folder reopens: the bad caches are rebuilt, the good one reused
    results = ensure_many(paths, [], workers=1)
    assert [r.reused for r in results] == [True, True, False, False, False, False]
