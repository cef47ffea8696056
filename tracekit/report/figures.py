"""The JSON report's per-trace object: plain data over query rows (docs/report.md documents
the keys; the sections that show each key are in sections.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from tracekit.report.batched import served, serving_figures
from tracekit.report.finding import Finding
from tracekit.report.model import Answer
from tracekit.report.serving import generation
from tracekit.report.timeline import device_names, timeline_json
from tracekit.roofline import JSON_ROWS


def rounded(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v


def _program(q: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The program kind (program_kind): inference/training/other, single or multi-rank."""
    rows = q.get("program_kind") or []
    if not rows:
        return None
    k = rows[0]
    return {key: v for key, v in k.items() if key != "trace_id"}


def roofline_json(a: Mapping[str, Any]) -> dict[str, Any]:
    """The roofline analysis (tracekit.roofline.analyze) as plain rounded data."""

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return rounded(v)

    out = {k: v for k, v in a.items() if not k.startswith("_")}
    out["ops"] = list(out.get("ops", []))[:JSON_ROWS]
    out["kernels"] = list(out.get("kernels", []))[:JSON_ROWS]
    return clean(out)  # type: ignore[no-any-return]


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
                "e2e_ms": rounded(r["e2e_ms"]),  # the host range
                "latency_ms": rounded(r["latency_ms"]),  # to the end of its GPU work
                "gpu_tail_ms": rounded(r["gpu_tail_ms"]),
                "gpu_idle_before_ms": rounded(r["gpu_idle_before_ms"]),
                "stages": {k: rounded(v) for k, v in json.loads(r["stages_json"]).items()},
                "unattributed_ms": rounded(r["unattributed_ms"]),
                "gpu_busy_ms": rounded(r["gpu_busy_ms"]),
            }
            for r in q["request_breakdown"]
        ],
        "top_ops": [{k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["top_ops"]],
        # one trace-wide ranking (full names), the per-stage rows apart
        "top_kernels": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["top_kernels_trace"]
        ],
        "top_kernels_by_stage": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in q["top_kernels"]
        ],
        "program": _program(q),
        "gpu": {
            # every utilization names its window: "active" = each device's first to last GPU
            # activity (the headline), "capture" = the trace's span (context only)
            "windows": {
                "utilization": "capture",
                "active_utilization": "active",
                "by_stage[].utilization": "stage",
                "per_request[].gpu_busy_ms": "request",
            },
            "busy_ms": rounded(trace_gpu.get("busy_ms")),
            "active_ms": rounded(sum(r["active_ms"] or 0 for r in q["gpu_devices"])),
            "active_utilization": rounded(
                sum(r["busy_ms"] or 0 for r in q["gpu_devices"])
                / sum(r["active_ms"] or 0 for r in q["gpu_devices"])
                if sum(r["active_ms"] or 0 for r in q["gpu_devices"])
                else None
            ),
            "window_ms": rounded(trace_gpu.get("window_ms")),
            "utilization": rounded(trace_gpu.get("utilization")),
            "devices": trace_gpu.get("devices", 0) if trace_gpu else 0,
            "per_device": [
                {
                    "device": r["device"],
                    "name": r["device_name"],
                    "busy_ms": rounded(r["busy_ms"]),
                    "active_ms": rounded(r["active_ms"]),
                    "active_utilization": rounded(r["active_utilization"]),
                    "idle_before_ms": rounded(r["idle_before_ms"]),
                    "idle_after_ms": rounded(r["idle_after_ms"]),
                    "capture_ms": rounded(r["window_ms"]),
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
        "generation": _generation(q),
        "stage_host_waits": [
            {k: rounded(v) for k, v in r.items() if k != "trace_id"}
            for r in q.get("stage_host_waits", [])
        ],
        "graph_replay": next(
            (
                {k: rounded(v) for k, v in r.items() if k != "trace_id"}
                for r in q.get("graph_replay", [])
                if r["replayed_kernels"]
            ),
            None,
        ),
        "roofline": roofline_json(q["op_efficiency"][0]),
        "timeline": timeline_json(q.get("timeline_lanes", []), device_names(q)),
        "memory": {
            "peaks": [
                {k: rounded(v) for k, v in r.items() if k != "trace_id"}
                for r in q.get("memory_peaks", [])
            ],
            "timeline": [
                {k: rounded(v) for k, v in r.items() if k != "trace_id"}
                for r in q.get("memory_timeline", [])
                if r["events"] or r["allocated_bytes"] is not None
            ],
        },
        **({"serving": serving_figures(q)} if served(q) else {}),  # batched servers only
        "findings": [
            {
                "id": f.id,
                "severity": f.severity,
                "title": f.title,
                "evidence": f.evidence,
                "query": f.query,
                "next_step": f.next_step,
                "numbers": {k: rounded(v) for k, v in f.numbers.items()},
                "scope": f.scope,
            }
            for f in findings
        ],
    }


def _generation(q: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """TTFT / TPOT percentiles and the per-request rows of generation_requests (None: no
    prefill/decode steps)."""
    rows = q.get("generation_requests", [])
    g = generation(rows)
    if g is None:
        return None
    return {
        **{k: rounded(v) for k, v in asdict(g).items()},
        "per_request": [{k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in rows],
    }
