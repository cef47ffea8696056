"""Every report query's rows, for all the traces of a source at once.

A report is ~35 small queries a trace, and a query's cost is DuckDB planning it (10-40 ms,
whatever the data). A source of N traces (the ranks of a job) therefore runs each query once
for all N (TraceSet.query_dicts_each: one LATERAL statement, tracekit.sql.over_traces), and
the queries are spread over one cursor per core: a connection runs one query at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tracekit import roofline
from tracekit.report import timeline
from tracekit.report.batched import SERVED, served, slo_row
from tracekit.report.sections import EXTRA_QUERIES, SECTIONS
from tracekit.slo import NO_SERVING_OPTIONS, ServingOptions
from tracekit.sql import load_query
from tracekit.store.traceset import QuerySource

Rows = list[dict[str, Any]]
TOP_OPS_ALL = 2**31 - 1  # top_ops' limit for every op (what the findings read)


@dataclass(frozen=True)
class Job:
    """One query to run for every trace: its rows are q[key] (params exclude trace_id)."""

    key: str
    query: str
    params: dict[str, Any] = field(default_factory=dict)


def report_jobs(top_n: int, serving: ServingOptions = NO_SERVING_OPTIONS) -> list[Job]:
    """The queries a trace's report reads: EXTRA_QUERIES, every op (top_ops_all), the
    timeline at the drawn resolution (1 px), and each section's query (two sections that read
    one query with the trace id alone share it; the top_ops section is cut from top_ops_all)."""

    def extra(name: str) -> dict[str, Any]:  # --warmup / --slo for the serving queries
        return serving.params({p.name for p in load_query(name).params}) if name in SERVED else {}

    jobs = {name: Job(name, name, extra(name)) for name in EXTRA_QUERIES}
    jobs["top_ops_all"] = Job("top_ops_all", "top_ops", {"limit": TOP_OPS_ALL})
    jobs["timeline_lanes"] = Job("timeline_lanes", "timeline_lanes", {"px": timeline.PX})
    for sec in SECTIONS:
        params = sec.query_params(0, top_n)
        del params["trace_id"]
        if sec.query == "top_ops" and params.keys() == {"limit"}:
            continue  # cut from top_ops_all (run_report_queries)
        if sec.query not in jobs or params:
            jobs[sec.query] = Job(sec.query, sec.query, {**params, **extra(sec.query)})
    return list(jobs.values())


def run_report_queries(
    ts: QuerySource,
    trace_ids: Sequence[int],
    top_n: int,
    serving: ServingOptions = NO_SERVING_OPTIONS,
) -> dict[int, dict[str, Rows]]:
    """Rows of every section's query and of EXTRA_QUERIES, per trace id (top_ops_all: every
    op, for the findings; serving_slo: each --slo target's share, batched servers only;
    op_efficiency: FLOPs per op, tracekit.roofline over op_kernels)."""
    rows = run_jobs(ts, report_jobs(top_n, serving), trace_ids)
    out = {i: {key: per_trace[i] for key, per_trace in rows.items()} for i in trace_ids}
    for q in out.values():
        for sec in SECTIONS:
            params = sec.query_params(0, top_n)
            if sec.query == "top_ops" and params.keys() == {"trace_id", "limit"}:
                # top_ops ranks before its limit: its first `limit` ranks are the same rows
                q["top_ops"] = [r for r in q["top_ops_all"] if r["rank"] <= params["limit"]]
        if served(q):  # a batch's steps serve all its requests: TTFT/TPOT are
            q["generation_requests"] = []  # serving_throughput's
    served_ids = [i for i in trace_ids if served(out[i])]
    slo: dict[int, Rows] = {i: [] for i in trace_ids}
    for s in serving.slos if served_ids else ():
        each = run_jobs(ts, [Job("slo", "serving_throughput",
                                 {"warmup": serving.warmup, s.param: s.limit_ms})],
                        served_ids)["slo"]  # fmt: skip
        for i in served_ids:
            slo[i].append(slo_row(s, each[i]))
    for i, q in out.items():
        q["serving_slo"] = slo[i]
        q["op_efficiency"] = [roofline.analyze(q)]
    return out


def run_jobs(
    ts: QuerySource, jobs: Sequence[Job], trace_ids: Sequence[int]
) -> dict[str, dict[int, Rows]]:
    """Each job's rows per trace id: on one cursor per core where the source has cursors
    (DuckDB), each query once for all the traces where the source can (query_dicts_each).
    Each cursor takes the next job when it is done with one (query costs differ 10x)."""
    cursor = getattr(ts, "cursor", None)  # TraceSet has one; Spark runs its own jobs
    workers = min(len(jobs), _cores()) if cursor is not None else 1
    if workers < 2:
        return {j.key: _each(ts, j, trace_ids) for j in jobs}
    sources = [cursor() for _ in range(workers)]  # type: ignore[misc]
    queue = iter(jobs)
    taking = threading.Lock()
    done: dict[str, dict[int, Rows]] = {}

    def run(k: int) -> None:
        while True:
            with taking:
                job = next(queue, None)
            if job is None:
                return
            done[job.key] = _each(sources[k], job, trace_ids)

    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="tracekit-report") as pool:
            list(pool.map(run, range(workers)))  # (list: a worker's error is raised here)
    finally:
        for src in sources:
            src.close()
    return {j.key: done[j.key] for j in jobs}


def _each(ts: QuerySource, job: Job, trace_ids: Sequence[int]) -> dict[int, Rows]:
    each = getattr(ts, "query_dicts_each", None)
    if each is not None:
        return each(job.query, trace_ids, **job.params)  # type: ignore[no-any-return]
    return {i: ts.query_dicts(job.query, trace_id=i, **job.params) for i in trace_ids}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
