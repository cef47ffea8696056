"""The JSON report's per-trace object and the column sets of the report tables.

Both are plain data over query rows (docs/report.md documents the JSON keys).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracekit.report.findings import Finding

if TYPE_CHECKING:
    from tracekit.report.context import Answer


def rounded(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v


def figures(
    q: Mapping[str, list[dict[str, Any]]], answer: Answer, findings: Sequence[Finding]
) -> dict[str, Any]:
    ov = q["trace_overview"][0]
    e2e = next((r for r in q["stage_summary"] if r["row_kind"] == "end_to_end"), None)
    stat_keys = ("count", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")
    trace_gpu = next((r for r in q["gpu_utilization"] if r["scope"] == "trace"), {})
    return {
        "trace_id": ov["trace_id"],
        "file": ov["file"],
        "format": ov["format"],
        "tool_version": ov["tool_version"],
        "span_ms": rounded(ov["span_ms"]),
        "events": ov["events"],
        "devices": [d for d in (ov["device_names"] or "").split(", ") if d],
        "requests": {
            "count": answer.requests,
            "source": answer.source,
            "throughput_rps": rounded(answer.throughput_rps),
            "end_to_end": {k: rounded(e2e[k]) for k in stat_keys} if e2e else None,
        },
        "stages": [
            {
                "stage": r["stage"],
                "kind": r["row_kind"],
                "source": r["source"],
                "instances": r["instances"],
                "total_ms": rounded(r["total_ms"]),
                "share": rounded(r["share"]),
                "gpu_busy_ms": rounded(r["gpu_busy_ms"]),
                "gpu_span_ms": rounded(r["gpu_span_ms"]),
                **{k: rounded(r[k]) for k in stat_keys},
            }
            for r in q["stage_summary"]
            if r["row_kind"] != "end_to_end"
        ],
        "per_request": [
            {
                "request_id": r["request_id"],
                "start_ms": rounded(r["start_ms"]),
                "e2e_ms": rounded(r["e2e_ms"]),
                "stages": {k: rounded(v) for k, v in json.loads(r["stages_json"]).items()},
                "unattributed_ms": rounded(r["unattributed_ms"]),
                "gpu_busy_ms": rounded(r["gpu_busy_ms"]),
            }
            for r in q["request_breakdown"]
        ],
        "top_ops": [{k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["top_ops"]],
        "top_kernels": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["top_kernels"]
        ],
        "gpu": {
            "busy_ms": rounded(trace_gpu.get("busy_ms")),
            "window_ms": rounded(trace_gpu.get("window_ms")),
            "utilization": rounded(trace_gpu.get("utilization")),
            "devices": trace_gpu.get("devices", 0) if trace_gpu else 0,
            "per_device": [
                {
                    "device": r["device"],
                    "name": r["device_name"],
                    "busy_ms": rounded(r["busy_ms"]),
                    "utilization": rounded(r["utilization"]),
                    "streams": [
                        {
                            "stream": s["stream"],
                            "busy_ms": rounded(s["busy_ms"]),
                            "utilization": rounded(s["utilization"]),
                        }
                        for s in q["gpu_streams"]
                        if s["device"] == r["device"]
                    ],
                    "by_category": {
                        k: rounded(v) for k, v in json.loads(r["by_category_json"] or "{}").items()
                    },
                    "communication_ms": rounded(r["communication_ms"]),
                    "exposed_communication_ms": rounded(r["exposed_communication_ms"]),
                }
                for r in q["gpu_devices"]
            ],
            "by_stage": [
                {
                    "stage": r["name"],
                    "busy_ms": rounded(r["busy_ms"]),
                    "window_ms": rounded(r["window_ms"]),
                    "utilization": rounded(r["utilization"]),
                }
                for r in q["gpu_utilization"]
                if r["scope"] == "stage"
            ],
        },
        "memcpy": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["memcpy_summary"]
        ],
        "launch_overhead": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["launch_overhead"]
        ],
        "idle_gaps": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["idle_gaps"]
        ],
        "findings": [
            {
                "id": f.id,
                "severity": f.severity,
                "title": f.title,
                "evidence": f.evidence,
                "query": f.query,
                "next_step": f.next_step,
                "numbers": {k: rounded(v) for k, v in f.numbers.items()},
            }
            for f in findings
        ],
    }


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
    ("share", "Share of e2e"),
    ("gpu_busy_ms", "GPU busy ms"),
    ("gpu_span_ms", "GPU span ms"),
)
REQ_COLS = (
    ("request_id", "Request"),
    ("start_ms", "Start ms"),
    ("e2e_ms", "End-to-end ms"),
    ("preprocess_ms", "Preprocess ms"),
    ("inference_ms", "Inference ms"),
    ("postprocess_ms", "Postprocess ms"),
    ("other_stages_ms", "Other stages ms"),
    ("unattributed_ms", "Unattributed ms"),
    ("gpu_busy_ms", "GPU busy ms"),
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
    ("window_ms", "Window ms"),
    ("utilization", "Utilization"),
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
    ("utilization", "Utilization"),
    ("top_category", "Top category"),
)
GAP_COLS = (
    ("rank", "#"),
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
