"""What each report section puts in the JSON report's trace object: `Section.json` callables
(sections.py) return {dotted path: value}; a section without one gives its query's rows at its
`json_key` (`query_rows`). figures.py merges them with `put`, so the JSON carries every section
the way the HTML and md do (docs/report.md documents the keys)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracekit.report.batched import served, serving_figures
from tracekit.roofline import JSON_ROWS

if TYPE_CHECKING:
    from tracekit.report.sections import Laid

Json = Mapping[str, Any]  # dotted path ('gpu.busy_ms') -> value


def rounded(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v


def query_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Query rows as the JSON report gives them: every column but trace_id, floats rounded."""
    return [{k: rounded(v) for k, v in r.items() if k != "trace_id"} for r in rows]


def put(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set obj['a']['b'] for path 'a.b', making the dicts on the way."""
    *parents, last = path.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[last] = value


def in_other_section(_: Laid) -> Json:
    """For a section whose JSON key another section's entry fills (gpu.per_device[].streams is
    written with gpu.per_device)."""
    return {}


def overview(laid: Laid) -> Json:
    ov = laid.q["trace_overview"][0]
    return {
        "file": ov["file"],
        "format": ov["format"],
        "tool_version": ov["tool_version"],
        "span_ms": rounded(ov["span_ms"]),
        "events": ov["events"],
        "devices": [d for d in (ov["device_names"] or "").split(", ") if d],
    }


def serving(laid: Laid) -> Json:
    return {"serving": serving_figures(laid.q)} if served(laid.q) else {}  # batched servers


STAT_KEYS = ("count", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")
LATENCY = (
    "from the request's start to the later of its host end and the end of the GPU work it "
    "launched (graph-replayed kernels via their launch); a stage likewise, its GPU work past "
    "its last range added to its ranges' host time"
)


def request_utilization(q: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[int, float | None]:
    """request_id -> GPU busy share over the request's latency window (gpu_utilization)."""
    return {
        int(r["request_id"]): r["utilization"]
        for r in q.get("gpu_utilization", [])
        if r["scope"] == "request" and r.get("request_id") is not None
    }


def _spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Median, min and max of per-request figures (None: no request has one)."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2
    return {"count": len(v), "p50": rounded(mid), "min": rounded(v[0]), "max": rounded(v[-1])}


def stages(laid: Laid) -> Json:
    rows = laid.q["stage_summary"]
    e2e = next((r for r in rows if r["row_kind"] == "end_to_end"), None)
    return {
        "requests.end_to_end": {k: rounded(e2e[k]) for k in STAT_KEYS} if e2e else None,
        "requests.latency": LATENCY,
        "stages": [
            {
                "stage": r["stage"],
                "kind": r["row_kind"],
                "source": r["source"],
                "instances": r["instances"],
                "total_ms": rounded(r["total_ms"]),  # latency, GPU included
                "host_ms": rounded(r["host_ms"]),
                "gpu_tail_ms": rounded(r["gpu_tail_ms"]),
                "share": rounded(r["share"]),  # of the requests' host time
                "gpu_busy_ms": rounded(r["gpu_busy_ms"]),
                "gpu_span_ms": rounded(r["gpu_span_ms"]),
                **{k: rounded(r[k]) for k in STAT_KEYS},
            }
            for r in rows
            if r["row_kind"] != "end_to_end"
        ],
    }


def per_request(laid: Laid) -> Json:
    """Every request (the table shows the slowest HTML_REQUEST_ROWS)."""
    util = request_utilization(laid.q)
    return {
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
                "gpu_utilization": rounded(util.get(r["request_id"])),  # its latency window
            }
            for r in laid.q["request_breakdown"]
        ]
    }


def roofline(laid: Laid) -> Json:
    """The roofline analysis (tracekit.roofline.analyze) as plain rounded data; it holds the
    model_flops section's figures too."""

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return rounded(v)

    a = laid.q["op_efficiency"][0]
    out = {k: v for k, v in a.items() if not k.startswith("_")}
    out["ops"] = list(out.get("ops", []))[:JSON_ROWS]
    out["kernels"] = list(out.get("kernels", []))[:JSON_ROWS]
    return {"roofline": clean(out)}


def gpu(laid: Laid) -> Json:
    """Trace-wide busy time and the per-stage windows; every utilization names its window:
    "active" = each device's first to last GPU activity (the headline), "capture" = the
    trace's span (context only)."""
    util = laid.q["gpu_utilization"]
    trace_gpu = next((r for r in util if r["scope"] == "trace"), {})
    return {
        "gpu.windows": {
            "utilization": "capture",
            "active_utilization": "active",
            "by_stage[].utilization": "stage",
            "per_request[].gpu_busy_ms": "request",
            "per_request[].gpu_utilization": "request latency",
            "per_request_utilization": "request latency",
        },
        "gpu.per_request_utilization": _spread(list(request_utilization(laid.q).values())),
        "gpu.busy_ms": rounded(trace_gpu.get("busy_ms")),
        "gpu.window_ms": rounded(trace_gpu.get("window_ms")),
        "gpu.utilization": rounded(trace_gpu.get("utilization")),
        "gpu.devices": trace_gpu.get("devices", 0) if trace_gpu else 0,
        "gpu.by_stage": [
            {
                "stage": r["name"],
                "busy_ms": rounded(r["busy_ms"]),
                "window_ms": rounded(r["window_ms"]),
                "utilization": rounded(r["utilization"]),
            }
            for r in util
            if r["scope"] == "stage"
        ],
    }


def devices(laid: Laid) -> Json:
    """Per device, with its streams (the streams section) and time by category (the
    categories section)."""
    devs, streams = laid.q["gpu_devices"], laid.q["gpu_streams"]
    active = sum(r["active_ms"] or 0 for r in devs)
    return {
        "gpu.active_ms": rounded(active),
        "gpu.active_utilization": rounded(
            sum(r["busy_ms"] or 0 for r in devs) / active if active else None
        ),
        "gpu.per_device": [
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
                    for s in streams
                    if s["device"] == r["device"]
                ],
                "by_category": {
                    k: rounded(v) for k, v in json.loads(r["by_category_json"] or "{}").items()
                },
                "communication_ms": rounded(r["communication_ms"]),
                "exposed_communication_ms": rounded(r["exposed_communication_ms"]),
            }
            for r in devs
        ],
    }


def memory(laid: Laid) -> Json:
    return {
        "memory": {
            "peaks": query_rows(laid.q.get("memory_peaks", [])),
            "timeline": query_rows(
                [
                    r
                    for r in laid.q.get("memory_timeline", [])
                    if r["events"] or r["allocated_bytes"] is not None
                ]
            ),
        }
    }
