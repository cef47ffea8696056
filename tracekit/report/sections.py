"""The report's sections as data: one `Section` per table (its query, title, columns, note,
charts, and the JSON report key that holds the same figures), in page order. context.py runs
every section's query and lays each out the same way; report.html.j2 and report.md.j2 render
them in one loop; figures.py writes each section's JSON (`Section.json_figures`: its query's
rows at its json_key, or its `json` callable from section_json.py); docs/report.md's section
list is generated from SECTIONS (tools/gen_docs.py). Adding a section is one entry here plus
its queries/<name>.sql (docs/architecture.md).

A section's callables receive `Laid`: the trace's query rows and the values every section
shares (stage colours, per-request values, whether there is GPU activity).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.report import charts, memory, roofline_section, section_json
from tracekit.report.batched import served
from tracekit.report.batched import serving_sentence as batched_sentence

Rows = Sequence[Mapping[str, Any]]
Columns = tuple[tuple[str, str], ...]

NO_GPU_NOTE = (
    "No GPU activity in this capture: no kernels, copies or memsets were recorded (a CPU-only "
    "run, or CUDA was not traced), so there is no GPU busy or idle time to show."
)
HTML_REQUEST_ROWS = 50  # slowest requests listed in the HTML/md table (JSON has all)
REQUEST_STAGE_COLUMNS = 8  # stages given a column in the requests table (pipeline order)
BUSY_BARS = 6  # stages drawn in the GPU busy/idle chart (longest windows first)


@dataclass(frozen=True)
class Laid:
    """What a section's callables see for one trace."""

    trace_id: int
    q: Mapping[str, list[dict[str, Any]]]  # query name -> rows (report_rows.run_report_queries)
    colors: Mapping[str, str]  # stage -> colour, the same in every chart
    values: list[dict[str, float]]  # per request: stage -> ms (+ unattributed)
    order: list[str]  # stages in pipeline order (first seen first), unattributed last

    @property
    def has_gpu(self) -> bool:
        return bool(self.q["trace_overview"][0]["gpu_events"])

    @property
    def nested(self) -> bool:
        return any(r.get("parent") for r in self.q["stage_summary"])

    def chart_id(self, name: str) -> str:
        return f"t{self.trace_id}-{name}"


def _none(_: Laid) -> Sequence[charts.Chart]:
    return ()


@dataclass(frozen=True)
class Section:
    """One table of the report (and the charts drawn under it)."""

    key: str = field(metadata={"help": "the table's HTML id is t<trace_id>-<key>"})
    title: str = field(metadata={"help": "heading"})
    query: str = field(metadata={"help": "queries/<query>.sql gives the rows"})
    json_key: str = field(metadata={"help": "key of the JSON report's trace object with them"})
    columns: Columns | Callable[[Laid], Columns] = field(metadata={"help": "(column, label)"})
    limit: bool = field(default=False, metadata={"help": "the query takes the report's top N"})
    params: Mapping[str, Any] = field(default_factory=dict, metadata={"help": "fixed params"})
    rows: Callable[[Laid], Rows] | None = field(
        default=None, metadata={"help": "rows shown (default: the query's rows)"}
    )
    note: str | Callable[[Laid], str] = field(default="", metadata={"help": "line under it"})
    charts: Callable[[Laid], Sequence[charts.Chart]] = field(
        default=_none, metadata={"help": "charts under it (fewer than 3 values: left out)"}
    )
    pinned: Callable[[Laid], int] = field(
        default=lambda _: 0, metadata={"help": "last rows kept below the others (totals)"}
    )
    shown: Callable[[Laid], bool] = field(
        default=lambda _: True, metadata={"help": "whether the trace gets this section"}
    )
    explains_empty: bool = field(
        default=False,
        metadata={"help": "kept with no rows when its note says why (no GPU, no shapes)"},
    )
    json: Callable[[Laid], section_json.Json] | None = field(
        default=None,
        metadata={"help": "{JSON path: value} for the trace object (default: the query's rows "
                  "at json_key)"},
    )  # fmt: skip

    def json_figures(self, laid: Laid) -> section_json.Json:
        """What this section puts in the JSON report's trace object (every trace, shown or
        not, as the JSON report always had them)."""
        if self.json is not None:
            return self.json(laid)
        if not self.json_key:
            return {}
        if "," in self.json_key:
            raise ValueError(f"section {self.key}: several JSON keys need a json callable")
        return {self.json_key: section_json.query_rows(laid.q[self.query])}

    def query_params(self, trace_id: int, top_n: int) -> dict[str, Any]:
        """The parameters its query runs with (and the table shows)."""
        return {"trace_id": trace_id, **({"limit": top_n} if self.limit else {}), **self.params}


# ---- column sets: (query column, header)
STAGE_COLS = (
    ("stage", "Stage"),
    ("count", "Requests"),
    ("instances", "Ranges"),
    ("total_ms", "Total ms"),
    ("mean_ms", "Mean ms"),
    ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"),
    ("p99_ms", "p99 ms"),
    ("max_ms", "Max ms"),
    ("host_ms", "Host ms"),
    ("share", "Share of host time"),
    ("gpu_busy_ms", "GPU busy ms"),
    ("gpu_span_ms", "GPU span ms"),
)
# the requests table: these, one column per stage of the trace (_request_columns), then these
REQ_HEAD_COLS = (
    ("request_id", "Request"),
    ("start_ms", "Start ms"),
    ("latency_ms", "Latency ms"),
    ("e2e_ms", "Host ms"),
)
REQ_TAIL_COLS = (
    ("unattributed_ms", "Unattributed ms"),
    ("gpu_busy_ms", "GPU busy ms"),
    ("gpu_utilization", "GPU util (request)"),
)
OPS_COLS = (
    ("stage", "Stage"),
    ("rank", "#"),
    ("name", "Op"),
    ("calls", "Calls"),
    ("self_ms", "Self ms"),
    ("total_ms", "Total ms"),
    ("mean_ms", "Mean self ms"),
    ("share_of_stage", "Share of stage"),
    ("share_of_ops", "Share of op time"),
)
KERNEL_COLS = (
    ("stage", "Stage"),
    ("rank", "#"),
    ("name", "Kernel"),
    ("launched_by", "Launched by"),
    ("count", "Count"),
    ("total_ms", "Total ms"),
    ("mean_ms", "Mean ms"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("share_of_stage_gpu", "Share of stage GPU"),
    ("coverage", "Coverage"),
)
KERNEL_TRACE_COLS = (
    ("rank", "#"),
    ("short_name", "Kernel"),
    ("category", "Category"),
    ("devices", "Devices"),
    ("count", "Count"),
    ("total_ms", "Total ms"),
    ("mean_ms", "Mean ms"),
    ("max_ms", "Max ms"),
    ("share_of_kernel_time", "Share of kernel time"),
)
GPU_COLS = (
    ("scope", "Scope"),
    ("name", "Window"),
    ("windows", "Windows"),
    ("window_ms", "Window ms"),
    ("busy_ms", "Busy ms"),
    ("idle_ms", "Idle ms"),
    ("utilization", "Utilization"),
)
DEVICE_COLS = (
    ("device", "Device"),
    ("device_name", "Name"),
    ("streams", "Streams"),
    ("kernels", "Kernels"),
    ("busy_ms", "Busy ms"),
    ("active_ms", "Active ms"),
    ("active_utilization", "Active util"),
    ("window_ms", "Capture ms"),
    ("utilization", "Capture util"),
    ("communication_ms", "Communication ms"),
    ("exposed_communication_ms", "Exposed comm. ms"),
)
CATEGORY_COLS = (
    ("device", "Device"),
    ("category", "Category"),
    ("count", "Count"),
    ("total_ms", "Total ms"),
    ("share_of_device", "Share of device"),
    ("top_kernel", "Top kernel"),
    ("top_kernel_ms", "Top kernel ms"),
)
STREAM_COLS = (
    ("device", "Device"),
    ("stream", "Stream"),
    ("activities", "Activities"),
    ("busy_ms", "Busy ms"),
    ("share_of_device_busy", "Share of device busy"),
    ("utilization", "Capture util"),
    ("top_category", "Top category"),
)
GAP_COLS = (
    ("rank", "#"),
    ("kind", "Gap"),
    ("request_id", "Request"),
    ("gap_start_ms", "Start ms"),
    ("gap_ms", "Gap ms"),
    ("before", "GPU before"),
    ("after", "GPU after"),
    ("stage", "Stage"),
    ("host_op", "Host doing"),
    ("host_kind", "Kind"),
    ("host_overlap_ms", "Overlap ms"),
)
MEMCPY_COLS = (
    ("direction", "Direction"),
    ("count", "Count"),
    ("bytes", "Bytes"),
    ("total_ms", "Total ms"),
    ("gb_per_s", "GB/s"),
    ("pageable_count", "Pageable"),
    ("sync_count", "Synchronous"),
    ("stages", "Stages"),
)
LAUNCH_COLS = (
    ("api", "API"),
    ("calls", "Calls"),
    ("api_ms", "API ms"),
    ("mean_api_us", "Mean API µs"),
    ("gpu_events", "GPU events"),
    ("gpu_ms", "GPU ms"),
    ("queue_p50_us", "Queue p50 µs"),
    ("queue_p99_us", "Queue p99 µs"),
    ("queue_clamped", "Queue clamped"),
)
OVERVIEW_COLS = (
    ("file", "File"),
    ("format", "Format"),
    ("tool_version", "Tool"),
    ("span_ms", "Span ms"),
    ("events", "Events"),
    ("requests", "Requests"),
    ("stage_names", "Stages"),
    ("kernels", "Kernels"),
    ("device_names", "Devices"),
)

MODEL_COLS = roofline_section.MODEL_COLS
SERVING_COLS = (
    ("part", "Part"),
    ("requests", "Requests"),
    ("mean_ms", "Mean ms"),
    ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"),
    ("p99_ms", "p99 ms"),
    ("max_ms", "Max ms"),
    ("share", "Share of e2e"),
)
NEST_COLS = (("parent", "Nested in"), ("share_of_parent", "Share of parent"))
OPS_VIA_COLS = (("via", "In nested stage"),)
PY_COLS = (("stage", "Stage"), ("rank", "#"), ("name", "Function"), ("kind", "Kind"),
           ("via", "In nested stage"), ("calls", "Calls"), ("self_ms", "Self ms"),
           ("share_of_stage", "Share of stage"), ("share_cumulative", "Cumulative"),
           ("coverage", "Coverage"))  # fmt: skip


MEMORY_COLS = (
    ("scope", "Scope"),
    ("device_name", "Device"),
    ("stage", "Stage"),
    ("events", "Events"),
    ("allocations", "Allocs"),
    ("frees", "Frees"),
    ("peak_allocated_bytes", "Peak allocated"),
    ("peak_reserved_bytes", "Peak reserved"),
    ("peak_at_ms", "Peak at ms"),
    ("capacity_bytes", "Capacity"),
    ("share_of_capacity", "Share of capacity"),
    ("reserved_over_allocated", "Reserved / allocated"),
)


# ---- the sections' parts


def _stage_rows(laid: Laid) -> Rows:
    """Stage rows with nested stages shown as '↳ child' (they follow their parent)."""
    return [{**r, "stage": f"↳ {r['stage']}"} if r.get("parent") else dict(r)
            for r in laid.q["stage_summary"]]  # fmt: skip


def _stage_columns(laid: Laid) -> Columns:
    return STAGE_COLS + (NEST_COLS if laid.nested else ())


HIST_MIN_VALUES = 20  # a distribution of fewer requests is better read from the table
HIST_MAX = 6  # histograms drawn: the stages with the most time (the table has every stage)


def _histograms(laid: Laid) -> Sequence[charts.Chart]:
    samples = {s: [v[s] for v in laid.values if s in v] for s in laid.order}
    enough = [s for s in laid.order if len(samples[s]) >= HIST_MIN_VALUES]
    kept = set(sorted(enough, key=lambda s: -sum(samples[s]))[:HIST_MAX])
    return [
        charts.histogram(samples[s], s, laid.colors[s], laid.chart_id(f"hist-{i}"))
        for i, s in enumerate(laid.order)
        if s in kept
    ]


def _slowest(laid: Laid) -> list[dict[str, Any]]:
    return sorted(laid.q["request_breakdown"], key=lambda r: (-r["latency_ms"], r["request_id"]))


def _stages(laid: Laid) -> list[str]:
    """The trace's stages in pipeline order (unattributed aside)."""
    return [s for s in laid.order if s != "unattributed"]


def _request_rows(laid: Laid) -> Rows:
    named = set(_stages(laid)[:REQUEST_STAGE_COLUMNS])  # the rest: 'Other stages'
    util = section_json.request_utilization(laid.q)
    out = []
    for r in _slowest(laid)[:HTML_REQUEST_ROWS]:
        per_stage = {str(k): float(v) for k, v in json.loads(r["stages_json"]).items()}
        row = {**r, **{f"stage:{k}": v for k, v in per_stage.items()}}
        row["gpu_utilization"] = util.get(r["request_id"])
        row["stage:*"] = sum(v for k, v in per_stage.items() if k not in named)
        out.append(row)
    return out


def _request_columns(laid: Laid) -> Columns:
    """Request, start, end-to-end, one column per stage from the data (first seen first; past
    REQUEST_STAGE_COLUMNS the rest in 'Other stages'), unattributed, GPU busy."""
    stages = _stages(laid)
    cols = [(f"stage:{s}", f"{s} ms") for s in stages[:REQUEST_STAGE_COLUMNS]]
    if len(stages) > REQUEST_STAGE_COLUMNS:
        cols.append(("stage:*", "Other stages ms"))
    return (*REQ_HEAD_COLS, *cols, *REQ_TAIL_COLS)


def _request_note(laid: Laid) -> str:
    n = len(laid.q["request_breakdown"])
    window = (
        "Latency = from the request's start to the later of its host end and the end of the GPU "
        "work it launched; host ms = its host range. GPU util (request) = the devices' busy time "
        "in that latency window over the window (device-time); GPU busy ms = the union of the "
        "GPU work it launched."
    )
    if n <= HTML_REQUEST_ROWS:
        return window
    return f"{window} {HTML_REQUEST_ROWS} of {n} requests shown; the JSON report has all."


def _request_charts(laid: Laid) -> Sequence[charts.Chart]:
    return [
        charts.request_bars(laid.values, laid.order, laid.colors, laid.chart_id("requests-chart")),
    ]


def _gpu_rows(laid: Laid) -> Rows:
    return [r for r in laid.q["gpu_utilization"] if r["scope"] != "request"] if laid.has_gpu else []


def _gpu_note(laid: Laid) -> str:
    return (
        "Windows: active = the GPU's active span, first to last GPU activity (the trace-wide "
        "figure); trace = the whole capture, start-up and teardown included (context only); "
        "stage = its ranges. Per-request GPU busy time is in the requests table."
        if laid.has_gpu
        else NO_GPU_NOTE
    )


def _gpu_charts(laid: Laid) -> Sequence[charts.Chart]:
    if not laid.has_gpu:
        return ()
    windows = [r for r in laid.q["gpu_utilization"] if r["scope"] in ("active", "stage")]
    # the active span and the stages with the longest windows; the table lists every stage
    shown = windows[:1] + sorted(windows[1:], key=lambda r: -r["window_ms"])[:BUSY_BARS]
    return [
        charts.busy_bars([(str(r["name"]), r["busy_ms"], r["window_ms"]) for r in shown],
                         laid.chart_id("gpu-busy")),
    ]  # fmt: skip


def _memory_charts(laid: Laid) -> Sequence[charts.Chart]:
    names = {int(r["device"]): str(r["device_name"]) for r in laid.q["memory_peaks"]}
    return [memory.memory_chart(laid.q["memory_timeline"], names, laid.chart_id("memory-chart"))]


SECTIONS: tuple[Section, ...] = (
    Section("overview", "Trace", "trace_overview", "file, format, span_ms, devices",
            OVERVIEW_COLS, json=section_json.overview),
    Section("serving", "Served requests: queue, batch stages, hand-back", "serving_waterfall",
            "serving", SERVING_COLS,
            note=lambda laid: batched_sentence(laid.q) + " Per request: queue = arrival -> its "
                 "batch starts; the batch's stages (each belongs to every request of the "
                 "batch); hand-back = batch end -> response (queries/serving_requests.sql).",
            shown=lambda laid: served(laid.q),
            pinned=lambda laid: 1, json=section_json.serving),
    Section("stages", "Stages", "stage_summary", "stages, requests.end_to_end", _stage_columns,
            rows=_stage_rows,
            note="Statistics across requests of per-request stage totals, as latencies that "
                 "include the GPU: a stage ends at the later of its host end and the end of the "
                 "GPU work launched in it (its GPU tail), a request likewise. Host ms = the host "
                 "ranges alone; shares split the host time. Percentiles are quantile_cont "
                 "(linear interpolation).",
            charts=_histograms,
            pinned=lambda laid: sum(1 for r in laid.q["stage_summary"]
                                    if r["row_kind"] != "stage"),
            json=section_json.stages),
    Section("requests", "Requests (slowest first)", "request_breakdown", "per_request",
            _request_columns, rows=_request_rows, note=_request_note, charts=_request_charts,
            json=section_json.per_request),
    Section("ops", "Top host ops per stage", "top_ops", "top_ops",
            lambda laid: OPS_COLS + (OPS_VIA_COLS if laid.nested else ()), limit=True),
    Section("python", "Top Python/native functions per stage", "python_functions", "",
            PY_COLS, limit=True,
            note="From torch.profiler Python events (tracekit capture --python); each stage's "
                 "list goes past the top N until it covers 80% of the stage.",
            # without Python events top_ops already says it
            shown=lambda laid: any(r["kind"] == "python"
                                   for r in laid.q["python_functions"])),
    Section("kernels_trace", "Top GPU kernels (whole trace)", "top_kernels_trace",
            "top_kernels", KERNEL_TRACE_COLS, limit=True,
            note="One ranking over every stage; kernels counted by full name (the short name "
                 "is for display only); share = of all kernels' summed time."),
    Section("kernels", "Top GPU kernels per stage", "top_kernels", "top_kernels_by_stage",
            KERNEL_COLS, limit=True),
    Section("roofline", "Operator efficiency (roofline)", "op_kernels", "roofline.ops",
            roofline_section.op_columns, rows=roofline_section.op_rows,
            note=roofline_section.op_note, charts=roofline_section.roofline_chart,
            explains_empty=True, json=section_json.roofline),
    Section("model_flops", "Model FLOPs per request", "op_kernels", "roofline.model",
            MODEL_COLS, rows=roofline_section.model_rows, note=roofline_section.model_note,
            shown=lambda laid: bool(roofline_section.model_rows(laid)),
            json=section_json.in_other_section),
    Section("gpu", "GPU busy / idle", "gpu_utilization", "gpu.busy_ms, gpu.by_stage", GPU_COLS,
            rows=_gpu_rows, note=_gpu_note, charts=_gpu_charts, explains_empty=True,
            json=section_json.gpu),
    Section("devices", "GPU devices", "gpu_devices", "gpu.per_device", DEVICE_COLS,
            note="Busy = union of the device's kernel, memcpy and memset intervals. Active ms = "
                 "the device's active span (first to last GPU activity); active util = busy / "
                 "active span, the trace-wide figure. Capture ms = the whole capture (start-up "
                 "and teardown included) and capture util = busy / capture: context only. "
                 "Exposed communication: communication time "
                 "with no other kernel running on that device.",
            json=section_json.devices),
    Section("categories", "GPU activity by category", "gpu_categories",
            "gpu.per_device[].by_category", CATEGORY_COLS,
            note="Each kernel, copy and memset in exactly one category (rules: "
                 "tracekit/categories.toml); totals are plain sums of durations.",
            json=section_json.in_other_section),
    Section("streams", "GPU streams", "gpu_streams", "gpu.per_device[].streams", STREAM_COLS,
            note="Capture util = the stream's busy time / the whole capture (context only).",
            json=section_json.in_other_section),
    Section("gaps", "Longest GPU idle gaps", "idle_gaps", "idle_gaps", GAP_COLS,
            params={"limit": 10},
            note="Gap: between two busy periods; lead-in: a request's start to its first GPU "
                 "activity; tail: its last GPU activity to its end. Host doing: the deepest "
                 "host event covering at least half as much of the gap as any does."),
    Section("memcpy", "Memory copies", "memcpy_summary", "memcpy", MEMCPY_COLS),
    Section("launch", "Launch overhead", "launch_overhead", "launch_overhead", LAUNCH_COLS,
            note="Queue = GPU start minus the end of the launching call, clamped at 0; queue "
                 "clamped counts the GPU events that started before their call returned."),
    Section("memory", "Memory (allocator peaks)", "memory_peaks", "memory", MEMORY_COLS,
            note="From the caching allocator's events (torch.profiler profile_memory=True): "
                 "peaks are the largest totals an event reports, per device, then the "
                 f"{memory.STAGE_ROWS} stages with the highest peaks per device (the JSON "
                 "report has all). Host: Device Id -1. Without totals in the events (torch "
                 "1.9, nsys --cuda-memory-usage): the running sum of their bytes from the "
                 "trace's start.",
            rows=lambda laid: memory.shown_rows(laid.q["memory_peaks"]),
            charts=_memory_charts, shown=lambda laid: bool(laid.q["memory_peaks"]),
            json=section_json.memory),
)  # fmt: skip

# queries the answer, the findings and the charts read besides the sections' own
EXTRA_QUERIES = ("stage_attributes", "padding_waste", "attention_score_ops", "request_sizes",
                 "host_waits", "program_kind",
                 "blocking_calls", "stage_host_waits", "graph_replay",
                 "generation_requests", "sequence_lengths", "memory_timeline",
                 "serving_throughput")  # fmt: skip
