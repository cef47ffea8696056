"""A query once for many traces (tracekit.sql.over_traces) gives each trace exactly the rows,
in the order, that the query gives it alone: the oracle is the plain query run once per trace.

Sets: synthetic ranks of one job, the shared two-rank TorchRec folder, and every shared trace
file at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.conftest import SHARED_TRACES, shared_traces
from tests.test_export import synth
from tracekit.errors import QueryError
from tracekit.sql import EACH_TRACE, ID_TYPES, TRACE_IDS, all_queries
from tracekit.store.traceset import Rows, TraceSet

# Every shared trace file, of every kind, in one source (nsys exports and Kineto traces; CUDA
# and HIP graphs, memory events, NVTX, several devices): the LATERAL form's planning differs
# with the data's shape, and DuckDB's decorrelation has had wrong-result bugs.
MIXED = ("*.json.gz", "*.sqlite")
# Params beyond trace_id as the report passes them (the rest take their defaults).
PARAMS: dict[str, dict[str, Any]] = {"top_ops": {"limit": 3}, "top_kernels": {"limit": 3}}


def _sets(tmp_path: Path) -> list[list[Path]]:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(3):
        synth(ranks / f"rank{r}.json", 2000, rank=r)
    sets = [[ranks]]
    torchrec = SHARED_TRACES / "kineto_ampere_torchrec_2of128ranks_sampled_hta"
    if torchrec.is_dir():
        sets.append([torchrec])
    mixed = [p for pattern in MIXED for p in shared_traces(pattern)]
    if len(mixed) > 1:
        sets.append(mixed)
    return sets


def _separate(ts: TraceSet, name: str, ids: list[int]) -> dict[int, list[tuple[Any, ...]]]:
    return {
        i: [tuple(r.values()) for r in ts.query_dicts(name, trace_id=i, **PARAMS.get(name, {}))]
        for i in ids
    }


def _planned(ts: TraceSet, name: str, params: dict[str, Any]) -> Rows:
    """The query's over_traces form run with the first id type DuckDB plans it with."""
    errors = []
    for id_type in ID_TYPES:
        try:
            return ts.rows(all_queries()[name].over_traces(id_type) or "", params)
        except QueryError as e:
            errors.append(str(e).splitlines()[0])
    raise AssertionError(f"{name}: no id type plans: {errors}")


def test_each_trace_gets_its_own_rows_in_its_own_order(tmp_path: Path) -> None:
    batched = {n for n, q in all_queries().items() if q.over_traces() is not None}
    assert {"timeline_lanes", "top_ops", "request_breakdown", "trace_overview"} <= batched
    for paths in _sets(tmp_path):
        with tracekit.open(paths) as ts:
            if len(paths) > 1:  # every shared trace: on the in-memory copy a report of small
                # stores reads (TraceSet.hold_in_memory); the folders on the stores' views
                assert ts.hold_in_memory(events_per_store=10**9)
            ids = [int(r["trace_id"]) for r in ts.query_dicts("traces")]
            assert len(ids) > 1
            for name in sorted(batched):
                q = all_queries()[name]
                params = q.bind({"trace_id": ids[0], **PARAMS.get(name, {})})
                del params["trace_id"]
                res = _planned(ts, name, {**params, TRACE_IDS: ids})
                assert res.columns[0] == EACH_TRACE
                got: dict[int, list[tuple[Any, ...]]] = {i: [] for i in ids}
                for row in res.rows:
                    got[row[0]].append(tuple(row[1:]))
                assert got == _separate(ts, name, ids), (name, paths)


def test_each_trace_rows_through_the_traceset(tmp_path: Path) -> None:
    """TraceSet.query_dicts_each: batched where it can, once per trace where DuckDB cannot."""
    (ranks,) = _sets(tmp_path)[0]
    with tracekit.open(ranks) as ts:
        ids = [1, 2, 3]
        for name in ("top_ops", "top_kernels", "gpu_streams", "trace_overview", "host_waits"):
            each = ts.query_dicts_each(name, ids, **PARAMS.get(name, {}))
            want = _separate(ts, name, ids)
            assert {i: [tuple(r.values()) for r in rows] for i, rows in each.items()} == want


@pytest.mark.parametrize(
    "text, number",
    [
        (
            "SELECT a FROM t ORDER BY a DESC, b LIMIT $limit",
            "row_number() OVER (ORDER BY a DESC, b)",
        ),
        (
            "SELECT (SELECT x FROM y ORDER BY z LIMIT 1) AS a FROM t ORDER BY t.a",
            "row_number() OVER (ORDER BY t.a)",
        ),
        ("SELECT ')' AS a FROM t ORDER BY a -- order by r.x\n", "row_number() OVER (ORDER BY a)"),
        (
            "WITH u AS (SELECT 1 UNION ALL SELECT 2) SELECT * FROM t ORDER BY 1",
            "row_number() OVER (ORDER BY 1)",
        ),
        ("SELECT count(*) AS n FROM t ORDER BY trace_id", "1"),  # one row a trace
        ("SELECT a FROM t UNION ALL SELECT b FROM t ORDER BY 1", None),  # a set operation
        ("SELECT DISTINCT a FROM t ORDER BY a", None),  # a number would keep duplicates
    ],
)
def test_numbered_inside(text: str, number: str | None) -> None:
    from tracekit.sql import over_traces

    q = over_traces(text.replace("FROM t", "FROM t WHERE trace_id = $trace_id"))
    if number is None:
        assert q is None
    else:
        assert q is not None and f"{number} AS __tk_row" in q
        assert q.endswith(f"ORDER BY {EACH_TRACE}, __tk_q.__tk_row")
        assert "$trace_id" not in q and "__tk_each.id" in q


def test_query_over_every_trace_in_one_statement(tmp_path: Path) -> None:
    """TraceSet.query with no trace_id (`tracekit query NAME FOLDER`) gives the rows that
    running the query once per trace and concatenating gives."""
    from tracekit.sql import run_named_query

    (ranks,) = _sets(tmp_path)[0]
    with tracekit.open(ranks) as ts:
        # nvtx_gpu_projection says `-- per_trace:`: no one-statement form, run once per trace
        assert all_queries()["nvtx_gpu_projection"].over_traces() is None
        for name in ("top_ops", "timeline_lanes", "request_sizes", "gpu_streams",
                     "nvtx_gpu_projection"):  # fmt: skip
            got = ts.query(name).to_dicts()
            assert got == run_named_query(ts.sql, name, {}).to_dicts(), name
            assert {r["trace_id"] for r in got} == {1, 2, 3}
