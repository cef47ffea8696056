"""Memory: the caching allocator's peaks (queries/memory_peaks.sql), memory over time
(queries/memory_timeline.sql) drawn as a chart, and the findings they support.

Like the rules in findings.py, the rule reads query rows and never the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tracekit.report import charts
from tracekit.report.charts import BOTTOM, LEFT, RIGHT, TOP, Chart, LegendItem, Rect
from tracekit.report.finding import Finding

Rows = Sequence[Mapping[str, Any]]
Results = Mapping[str, Rows]

NEAR_CAPACITY = 0.85  # peak allocated over this share of the device's memory: little headroom
RESERVED_RATIO = 1.5  # reserved this many times the peak allocated: cached, unused memory
RESERVED_MIN_BYTES = 1 << 30  # ... and at least 1 GiB of it (small pools say nothing)
ALLOCATED_COLOR = "#0072b2"
RESERVED_COLOR = "#cfe3f1"
STAGE_ROWS = 4  # stages listed per device in the table
UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def _unit(peak: float) -> tuple[str, int]:
    """The largest binary unit in which `peak` is at least 1."""
    return next(((u, s) for u, s in UNITS if peak >= s), UNITS[-1])


def human(n: float) -> str:
    unit, scale = _unit(abs(n))
    return f"{n / scale:.1f} {unit}" if scale > 1 else f"{n:.0f} B"


def shown_rows(rows: Rows) -> list[Mapping[str, Any]]:
    """The table's rows: each device, then its STAGE_ROWS stages with the highest peaks."""
    kept: dict[int, int] = {}
    out = []
    for r in rows:  # memory_peaks: devices first, then stages by peak, highest first
        if r["scope"] == "stage":
            kept[r["device"]] = kept.get(r["device"], 0) + 1
            if kept[r["device"]] > STAGE_ROWS:
                continue
        out.append(r)
    return out


def device_rows(rows: Rows) -> list[Mapping[str, Any]]:
    """memory_peaks' per-device rows (GPU devices first, then host memory)."""
    return [r for r in rows if r["scope"] == "device"]


def memory_chart(rows: Rows, names: Mapping[int, str], chart_id: str) -> Chart:
    """Per device, reserved (light) and allocated (dark) bytes in each bin of the trace span
    (memory_timeline rows): one band per device, all on one y scale."""
    devices: dict[int, list[Mapping[str, Any]]] = {}
    for r in rows:
        devices.setdefault(int(r["device"]), []).append(r)
    # host memory only when there is no GPU: its totals are a different allocator's
    gpus = {d: b for d, b in devices.items() if d >= 0} or devices
    peak = max(
        (float(b[k] or 0) for bins in gpus.values() for b in bins
         for k in ("allocated_bytes", "reserved_bytes")),
        default=0.0,
    )  # fmt: skip
    unit, scale = _unit(peak or 1.0)
    band_h = charts.H - TOP - BOTTOM
    width = charts.W
    span = max((float(r["start_ms"]) + float(r["bin_ms"]) for r in rows), default=1.0) or 1.0
    x0, x1 = LEFT, width - RIGHT
    rects, lines, labels = [], [], []
    height = 0.0
    for i, (dev, bins) in enumerate(sorted(gpus.items(), key=lambda kv: -kv[0])):
        top = TOP + i * (band_h + TOP)
        axis_lines, axis_labels, vmax = charts._y_axis(peak / scale or 1.0, unit)
        dy = top - TOP  # _y_axis draws the first band; later bands move down
        lines += [charts.Line(a.x1, a.y1 + dy, a.x2, a.y2 + dy) for a in axis_lines]
        labels += [charts.Label(a.x, a.y + dy, a.text, a.anchor) for a in axis_labels]
        name = names.get(dev, "host" if dev < 0 else f"GPU {dev}")
        labels.append(charts.Label(x0 + 4, top + 14, name, "start"))
        base = top + band_h
        for b in bins:
            start, w = float(b["start_ms"]), float(b["bin_ms"])
            x, bw = x0 + start / span * (x1 - x0), max(w / span * (x1 - x0), 0.5)
            for key, color in (("reserved_bytes", RESERVED_COLOR),
                               ("allocated_bytes", ALLOCATED_COLOR)):  # fmt: skip
                v = b[key]
                if v is None or v <= 0:
                    continue
                h = float(v) / scale / vmax * band_h
                what = key.removesuffix("_bytes")
                rects.append(Rect(x, base - h, bw, h, color,
                                  f"{name}: {start:.3f}-{start + w:.3f} ms {what} "
                                  f"{human(float(v))}"))  # fmt: skip
        height = base
    axis_lines, axis_labels = charts._x_axis(span, x0, x1, height, "ms from the trace's start")
    n_bins = max((len(b) for b in gpus.values()), default=0)
    return Chart(
        chart_id,
        "Memory over time, per device",
        width,
        int(height + BOTTOM + 4),
        tuple(rects),
        tuple(lines + axis_lines),
        tuple(labels + axis_labels),
        (LegendItem("allocated", ALLOCATED_COLOR), LegendItem("reserved", RESERVED_COLOR)),
        f"{n_bins} bins of {span / max(n_bins, 1):.3f} ms; each bar is the largest total an "
        "allocator event in the bin reports (a bin without events keeps the last one's).",
        n_bins,
    )


def rule_memory(results: Results) -> Iterable[Finding]:
    """Peak allocated near the device's capacity; reserved far above allocated."""
    for r in device_rows(results.get("memory_peaks", [])):
        if r["device"] < 0:
            continue
        name = f"{r['device_name']} (device {r['device']})"
        alloc, res = float(r["peak_allocated_bytes"] or 0), float(r["peak_reserved_bytes"] or 0)
        cap = float(r["capacity_bytes"] or 0)
        if cap > 0 and alloc >= NEAR_CAPACITY * cap:
            yield Finding(
                "memory_near_capacity",
                "high",
                f"Peak allocated memory is {alloc / cap:.0%} of {name}'s capacity",
                f"peak allocated {human(alloc)} (reserved {human(res)}) of {human(cap)} at "
                f"{r['peak_at_ms']:.3f} ms",
                "memory_peaks",
                "Little headroom: a larger batch or longer input will run out of memory. Free "
                "tensors early, use inference_mode, lower precision, or activation "
                "checkpointing where training.",
                {
                    "peak_allocated_bytes": alloc,
                    "peak_reserved_bytes": res,
                    "capacity_bytes": cap,
                },  # fmt: skip
            )
        if alloc > 0 and res >= RESERVED_RATIO * alloc and res - alloc >= RESERVED_MIN_BYTES:
            yield Finding(
                "memory_reserved_unused",
                "medium",
                f"The allocator holds {human(res - alloc)} more than the program ever "
                f"allocated on {name}",
                f"peak reserved {human(res)} vs peak allocated {human(alloc)} ({res / alloc:.1f}x)",
                "memory_peaks",
                "Fragmentation or cached blocks: try "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, avoid varying tensor sizes, "
                "or call torch.cuda.empty_cache() between phases.",
                {"peak_allocated_bytes": alloc, "peak_reserved_bytes": res},
            )


def evaluate(results: Results) -> list[Finding]:
    return list(rule_memory(results))
