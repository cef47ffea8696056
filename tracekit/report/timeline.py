"""The one picture at the top of each trace: one time axis from the trace's start, lanes for
requests/steps, each host thread's stages (one lane per nesting depth) and blocking calls, GPU
busy per device (per stream folded), from queries/timeline_lanes.sql. The SVG geometry, the
JSON `timeline` object and the Markdown lines all come from the same rows."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.present import md_cell
from tracekit.report.charts import FIXED_COLORS, OTHER_COLOR, LegendItem, fmt_num, nice_step

PX = 608  # plot width in SVG units; the query merges what is closer than span / PX (1 unit)
LABEL_W, RIGHT, ROW_H, TOP = 140, 12, 18, 4
LABEL_CHARS = 19  # a lane name longer than this is cut (its <title> has it whole)
LEGEND_STAGES = 8  # stages named in the legend (the largest; hover names every bar)
WIDTH = LABEL_W + PX + RIGHT
SHOWN_LANES = 18  # lanes drawn at first (<= ~450 px with axis, legend, note); the rest folded
MD_STAGES = 6  # stages named per request line (largest; the rest summed)
MD_REQUESTS = 12  # requests listed in the Markdown text version (the JSON has every lane)
KIND_ORDER = ("requests", "stages", "blocking", "gpu", "stream")
CATEGORY_COLORS = ("#0072b2", "#56b4e9", "#009e73", "#cc79a7", "#d55e00", "#999933", "#882255")
REQUEST_COLOR, BLOCKING_COLOR = "#999999", "#d55e00"


@dataclass(frozen=True)
class Bar:
    x: float
    w: float
    fill: str
    title: str
    start_ms: float
    end_ms: float
    request_id: int | None  # a one-request bar: clicking it zooms to that request


@dataclass(frozen=True)
class Lane:
    kind: str
    name: str
    y: float
    bars: tuple[Bar, ...]
    device: int | None = None
    request_id: int | None = None  # zoom lanes: the request they detail


@dataclass(frozen=True)
class Timeline:
    """The timeline SVG: lanes shown first, lanes folded, per-request zoom lanes."""

    id: str
    w0_ms: float  # the window drawn, in ms from the trace's start
    span_ms: float  # its length
    height: int
    folded_height: int
    lanes: tuple[Lane, ...]
    folded: tuple[Lane, ...]
    zoom: tuple[Lane, ...]  # drawn hidden over the GPU lanes; the inline script shows them
    ticks: tuple[tuple[float, str], ...]  # (x, label) on the axis
    legend: tuple[LegendItem, ...]
    note: str
    width: int = WIDTH
    x0: int = LABEL_W
    px: int = PX
    label_chars: int = LABEL_CHARS


def _lane_id(r: Mapping[str, Any]) -> tuple[Any, ...]:
    zoom = r["request_id"] if r["lane_kind"] == "zoom_gpu" else None
    return (r["lane_key"], r["pid"], r["tid"], r["depth"], r["device"], r["stream"], zoom)


def group(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Rows per lane, in the query's lane order."""
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(_lane_id(r), []).append(r)
    return list(out.values())


def lane_name(r: Mapping[str, Any], devices: Mapping[int, str]) -> str:
    kind = r["lane_kind"]
    if kind == "requests":
        return "requests / steps"
    if kind in ("stages", "blocking"):
        depth = f" depth {r['depth']}" if r["depth"] else ""
        what = "" if kind == "stages" else " blocking"
        return f"thread {r['tid']}{what}{depth}"
    dev = devices.get(int(r["device"]), f"GPU {r['device']}")
    if kind == "stream":
        return f"{dev} stream {r['stream']}"
    if kind == "zoom_gpu":
        return f"{dev} in request {r['request_id']}"
    return str(dev)


def device_names(q: Mapping[str, list[dict[str, Any]]]) -> dict[int, str]:
    return {int(d["device"]): str(d["device_name"]) for d in q["gpu_devices"]}


def timeline_json(rows: Sequence[Mapping[str, Any]], devices: Mapping[int, str]) -> dict[str, Any]:
    """The JSON report's `timeline`: one origin, each lane's intervals in ms from it."""
    if not rows:
        return {
            "origin_ns": None,
            "merge_ms": None,
            "window_start_ms": None,
            "window_end_ms": None,
            "px": PX,
            "lanes": [],
        }
    lanes = []
    for grp in group(rows):
        r = grp[0]
        lanes.append({
            "kind": r["lane_kind"],
            "name": lane_name(r, devices),
            **{k: r[k] for k in ("pid", "tid", "depth", "device", "stream")},
            **({"request_id": r["request_id"]} if r["lane_kind"] == "zoom_gpu" else {}),
            "merge_ms": round(float(r["merge_ms"]), 6),
            "intervals": [
                {"name": g["name"], "start_ms": round(float(g["start_ms"]), 6),
                 "end_ms": round(float(g["end_ms"]), 6), "merged": g["merged"],
                 "busy_ms": round(float(g["busy_ms"]), 6), "request_id": g["request_id"]}
                for g in grp
            ],
        })  # fmt: skip
    return {
        "origin_ns": rows[0]["origin_ns"],
        "merge_ms": round(float(rows[0]["merge_ms"]), 6),
        "window_start_ms": round(float(rows[0]["window_start_ms"]), 6),
        "window_end_ms": round(float(rows[0]["window_end_ms"]), 6),
        "px": PX,
        "lanes": lanes,
    }


def category_colors(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """GPU categories by busy time, largest first, each its own colour."""
    total: dict[str, float] = {}
    for r in rows:
        if r["lane_kind"] in ("gpu", "stream", "zoom_gpu"):
            total[str(r["name"])] = total.get(str(r["name"]), 0.0) + float(r["busy_ms"])
    ranked = sorted(total, key=lambda c: (-total[c], c))
    return {c: CATEGORY_COLORS[i] if i < len(CATEGORY_COLORS) else OTHER_COLOR
            for i, c in enumerate(ranked)}  # fmt: skip


def _fill(r: Mapping[str, Any], stages: Mapping[str, str], cats: Mapping[str, str]) -> str:
    kind = r["lane_kind"]
    if kind == "requests":
        return REQUEST_COLOR
    if kind == "blocking":
        return BLOCKING_COLOR
    if kind == "stages":
        return stages.get(str(r["name"]), OTHER_COLOR)
    return cats.get(str(r["name"]), FIXED_COLORS["busy"])


def _title(r: Mapping[str, Any], lane: str) -> str:
    dur = float(r["end_ms"]) - float(r["start_ms"])
    what = (f"{r['merged']} intervals merged (mostly {r['name']})" if r["merged"] > 1
            else str(r["name"]))  # fmt: skip
    stage = {"stages": "stage", "blocking": "blocking call", "requests": "request"}.get(
        r["lane_kind"], "GPU category"
    )
    busy = f", busy {float(r['busy_ms']):.3f} ms" if r["lane_kind"] not in ("stages",) else ""
    return (f"{lane}: {what} ({stage}), {float(r['start_ms']):.3f}-{float(r['end_ms']):.3f} ms, "
            f"{dur:.3f} ms{busy}")  # fmt: skip


def _lane(grp: Sequence[Mapping[str, Any]], y: float, w0: float, w1: float, name: str,
          stages: Mapping[str, str], cats: Mapping[str, str]) -> Lane:  # fmt: skip
    """One lane's bars on the window w0..w1 (ms from the trace's start) across PX units."""
    bars = []
    for r in grp:
        s, e = float(r["start_ms"]), float(r["end_ms"])
        a, b, scale = s - w0, e - w0, max(w1 - w0, 1e-9)
        rid = r["request_id"] if r["lane_kind"] == "requests" and r["merged"] == 1 else None
        bars.append(Bar(LABEL_W + a / scale * PX, max((b - a) / scale * PX, 0.5),
                        _fill(r, stages, cats), _title(r, name), s, e, rid))  # fmt: skip
    first = grp[0]
    return Lane(str(first["lane_kind"]), name, y, tuple(bars),
                None if first["device"] is None else int(first["device"]),
                first["request_id"] if first["lane_kind"] == "zoom_gpu" else None)  # fmt: skip


def build(rows: Sequence[Mapping[str, Any]], stage_colors: Mapping[str, str],
          devices: Mapping[int, str], chart_id: str) -> Timeline | None:  # fmt: skip
    """Lay the lanes out: requests, the host lanes of the busiest threads, GPU devices first
    (at most SHOWN_LANES); other threads and the per-stream lanes folded."""
    if not rows:
        return None
    w0, w1 = float(rows[0]["window_start_ms"]), float(rows[0]["window_end_ms"])
    span_ms = w1 - w0
    if span_ms <= 0:
        return None
    groups = [g for g in group(rows) if g[0]["lane_kind"] != "zoom_gpu"]
    host_time: dict[Any, float] = {}
    for g in groups:
        if g[0]["lane_kind"] == "stages":
            key = (g[0]["pid"], g[0]["tid"])
            host_time[key] = host_time.get(key, 0.0) + sum(float(r["busy_ms"]) for r in g)
    gpu_n = sum(1 for g in groups if g[0]["lane_kind"] == "gpu")
    busiest = sorted(host_time, key=lambda k: -host_time[k])[:2]  # threads shown first
    first: list[list[Mapping[str, Any]]] = []
    rest: list[list[Mapping[str, Any]]] = []
    for g in groups:
        kind = g[0]["lane_kind"]
        if kind in ("stages", "blocking"):
            shown = (g[0]["pid"], g[0]["tid"]) in busiest
        else:
            shown = kind in ("requests", "gpu")
        (first if shown else rest).append(g)
    room = SHOWN_LANES - gpu_n - 1
    host = [g for g in first if g[0]["lane_kind"] in ("stages", "blocking")]
    if len(host) > room:
        keep = {id(g) for g in host[: max(room, 1)]}
        rest = [g for g in first if g[0]["lane_kind"] in ("stages", "blocking")
                and id(g) not in keep] + rest  # fmt: skip
        first = [g for g in first if g[0]["lane_kind"] not in ("stages", "blocking")
                 or id(g) in keep]  # fmt: skip
    first.sort(key=lambda g: KIND_ORDER.index(str(g[0]["lane_kind"])))
    cats = category_colors(rows)
    lanes = tuple(_lane(g, TOP + i * ROW_H, w0, w1, lane_name(g[0], devices), stage_colors,
                        cats) for i, g in enumerate(first))  # fmt: skip
    folded = tuple(_lane(g, TOP + i * ROW_H, w0, w1, lane_name(g[0], devices), stage_colors,
                         cats) for i, g in enumerate(rest))  # fmt: skip
    gpu_y = {ln.device: ln.y for ln in lanes if ln.kind == "gpu"}
    req = {int(r["request_id"]): (float(r["start_ms"]), float(r["end_ms"]))
           for r in rows if r["lane_kind"] == "requests" and r["merged"] == 1}  # fmt: skip
    zoom = []
    for g in group(rows):
        r = g[0]
        if r["lane_kind"] != "zoom_gpu" or r["device"] not in gpu_y or r["request_id"] not in req:
            continue
        a, b = req[int(r["request_id"])]
        zoom.append(_lane(g, gpu_y[r["device"]], a, b, lane_name(r, devices), stage_colors,
                          cats))  # fmt: skip
    height = TOP + len(lanes) * ROW_H + 30
    step = nice_step(span_ms)
    ticks, k = [], math.ceil(w0 / step - 1e-9)
    while k * step <= w1 + 1e-9:
        ticks.append((LABEL_W + (k * step - w0) / span_ms * PX, fmt_num(k * step)))
        k += 1
    used = {str(r["name"]) for g in first + rest for r in g if r["lane_kind"] == "stages"}
    named = [s for s in stage_colors if s in used][:LEGEND_STAGES]
    legend = (tuple(LegendItem(s, stage_colors[s]) for s in named)
              + ((LegendItem(f"{len(used) - len(named)} more stages (hover)", OTHER_COLOR),)
                 if len(used) > len(named) else ())
              + ((LegendItem("request / step", REQUEST_COLOR),) if req else ())
              + tuple(LegendItem(f"GPU: {c}", col) for c, col in cats.items())
              + ((LegendItem("blocking call", BLOCKING_COLOR),)
                 if any(g[0]["lane_kind"] == "blocking" for g in groups) else ()))  # fmt: skip
    merge = float(rows[0]["merge_ms"])
    note = (f"One axis: ms from the trace's start, over {w0:.3f}-{w1:.3f} ms (first to last "
            "interval of any lane; start-up and teardown outside it). Intervals closer than "
            f"{merge:.3f} ms (1 px) "
            "are merged (GPU: busy islands; host: runs of ranges shorter than that), so a lane "
            f"has at most about {2 * PX + 1} bars. Hover a bar for its name, times and "
            "duration; click a request to zoom to it (its stages, its GPU work at its own "
            "resolution, the host's blocking calls); click again to go back.")  # fmt: skip
    return Timeline(chart_id, w0, span_ms, height, TOP + len(folded) * ROW_H + 4, lanes, folded,
                    tuple(zoom), tuple(ticks), legend, note)  # fmt: skip


def text_lines(reqs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
               devices: Mapping[int, str],
               utilization: Mapping[int, float | None]) -> tuple[str, ...]:  # fmt: skip
    """The Markdown version: one line per request in time order (at most MD_REQUESTS), then
    one per GPU lane: 'req 3 0.000-42.100 ms preprocess 3.100 · inference 22.000 · ...'.
    A request runs to the end of its GPU work (its latency; the host part is said when
    shorter), and its GPU busy share is over that window (request_utilization)."""
    out = []
    for r in sorted(reqs, key=lambda r: (r["start_ms"], r["request_id"]))[:MD_REQUESTS]:
        s = float(r["start_ms"])
        stages = {str(k): float(v) for k, v in json.loads(r["stages_json"]).items()}
        top = sorted(stages, key=lambda k: -stages[k])[:MD_STAGES]  # shown in pipeline order
        parts = [f"{k} {v:.3f}" for k, v in stages.items() if k in top]
        if len(stages) > len(top):
            rest = sum(v for k, v in stages.items() if k not in top)
            parts.append(f"{len(stages) - len(top)} more stages {rest:.3f}")
        if r["unattributed_ms"]:
            parts.append(f"no stage {float(r['unattributed_ms']):.3f}")
        util = utilization.get(int(r["request_id"]))
        gpu = f" (GPU busy {util:.0%} of its latency)" if util else ""
        host, latency = float(r["e2e_ms"]), float(r["latency_ms"] or r["e2e_ms"])
        span = f"{s:.3f}-{s + latency:.3f} ms"
        if latency > host:
            span += f" (host to {s + host:.3f})"
        out.append(f"req {r['request_id']}  {span}  " + " · ".join(parts) + gpu)
    if len(reqs) > MD_REQUESTS:
        out.append(f"... {len(reqs) - MD_REQUESTS} more requests (the JSON report has all)")
    for g in group(rows):
        r = g[0]
        if r["lane_kind"] != "gpu":
            continue
        busy = sum(float(x["busy_ms"]) for x in g)
        out.append(f"{lane_name(r, devices)}: busy {busy:.3f} ms in {len(g)} intervals, "
                   f"{float(g[0]['start_ms']):.3f}-{float(g[-1]['end_ms']):.3f} ms")  # fmt: skip
    return tuple(md_cell(line) for line in out)  # list items: names inert, as in the tables
