"""`build_report_context(traces)`: one plain object holding every figure the report shows.

All numbers come from the named queries in queries/ (the same SQL `tracekit query` runs);
this module only formats them and lays out charts. Renderers (render.py) and templates
compute nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tracekit
from tracekit.errors import TraceFormatError
from tracekit.redact import redact_value
from tracekit.report import charts
from tracekit.report.figures import (
    CATEGORY_COLS,
    DEVICE_COLS,
    GAP_COLS,
    GPU_COLS,
    KERNEL_COLS,
    LAUNCH_COLS,
    MEMCPY_COLS,
    OPS_COLS,
    OVERVIEW_COLS,
    REQ_COLS,
    STAGE_COLS,
    STREAM_COLS,
    figures,
)
from tracekit.report.findings import Finding, evaluate
from tracekit.sql import load_query
from tracekit.traceset import QuerySource

NO_GPU_NOTE = (
    "No GPU activity in this capture: no kernels, copies or memsets were recorded (a CPU-only "
    "run, or CUDA was not traced), so there is no GPU busy or idle time to show."
)
SENTENCE_STAGES = 6  # stages named in the answer sentence when there are more (largest first)
HTML_REQUEST_ROWS = 50  # slowest requests listed in the HTML/md table (JSON has all)
ENV_KEYS = {"env", "environ", "environment", "environment_variables"}


@dataclass(frozen=True)
class Cell:
    text: str = field(metadata={"help": "the value as shown"})
    sort: str = field(metadata={"help": "sort key (a number as text for numeric columns)"})


@dataclass(frozen=True)
class Column:
    key: str = field(metadata={"help": "the query's column name"})
    label: str = field(metadata={"help": "header text"})
    numeric: bool = field(metadata={"help": "right-aligned, sorted as numbers"})


@dataclass(frozen=True)
class Table:
    """One table of query rows, with the SQL that produced it."""

    id: str = field(metadata={"help": "HTML id, unique in the report"})
    title: str = field(metadata={"help": "section heading"})
    query: str = field(metadata={"help": "queries/<name>.sql that produced the rows"})
    params: str = field(metadata={"help": "parameters the query ran with"})
    sql: str = field(metadata={"help": "the query text"})
    columns: tuple[Column, ...] = field(metadata={"help": "shown columns"})
    rows: tuple[tuple[Cell, ...], ...] = field(metadata={"help": "formatted cells"})
    note: str = field(default="", metadata={"help": "a line under the table"})
    charts: tuple[charts.Chart, ...] = field(default=(), metadata={"help": "drawn after it"})


@dataclass(frozen=True)
class Answer:
    """The headline: end-to-end latency and where it goes."""

    requests: int = field(metadata={"help": "requests in the trace"})
    source: str = field(metadata={"help": "where requests came from (tracekit:request ...)"})
    p50_ms: float | None = field(metadata={"help": "end-to-end p50 (quantile_cont)"})
    p99_ms: float | None = field(metadata={"help": "end-to-end p99"})
    mean_ms: float | None = field(metadata={"help": "end-to-end mean"})
    throughput_rps: float | None = field(metadata={"help": "requests / (last end - first start)"})
    split: tuple[tuple[str, float, float], ...] = field(
        metadata={"help": "(stage, total ms, share of end-to-end), unattributed last"}
    )
    sentence: str = field(metadata={"help": "the answer in one sentence"})
    stage_source: str = field(
        default="", metadata={"help": "where the stages came from, in words ('' if none)"}
    )
    gpu_sentence: str = field(
        default="", metadata={"help": "GPU busy per device and the top category/kernel"}
    )


@dataclass(frozen=True)
class TraceReport:
    """Everything about one trace of the input."""

    trace_id: int = field(metadata={"help": "1..N in input order"})
    title: str = field(metadata={"help": "file name and format"})
    answer: Answer = field(metadata={"help": "headline figures"})
    findings: tuple[Finding, ...] = field(metadata={"help": "rule results, most severe first"})
    split_chart: charts.Chart | None = field(metadata={"help": "stage split bar (the answer)"})
    tables: tuple[Table, ...] = field(metadata={"help": "stage, request, ops, kernels ... tables"})
    figures: Mapping[str, Any] = field(metadata={"help": "the JSON report's trace object"})


@dataclass(frozen=True)
class ReportContext:
    """The one object the templates receive."""

    title: str = field(metadata={"help": "report title"})
    tracekit_version: str = field(metadata={"help": "tracekit version that wrote the report"})
    inputs: tuple[str, ...] = field(metadata={"help": "input names as given (base names)"})
    traces: tuple[TraceReport, ...] = field(metadata={"help": "one section per trace"})
    environment: tuple[tuple[str, str], ...] = field(
        metadata={"help": "capture.json facts (command, versions, devices); never env values"}
    )


def _fmt(v: Any, key: str) -> Cell:
    if v is None:
        return Cell("", "")
    if isinstance(v, float):
        if not math.isfinite(v):
            return Cell("", "")
        if key.startswith("share") or key in ("utilization", "coverage"):
            return Cell(f"{v:.1%}", repr(v))
        if key.endswith("_us"):
            return Cell(f"{v:.1f}", repr(v))
        if key == "gb_per_s":
            return Cell(f"{v:.2f}", repr(v))
        return Cell(f"{v:.3f}", repr(v))
    if isinstance(v, bool):
        return Cell(str(v).lower(), str(int(v)))
    if isinstance(v, int):
        return Cell(str(v), str(v))
    return Cell(str(v), str(v))


def make_table(
    tid: str,
    title: str,
    query: str,
    params: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    note: str = "",
    drawn: Sequence[charts.Chart] = (),
) -> Table:
    cols = []
    for key, label in columns:
        numeric = any(
            isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) for r in rows
        )
        cols.append(Column(key, label, numeric))
    cells = tuple(tuple(_fmt(r.get(c.key), c.key) for c in cols) for r in rows)
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return Table(
        tid, title, query, shown, load_query(query).text, tuple(cols), cells, note, tuple(drawn)
    )


def run_queries(ts: QuerySource, trace_id: int, top_n: int) -> dict[str, list[dict[str, Any]]]:
    """Rows of every report query for one trace (top_ops_all: every op, for the findings)."""
    q = {
        name: ts.query_dicts(name, trace_id=trace_id)
        for name in (
            "trace_overview",
            "stage_summary",
            "request_breakdown",
            "gpu_utilization",
            "memcpy_summary",
            "launch_overhead",
            "stage_attributes",
            "padding_waste",
            "attention_score_ops",
            "request_sizes",
        )
    }
    q["top_ops"] = ts.query_dicts("top_ops", trace_id=trace_id, limit=top_n)
    q["top_ops_all"] = ts.query_dicts("top_ops", trace_id=trace_id, limit=2**31 - 1)
    q["top_kernels"] = ts.query_dicts("top_kernels", trace_id=trace_id, limit=top_n)
    q["python_functions"] = ts.query_dicts("python_functions", trace_id=trace_id, limit=top_n)
    q["idle_gaps"] = ts.query_dicts("idle_gaps", trace_id=trace_id, limit=10)
    for name in ("gpu_devices", "gpu_categories", "gpu_streams", "host_waits"):
        q[name] = ts.query_dicts(name, trace_id=trace_id)
    return q


_HOW = {
    "modules": "the nn.Module tree",
    "ranges": "the top-level NVTX / user-annotation ranges",
    "ops": "the top-level operators",
}
_REQ_WORDS = {
    "ProfilerStep": "each ProfilerStep",
    "repeated-range": "each repeated top-level range",
    "window": "the window of each working host thread (the trace has no request ranges)",
    "tracekit:request": "each request",
    "stage-sequence": "each request",
}


def _stage_source(q: Mapping[str, list[dict[str, Any]]]) -> str:
    """'Stages inferred from the nn.Module tree (depth 5) under each ProfilerStep ...'."""
    sources = sorted({str(r["source"]) for r in q["stage_summary"] if r.get("source")})
    if not sources:
        return ""
    inferred = [s for s in sources if s.startswith("inferred:")]
    if not inferred:
        return (
            "Stages from "
            + " and ".join(
                {"annotated": "tracekit annotations", "rule": "--stage rules"}.get(s, s)
                for s in sources
            )
            + "."
        )
    how, _, depth = inferred[0].removeprefix("inferred:").partition(" depth ")
    req = _REQ_WORDS.get(q["trace_overview"][0].get("request_source") or "", "each request")
    return (
        f"The trace has no tracekit stages: stages inferred from {_HOW.get(how, how)} "
        f"(depth {depth}) under {req}; pick another depth with --stage-depth N, or name "
        "stages with --stage NAME=REGEX."
    )


def _gpu_sentence(q: Mapping[str, list[dict[str, Any]]]) -> str:
    """GPU busy per device, and what the busiest device spends its time on."""
    devs = q["gpu_devices"]
    if not devs:
        return "No GPU activity in this trace."
    parts = ", ".join(
        f"{d['device_name']} busy {d['utilization'] or 0:.0%} ({d['busy_ms']:.3f} of "
        f"{d['window_ms']:.3f} ms)"
        for d in devs
    )
    top = max(devs, key=lambda d: d["busy_ms"])
    cats = [c for c in q["gpu_categories"] if c["device"] == top["device"]]
    text = f"GPU: {parts}."
    if cats:
        c = cats[0]
        where = f" on {top['device_name']}" if len(devs) > 1 else ""
        text += (
            f" Top activity{where}: {c['category']} {c['share_of_device']:.0%} of GPU time "
            f"(top kernel {c['top_kernel']}, {c['top_kernel_ms']:.3f} ms)."
        )
    return text


NEST_COLS = (("parent", "Nested in"), ("share_of_parent", "Share of parent"))
OPS_VIA_COLS = (("via", "In nested stage"),)
PY_COLS = (("stage", "Stage"), ("rank", "#"), ("name", "Function"), ("kind", "Kind"),
           ("via", "In nested stage"), ("calls", "Calls"), ("self_ms", "Self ms"),
           ("share_of_stage", "Share of stage"), ("share_cumulative", "Cumulative"),
           ("coverage", "Coverage"))  # fmt: skip


def _nested(rows: Sequence[Mapping[str, Any]]) -> bool:
    return any(r.get("parent") for r in rows)


def _indent_children(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stage rows with nested stages shown as '↳ child' (they follow their parent)."""
    return [{**r, "stage": f"↳ {r['stage']}"} if r.get("parent") else dict(r) for r in rows]


def _of_which(rows: Sequence[Mapping[str, Any]], parent: str, n: int) -> str:
    kids = [r for r in rows if r.get("parent") == parent]
    if not kids or n <= 0:
        return ""
    return ", of which " + ", ".join(
        f"{k['stage']} {k['total_ms'] / n:.3f} ms ({k['share_of_parent'] or 0:.0%})" for k in kids
    )


def _answer(q: Mapping[str, list[dict[str, Any]]]) -> Answer:
    rows = q["stage_summary"]
    e2e = next((r for r in rows if r["row_kind"] == "end_to_end"), None)
    split = tuple(  # top-level stages only: nested ones are inside their parent's time
        (r["stage"], r["total_ms"], r["share"] or 0.0)
        for r in rows
        if r["row_kind"] != "end_to_end" and not r.get("parent")
    )
    reqs = q["request_breakdown"]
    rps = None
    if len(reqs) > 1:
        span = max(r["start_ms"] + r["e2e_ms"] for r in reqs) - min(r["start_ms"] for r in reqs)
        rps = len(reqs) / (span / 1e3) if span > 0 else None
    overview = q["trace_overview"][0]
    shown = sorted(split, key=lambda s: -s[1])[:SENTENCE_STAGES]
    more = len(split) - len(shown)
    rest = f" and {more} more (table below)" if more > 0 else ""
    if e2e and e2e["count"] == 1:
        parts = ", ".join(f"{name} {ms:.3f} ms ({share:.0%})" for name, ms, share in shown) + rest
        what = "The trace window" if overview.get("request_source") == "window" else "One request"
        sentence = f"{what} ({e2e['p50_ms']:.3f} ms): {parts}."
    elif e2e and overview.get("request_source") == "window":
        parts = (
            ", ".join(
                f"{name} {ms / e2e['count']:.3f} ms ({share:.0%})" for name, ms, share in shown
            )
            + rest
        )
        sentence = (
            f"No requests in the trace: one window per working host thread ({e2e['count']} "
            f"threads, mean {e2e['mean_ms']:.3f} ms); per thread on average: {parts}."
        )
    elif e2e:
        n = e2e["count"]
        listed = split if len(split) <= SENTENCE_STAGES else shown
        parts = (
            ", ".join(
                f"{name} {ms / n:.3f} ms ({share:.0%}{_of_which(rows, name, n)})"
                for name, ms, share in listed
            )
            + rest
        )  # "" when every stage is listed
        sentence = (
            f"Over {e2e['count']} requests, end-to-end p50 is {e2e['p50_ms']:.3f} ms and "
            f"p99 {e2e['p99_ms']:.3f} ms; per request on average: {parts}."
        )
    elif split:
        sentence = "No requests found; stage totals are shares of the trace span."
    else:
        sentence = (
            "No requests or stages found: annotate with tracekit.request()/stage() or "
            "pass --stage NAME=REGEX."
        )
    # one request, or windows that are not requests: no percentiles
    many = e2e is not None and e2e["count"] > 1 and overview.get("request_source") != "window"
    return Answer(
        len(reqs),
        overview.get("request_source") or "",
        e2e["p50_ms"] if many and e2e else None,
        e2e["p99_ms"] if many and e2e else None,
        e2e["mean_ms"] if e2e else None,
        rps,
        split,
        sentence,
        _stage_source(q),
        _gpu_sentence(q),
    )


def _request_values(reqs: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, float]], list[str]]:
    values, order = [], []
    for r in reqs:
        d = {k: float(v) for k, v in json.loads(r["stages_json"]).items()}
        for k in d:
            if k not in order:
                order.append(k)
        d["unattributed"] = float(r["unattributed_ms"])
        values.append(d)
    return values, order + ["unattributed"]


def _trace_report(ts: QuerySource, trace_id: int, top_n: int) -> TraceReport:
    q = run_queries(ts, trace_id, top_n)
    findings = evaluate({**q, "top_ops": q["top_ops_all"]})
    answer = _answer(q)
    p = {"trace_id": trace_id}
    pl = {"trace_id": trace_id, "limit": top_n}
    values, order = _request_values(q["request_breakdown"])
    colors = charts.stage_colors([n for n, _, _ in answer.split] + order)
    split = (
        charts.split_bar([(n, ms) for n, ms, _ in answer.split], colors) if answer.split else None
    )
    req_charts = (
        [charts.request_bars(values, order, colors, f"t{trace_id}-requests")] if values else []
    )
    busy_rows = [
        (str(r["name"]), r["busy_ms"], r["window_ms"])
        for r in q["gpu_utilization"]
        if r["scope"] in ("trace", "stage")
    ]
    has_gpu = bool(q["trace_overview"][0]["gpu_events"])
    gpu_charts = [charts.busy_bars(busy_rows, f"t{trace_id}-gpu-busy")] if has_gpu else []
    hists = list(
        charts.histogram([v[s] for v in values if s in v], s, colors[s], f"t{trace_id}-hist-{i}")
        for i, s in enumerate(order)
    )
    slowest = sorted(q["request_breakdown"], key=lambda r: (-r["e2e_ms"], r["request_id"]))
    n_req = len(slowest)
    t = f"t{trace_id}"
    tables = (
        make_table(
            f"{t}-overview", "Trace", "trace_overview", p, q["trace_overview"], OVERVIEW_COLS
        ),
        make_table(
            f"{t}-stages",
            "Stages",
            "stage_summary",
            p,
            _indent_children(q["stage_summary"]),
            STAGE_COLS + (NEST_COLS if _nested(q["stage_summary"]) else ()),
            "Statistics across requests of per-request stage totals; percentiles are "
            "quantile_cont (linear interpolation).",
            hists,
        ),
        make_table(
            f"{t}-requests",
            "Requests (slowest first)",
            "request_breakdown",
            p,
            slowest[:HTML_REQUEST_ROWS],
            REQ_COLS,
            f"{min(n_req, HTML_REQUEST_ROWS)} of {n_req} requests shown; the JSON report has all."
            if n_req > HTML_REQUEST_ROWS
            else "",
            req_charts,
        ),
        make_table(
            f"{t}-ops",
            "Top host ops per stage",
            "top_ops",
            pl,
            q["top_ops"],
            OPS_COLS + (OPS_VIA_COLS if _nested(q["stage_summary"]) else ()),
        ),  # fmt: skip
        *(
            [
                make_table(
                    f"{t}-python",
                    "Top Python/native functions per stage",
                    "python_functions",
                    pl,
                    q["python_functions"],
                    PY_COLS,
                    "From torch.profiler Python events (tracekit capture --python).",
                )
            ]
            if any(r["kind"] == "python" for r in q["python_functions"])  # else top_ops says it
            else []
        ),  # fmt: skip
        make_table(
            f"{t}-kernels",
            "Top GPU kernels per stage",
            "top_kernels",
            pl,
            q["top_kernels"],
            KERNEL_COLS,
        ),
        make_table(
            f"{t}-gpu",
            "GPU busy / idle",
            "gpu_utilization",
            p,
            [r for r in q["gpu_utilization"] if r["scope"] != "request"] if has_gpu else [],
            GPU_COLS,
            "Per-request GPU busy time is in the requests table." if has_gpu else NO_GPU_NOTE,
            gpu_charts,
        ),
        make_table(
            f"{t}-devices",
            "GPU devices",
            "gpu_devices",
            p,
            q["gpu_devices"],
            DEVICE_COLS,
            "Busy = union of the device's kernel, memcpy and memset intervals; utilization = "
            "busy / trace span. Exposed communication: communication time with no other kernel "
            "running on that device.",
        ),
        make_table(
            f"{t}-categories",
            "GPU activity by category",
            "gpu_categories",
            p,
            q["gpu_categories"],
            CATEGORY_COLS,
            "Each kernel, copy and memset in exactly one category (rules: "
            "tracekit/categories.toml); totals are plain sums of durations.",
        ),
        make_table(f"{t}-streams", "GPU streams", "gpu_streams", p, q["gpu_streams"], STREAM_COLS),
        make_table(
            f"{t}-gaps",
            "Longest GPU idle gaps",
            "idle_gaps",
            {**p, "limit": 10},
            q["idle_gaps"],
            GAP_COLS,
        ),
        make_table(
            f"{t}-memcpy", "Memory copies", "memcpy_summary", p, q["memcpy_summary"], MEMCPY_COLS
        ),
        make_table(
            f"{t}-launch",
            "Launch overhead",
            "launch_overhead",
            p,
            q["launch_overhead"],
            LAUNCH_COLS,
        ),
    )
    ov = q["trace_overview"][0]
    return TraceReport(
        trace_id,
        f"{ov['file']} ({ov['format']}, {ov['tool_version']})",
        answer,
        tuple(findings),
        split,
        tables,
        figures(q, answer, findings),
    )


def scrub_env(value: Any) -> Any:
    """Drop environment-variable maps at any depth (they carry tokens and keys)."""
    if isinstance(value, dict):
        return {k: scrub_env(v) for k, v in value.items() if str(k).lower() not in ENV_KEYS}
    if isinstance(value, list):
        return [scrub_env(v) for v in value]
    return value


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def load_capture(paths: Sequence[Path]) -> tuple[tuple[str, str], ...]:
    """Facts from capture.json of a run dir among the inputs (command, versions, devices)."""
    for p in paths:
        f = p / "capture.json" if p.is_dir() else None
        if f is None or not f.is_file():
            continue
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError, RecursionError) as e:
            raise TraceFormatError(f"{f}: not valid JSON ({_one_line(e)})") from None
        if not isinstance(data, dict):
            raise TraceFormatError(f"{f}: expected a JSON object")
        out = []
        # Secrets in command lines (--password=..., --hf-token X) never reach a report.
        for k, v in sorted(redact_value(scrub_env(data)).items()):
            if (
                isinstance(v, list)
                and k in ("command", "argv")
                and all(isinstance(a, str) for a in v)
            ):
                out.append((k, " ".join(v)))
            else:
                out.append((k, v if isinstance(v, str) else json.dumps(v, sort_keys=True)))
        return tuple(out)
    return ()


def build_report_context(
    ts: QuerySource, inputs: Sequence[Path] = (), top_n: int = 15, title: str = "tracekit report"
) -> ReportContext:
    """Run the report queries over every trace of `ts` and lay out the report."""
    ids = ts.sql("SELECT trace_id FROM traces ORDER BY 1")["trace_id"].to_list()
    if not ids:
        raise TraceFormatError("the store holds no traces")
    traces = tuple(_trace_report(ts, i, top_n) for i in ids)
    return ReportContext(
        title,
        tracekit.__version__,
        tuple(p.name for p in inputs),
        traces,
        load_capture(list(inputs)),
    )
