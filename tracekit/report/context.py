"""`build_report_context(traces)`: one plain object holding every figure the report shows.

All numbers come from the named queries in queries/ (the same SQL `tracekit query` runs);
this module only formats them and lays out charts. Renderers (render.py) and templates
compute nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.errors import TraceFormatError
from tracekit.present_table import Cell, Column, Table
from tracekit.redact import redact_value
from tracekit.report import charts, section_json, timeline
from tracekit.report.batched import served, served_generation, serving_split
from tracekit.report.batched import serving_sentence as batched_sentence
from tracekit.report.capture_paths import relative_paths
from tracekit.report.figures import figures, rounded
from tracekit.report.finding import Finding
from tracekit.report.findings import evaluate
from tracekit.report.model import Answer, RankView, ReportContext, TraceReport
from tracekit.report.ranks import is_rank_set, rank_rows, skew
from tracekit.report.report_rows import Job, run_jobs, run_report_queries
from tracekit.report.sections import SECTIONS, Laid, Section
from tracekit.report.serving import generation, serving_sentence
from tracekit.slo import NO_SERVING_OPTIONS, ServingOptions
from tracekit.sql import load_query
from tracekit.store.traceset import QuerySource
from tracekit.structures import titles
from tracekit.version import __version__

SENTENCE_STAGES = 6  # stages named in the answer sentence when there are more (largest first)
ENV_KEYS = {"env", "environ", "environment", "environment_variables"}


SHOWN_ROWS = 10  # a long table shows its top rows; the rest render on "show all"
FOLD_OVER = 12  # ... when it has more rows than this (hiding 1-5 rows saves nothing)
IDENTIFIERS = {"rank", "device", "stream", "pid", "tid", "bin", "lane"}  # ints that are names


def _human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; exact counts stay in the sort key and the JSON report."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def _fmt(v: Any, key: str) -> Cell:
    if v is None:
        return Cell("", "")
    if isinstance(v, float):
        if not math.isfinite(v):
            return Cell("", "")
        if key.startswith("share") or key.endswith("utilization") or key == "coverage":
            return Cell(f"{v:.1%}", repr(v))
        if key.endswith("_us"):
            return Cell(f"{v:.1f}", repr(v))
        if key == "gb_per_s":
            return Cell(f"{v:.2f}", repr(v))
        return Cell(f"{v:.3f}", repr(v))
    if isinstance(v, bool):
        return Cell(str(v).lower(), str(int(v)))
    if isinstance(v, int) and (key == "bytes" or key.endswith("_bytes")):
        return Cell(_human_bytes(v), str(v))
    if isinstance(v, int) and not (key in IDENTIFIERS or key.endswith("_id")):
        return Cell(f"{v:,}", str(v))  # counts: thousands separators
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
    pinned: int = 0,
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
        tid,
        title,
        tuple(cols),
        cells,
        note,
        query=query,
        params=shown,
        sql=load_query(query).text,
        charts=tuple(drawn),
        pinned=pinned,
        shown=SHOWN_ROWS if len(cells) - pinned > FOLD_OVER else 0,
    )


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
    "structure": "each request call of the serving structure",
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
    if not depth:  # a serving structure (tracekit/serving_structures.toml)
        return (
            f"The trace has no tracekit stages: stages from how its serving code is written, "
            f"{titles().get(how, how)} (source inferred:{how}, tracekit/serving_structures.toml), "
            f"under {req}; name stages yourself with --stage NAME=REGEX."
        )
    return (
        f"The trace has no tracekit stages: stages inferred from {_HOW.get(how, how)} "
        f"(depth {depth}) under {req}; pick another depth with --stage-depth N, or name "
        "stages with --stage NAME=REGEX."
    )


def _program_words(q: Mapping[str, list[dict[str, Any]]]) -> str:
    """'Program: inference, single rank (evidence).' from program_kind."""
    k = (q.get("program_kind") or [{}])[0]
    if not k:
        return ""
    ranks = "multi-rank" if k.get("multi_rank") else "single rank"
    graphs = (
        f"; {k['graph_kernels']} of {k['kernels']} kernels replayed from "
        f"{k['graph_launches']} graph launches"
        if k.get("graph_kernels")
        else ""
    )
    return f"Program: {k['kind']}, {ranks} ({k['kind_evidence']}; {k['rank_evidence']}{graphs})."


def _gpu_sentence(q: Mapping[str, list[dict[str, Any]]]) -> str:
    """GPU busy per device over its active span (the capture as context only), and what the
    busiest device spends its time on."""
    devs = q["gpu_devices"]
    if not devs:
        return "No GPU activity in this trace."
    parts = ", ".join(
        f"{d['device_name']} busy {d['active_utilization'] or 0:.0%} of its active span "
        f"({d['busy_ms']:.3f} of {d['active_ms'] or 0:.3f} ms, first to last GPU activity; "
        f"capture {d['window_ms']:.3f} ms, of which start-up {d['idle_before_ms'] or 0:.3f} ms "
        f"and teardown {d['idle_after_ms'] or 0:.3f} ms outside it)"
        for d in devs
    )
    top = max(devs, key=lambda d: d["busy_ms"])
    cats = [
        c
        for c in q["gpu_categories"]
        if c["device"] == top["device"] and not str(c["category"]).startswith(("memcpy", "memset"))
    ]
    text = f"GPU: {parts}."
    if cats:
        c = cats[0]
        where = f" on {top['device_name']}" if len(devs) > 1 else ""
        text += (
            f" Top kernel category{where}: {c['category']} {c['share_of_device'] or 0:.0%} of "
            f"GPU time (top kernel {c['top_kernel']}, {c['top_kernel_ms']:.3f} ms)."
        )
    return text


def _of_which(rows: Sequence[Mapping[str, Any]], parent: str, n: int) -> str:
    kids = [r for r in rows if r.get("parent") == parent]
    if not kids or n <= 0:
        return ""
    return ", of which " + ", ".join(
        f"{k['stage']} {k['host_ms'] / n:.3f} ms ({k['share_of_parent'] or 0:.0%})" for k in kids
    )


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    n = len(v)
    return (v[n // 2] + v[(n - 1) // 2]) / 2 if n else 0.0


def _latency_words(reqs: Sequence[Mapping[str, Any]], windows: bool) -> str:
    """'; host 26.000 ms, GPU finishes 130.000 ms later' when the GPU work the requests
    launched outlasts their host ranges (request_breakdown: latency = to the later of the host
    end and that GPU work's end; medians over several requests)."""
    if not reqs or windows:
        return ""
    tail = _median([float(r["gpu_tail_ms"] or 0.0) for r in reqs])
    host = _median([float(r["e2e_ms"] or 0.0) for r in reqs])
    if tail < 0.0005:  # nothing to show at the answer's precision
        return ""
    med = ": medians"
    if len(reqs) == 1:
        return f"; host {host:.3f} ms, GPU finishes {tail:.3f} ms later"
    return (
        f", to the end of their GPU work (host {host:.3f} ms, GPU finishes {tail:.3f} ms "
        f"later{med})"
    )


def _busy_words(q: Mapping[str, list[dict[str, Any]]], windows: bool) -> str:
    """' GPU busy 72% of each step's latency (median over 6 steps).' from gpu_utilization's
    request windows (a request's start to the end of its GPU work)."""
    rows = [r for r in q["gpu_utilization"] if r["scope"] == "request"]
    if not rows or windows or not q["gpu_devices"]:
        return ""
    util = _median([float(r["utilization"] or 0.0) for r in rows])
    unit = "step" if q["trace_overview"][0].get("request_source") == "ProfilerStep" else "request"
    if len(rows) == 1:
        return f" GPU busy {util:.0%} of the {unit}'s latency."
    return f" GPU busy {util:.0%} of each {unit}'s latency (median over {len(rows)} {unit}s)."


def _answer(q: Mapping[str, list[dict[str, Any]]]) -> Answer:
    rows = q["stage_summary"]
    e2e = next((r for r in rows if r["row_kind"] == "end_to_end"), None)
    split = tuple(  # top-level stages only: nested ones are inside their parent's time
        (r["stage"], r["host_ms"], r["share"] or 0.0)  # the split of host time
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
    windows = overview.get("request_source") == "window"
    lat = _latency_words(reqs, windows)
    if e2e and e2e["count"] == 1:
        parts = ", ".join(f"{name} {ms:.3f} ms ({share:.0%})" for name, ms, share in shown) + rest
        what = "The trace window" if windows else "One request"
        host = " of host time" if lat else ""
        sentence = f"{what} ({e2e['p50_ms']:.3f} ms{lat}): {parts}{host}."
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
        few = " (effectively the slowest request: under 100 requests)" if n < 100 else ""
        host = " host time" if lat else ""
        sentence = (
            f"Over {e2e['count']} requests, end-to-end p50 is {e2e['p50_ms']:.3f} ms and "
            f"p99 {e2e['p99_ms']:.3f} ms{few}{lat}; per request on average{host}: {parts}."
        )
    elif split:
        sentence = (
            f"No requests found; stage totals are shares of the trace window "
            f"({(overview.get('span_ms') or 0.0):.3f} ms)."
        )
    else:
        sentence = (
            f"No requests or stages found in the {(overview.get('span_ms') or 0.0):.3f} ms trace "
            "window: annotate with tracekit.request()/stage() or pass --stage NAME=REGEX."
        )
    sentence += _busy_words(q, windows)
    if served(q):  # a batched server: its waterfall, not stage totals spread over requests
        sentence, split = batched_sentence(q), serving_split(q)
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
        " ".join(t for t in (_program_words(q), _gpu_sentence(q)) if t),
        serving_sentence(q),
        *(
            served_generation(q)
            if served(q)
            else (
                gen.ttft_p50_ms,
                gen.ttft_p99_ms,
                gen.tpot_p50_ms,
                gen.tpot_p99_ms,
                gen.output_tokens_per_s,
            )
            if (gen := generation(q.get("generation_requests", [])))
            else (None,) * 5
        ),
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


def _trace_report(q: dict[str, list[dict[str, Any]]], trace_id: int, top_n: int) -> TraceReport:
    """One trace's part of the report, laid out from its query rows (report_rows)."""
    findings = evaluate({**q, "top_ops": q["top_ops_all"]})
    if served(q):  # a served request's time outside stages is its queue and hand-back, which
        # the serving section shows: not code left unannotated
        findings = [f for f in findings if f.id != "low_request_coverage"]
    answer = _answer(q)
    values, order = _request_values(q["request_breakdown"])
    # largest stages first, so the ones the split bar names get distinct colours
    colors = charts.stage_colors(
        [n for n, _, _ in sorted(answer.split, key=lambda s: -s[1])] + order
    )
    laid = Laid(trace_id, q, colors, values, order)
    split = _drawn(
        charts.split_bar([(n, ms) for n, ms, _ in answer.split], colors, laid.chart_id("split"))
    )
    # a section with nothing to show is left out, but for one whose note says why (no GPU
    # activity, no input shapes: what would enable it)
    laid_out = ((sec, _table(sec, laid, top_n)) for sec in SECTIONS if sec.shown(laid))
    tables = tuple(
        t for sec, t in laid_out if t.rows or t.charts or (sec.explains_empty and t.note)
    )
    ov = q["trace_overview"][0]
    return TraceReport(
        trace_id,
        f"{ov['file']} ({ov['format']}, {ov['tool_version']})",
        answer,
        tuple(findings),
        split,
        tables,
        figures(laid, answer, findings),
        _evidence(tables, findings),
        timeline.build(
            q["timeline_lanes"], colors, timeline.device_names(q), laid.chart_id("timeline")
        ),
        timeline.text_lines(
            q["request_breakdown"],
            q["timeline_lanes"],
            timeline.device_names(q),
            section_json.request_utilization(q),
        ),
    )


def _table(sec: Section, laid: Laid, top_n: int) -> Table:
    """One section laid out: its rows, columns, note and charts for this trace."""
    return make_table(
        laid.chart_id(sec.key),
        sec.title,
        sec.query,
        sec.query_params(laid.trace_id, top_n),
        sec.rows(laid) if sec.rows else laid.q[sec.query],
        sec.columns(laid) if callable(sec.columns) else sec.columns,
        sec.note(laid) if callable(sec.note) else sec.note,
        _all_drawn(sec.charts(laid)),
        sec.pinned(laid),
    )


def _drawn(chart: charts.Chart) -> charts.Chart | None:
    return chart if chart.values >= charts.MIN_VALUES else None


def _all_drawn(drawn: Sequence[charts.Chart]) -> list[charts.Chart]:
    return [c for c in drawn if c.values >= charts.MIN_VALUES]


# queries whose rows no table shows: the table that holds their evidence
EVIDENCE_TABLE = {
    "top_ops_all": "top_ops",
    "attention_score_ops": "top_ops",
    "padding_waste": "request_breakdown",
    "request_sizes": "request_breakdown",
}


def _evidence(tables: Sequence[Table], found: Sequence[Finding]) -> dict[str, str]:
    """Query name -> id of the element that shows a finding's evidence (the stages table when
    no table shows that query)."""
    by_query = {t.query: t.id for t in tables}
    fallback = by_query.get("stage_summary", tables[0].id)
    return {
        f.query: by_query.get(f.query) or by_query.get(EVIDENCE_TABLE.get(f.query, ""), fallback)
        for f in found
    }


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
        # Paths relative to the run folder: a report never shows /home/<user>/...
        for k, v in sorted(redact_value(scrub_env(relative_paths(data, p))).items()):
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
    ts: QuerySource,
    inputs: Sequence[Path] = (),
    top_n: int = 15,
    title: str = "tracekit report",
    serving: ServingOptions = NO_SERVING_OPTIONS,
) -> ReportContext:
    """Run the report queries over every trace of `ts` and lay out the report (`serving`:
    --warmup and --slo for a batched server's figures). A TraceSet over many small stores is
    first copied into memory (TraceSet.hold_in_memory: the same rows, planned once)."""
    hold = getattr(ts, "hold_in_memory", None)  # ~35 queries: many small stores as one copy
    if hold is not None:
        hold()
    # query_dicts, not sql: a DataFrame would import polars and pyarrow (0.25 s) for two columns
    formats = {int(r["trace_id"]): str(r["format"]) for r in ts.query_dicts("traces")}
    if not formats:
        raise TraceFormatError("the store holds no traces")
    traces = _trace_reports(ts, list(formats), top_n, serving)
    return ReportContext(
        title,
        __version__,
        tuple(p.name for p in inputs),
        traces,
        load_capture(list(inputs)),
        _one_run(traces, formats, inputs),
        _rank_view(ts, traces),
    )


def _trace_reports(
    ts: QuerySource, ids: Sequence[int], top_n: int, serving: ServingOptions = NO_SERVING_OPTIONS
) -> tuple[TraceReport, ...]:
    """Every trace's report, in id order (the queries of all of them at once: report_rows)."""
    rows = run_report_queries(ts, ids, top_n, serving)
    return tuple(_trace_report(rows[i], i, top_n) for i in ids)


RANK_COLS = (
    ("rank", "Rank"),
    ("file", "Trace"),
    ("device_name", "Device"),
    ("steps", "Steps"),
    ("step_ms", "Step ms"),
    ("busy_ms", "Busy ms"),
    ("compute_ms", "Compute ms"),
    ("communication_ms", "Comm. ms"),
    ("exposed_communication_ms", "Exposed comm. ms"),
    ("idle_ms", "Idle ms"),
    ("wait_ms", "Waits ms"),
    ("late", "Late"),
)


def _rank_view(ts: QuerySource, traces: Sequence[TraceReport]) -> RankView | None:
    """The cross-rank section when the source holds several ranks of one job (else None)."""
    each = run_jobs(ts, [Job("ranks", "rank_compare")], [t.trace_id for t in traces])["ranks"]
    rows = [r for t in traces for r in each[t.trace_id]]
    if not is_rank_set(rows):
        return None
    skewed = skew(rows)
    laid = rank_rows(rows, {t.trace_id: str(t.figures["file"]) for t in traces}, skewed)
    table = make_table(
        "ranks", "Ranks", "rank_compare", {"trace_id": "each trace"}, laid, RANK_COLS,
        "Per rank (a GPU device: traces.rank, else the device index): steps = the requests of "
        "the process driving it, mean duration; busy, compute and communication are unions of "
        "its activity; idle = its active span minus busy. Waits = communication time over the "
        "late rank's.",
    )  # fmt: skip
    figures = {
        "late_rank": skewed.late_rank,
        "sentence": skewed.sentence,
        "per_rank": [{k: rounded(v) for k, v in r.items() if k != "late"} for r in laid],
    }
    return RankView(table, skewed.sentence, skewed.late_rank, figures)


AGREE = 0.05  # two tools' end-to-end figures within 5%: they agree


def _one_run(
    traces: Sequence[TraceReport], formats: Mapping[int, str], inputs: Sequence[Path]
) -> str:
    """For a capture folder seen by two tools (one nsys and one Kineto trace, capture.json):
    a sentence saying so, and whether their end-to-end figures agree."""
    capture = len(inputs) == 1 and (Path(inputs[0]) / "capture.json").is_file()
    kinds = sorted(formats.values())
    if not capture or len(traces) != 2 or len(set(kinds)) != 2:
        return ""
    a, b = traces
    what = (
        f"Traces {a.trace_id} ({formats[a.trace_id]}) and {b.trace_id} ({formats[b.trace_id]}) "
        "are one capture seen by two tools; each is shown on its own clock, never summed."
    )
    ma, mb = a.answer.mean_ms, b.answer.mean_ms
    if not ma or not mb:
        return what
    gap = abs(ma - mb) / max(ma, mb)
    verdict = "they agree" if gap <= AGREE else "they disagree: compare the traces' overheads"
    return (
        f"{what} End-to-end mean {ma:.3f} ms vs {mb:.3f} ms over {a.answer.requests} vs "
        f"{b.answer.requests} requests ({gap:.1%} apart): {verdict}."
    )
