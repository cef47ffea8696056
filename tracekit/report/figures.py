"""The JSON report's per-trace object: plain data over query rows (docs/report.md documents
the keys; the sections that show each key are in sections.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tracekit.report.findings import Finding
from tracekit.report.model import Answer
from tracekit.report.serving import served, serving_figures


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
