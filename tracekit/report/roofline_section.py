"""The report's roofline sections: the top ops by time with their FLOPs, bytes, throughput and
verdict, the op x roofline chart (log-log), and model FLOPs per request. Their figures come from
tracekit.roofline.analyze, run once per trace by report_rows.run_report_queries
(q["op_efficiency"][0]).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracekit.report import charts
from tracekit.roofline import TABLE_ROWS

if TYPE_CHECKING:
    from tracekit.report.sections import Columns, Laid, Rows

CHART_POINTS = 40  # op groups drawn (most time first)
VERDICT_COLORS = {
    "compute-bound": "#0072b2",
    "memory-bound": "#e69f00",
    "latency-bound": "#cc79a7",
    "": "#777777",
}


def analysis(laid: Laid) -> Mapping[str, Any]:
    rows = laid.q.get("op_efficiency") or [{}]
    return rows[0]


def _time_label(laid: Laid) -> str:
    return "GPU ms" if analysis(laid).get("basis") == "gpu" else "CPU ms"


def op_columns(laid: Laid) -> Columns:
    cpu = analysis(laid).get("basis") != "gpu"
    unit = " (CPU)" if cpu else ""
    return (
        ("rank", "#"),
        ("name", "Op"),
        ("shapes", "Input shapes"),
        ("dtype", "Dtype"),
        ("calls", "Calls"),
        ("time_ms", _time_label(laid)),
        ("gflop", "GFLOP"),
        ("mbytes", "MB moved"),
        ("intensity", "FLOP/byte"),
        ("tflops", f"TFLOP/s{unit}"),
        ("gb_per_s", f"GB/s{unit}"),
        *(
            ()
            if cpu
            else (
                ("share_peak_compute", "Of peak compute"),
                ("share_peak_memory", "Of peak bandwidth"),
                ("verdict", "Bound"),
                ("kernels", "Kernels"),
                ("top_kernel", "Top kernel"),
            )
        ),
    )


def op_rows(laid: Laid) -> Rows:
    return list(analysis(laid).get("ops", []))[:TABLE_ROWS]


def op_note(laid: Laid) -> str:
    a = analysis(laid)
    if not a:
        return ""
    text = str(a["note"])
    if a.get("top_gemm") and a.get("device"):
        g = a["top_gemm"]
        peak = a["device"]["tflops"].get(g["dtype"]) or a["device"]["tflops"]["fp32"]
        text += (
            f" Top GEMM: {g['name']} {g['shapes']} at {g['tflops']:.1f} TFLOP/s of "
            f"{peak:g} ({g['dtype']} peak)."
        )
    pad = a.get("padding")
    if pad:
        text += (
            f" {pad['padding_share']:.0%} of attention FLOPs are on padding tokens "
            f"({pad['attention_gflop'] - pad['real_gflop']:.3f} of {pad['attention_gflop']:.3f} "
            "GFLOP, from the requests' real sequence lengths)."
        )
    return text


MODEL_COLS = (
    ("request_id", "Request"),
    ("scope", "Window"),
    ("dtype", "Dtype"),
    ("gflop", "GFLOP"),
    ("window_ms", "Window ms"),
    ("op_time_ms", "Op time ms"),
    ("tflops", "TFLOP/s (window)"),
    ("tflops_op_time", "TFLOP/s (op time)"),
    ("share_mfu", "MFU"),
)


def model_rows(laid: Laid) -> Rows:
    return [{**r, "share_mfu": r["mfu"]} for r in analysis(laid).get("model", [])]


def model_note(laid: Laid) -> str:
    a = analysis(laid)
    where = "GPU kernel" if a.get("basis") == "gpu" else "host (CPU) op"
    text = (
        "Modeled FLOPs of each request's ops (the inference stage where one is named, else the "
        "whole request) over the window's duration, and over the ops' own " + where + " time."
    )
    if a.get("basis") != "gpu":
        return text + " CPU figures: no MFU."
    if not a.get("device"):
        return text + " No MFU: the device's peak is unknown."
    return text + " MFU = TFLOP/s over the window / the peak of the dominant dtype."


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def roofline_chart(laid: Laid) -> Sequence[charts.Chart]:
    a = analysis(laid)
    pts = [
        g
        for g in a.get("ops", [])
        if g.get("tflops") and g.get("intensity") and g["tflops"] > 0 and g["intensity"] > 0
    ][:CHART_POINTS]
    if not pts:
        return ()
    cpu = a.get("basis") != "gpu"
    dev = a.get("device")
    main_dtype = max(
        {p["dtype"] for p in pts},
        key=lambda d: (sum(p["time_ms"] for p in pts if p["dtype"] == d), d),
    )
    peak = bw = None
    if dev:
        peak = float(dev["tflops"].get(main_dtype) or dev["tflops"]["fp32"])
        bw = float(dev["memory_gb_s"])
    xs = [float(p["intensity"]) for p in pts] + ([peak * 1e3 / bw] if peak and bw else [])
    ys = [float(p["tflops"]) for p in pts] + ([peak] if peak else [])
    x_lo, x_hi = _log_ticks(min(xs), max(xs))[0], _log_ticks(min(xs), max(xs))[-1]
    y_lo, y_hi = _log_ticks(min(ys), max(ys))[0], _log_ticks(min(ys), max(ys))[-1]
    if x_hi <= x_lo:
        x_hi = x_lo * 10
    if y_hi <= y_lo:
        y_hi = y_lo * 10
    width, height, left, right, top, bottom = 760, 320, 64, 16, 16, 40
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x_lo)) / math.log10(x_hi / x_lo) * pw

    def py(y: float) -> float:
        return top + ph - (math.log10(y) - math.log10(y_lo)) / math.log10(y_hi / y_lo) * ph

    lines = [
        charts.Line(left, top + ph, left + pw, top + ph),
        charts.Line(left, top, left, top + ph),
    ]
    labels = []
    for t in _log_ticks(x_lo, x_hi):
        lines.append(charts.Line(px(t), top + ph, px(t), top + ph + 4))
        labels.append(charts.Label(px(t), top + ph + 15, charts.fmt_num(t)))
    for t in _log_ticks(y_lo, y_hi):
        lines.append(charts.Line(left - 4, py(t), left, py(t)))
        labels.append(charts.Label(left - 6, py(t) + 4, charts.fmt_num(t), "end"))
    labels.append(charts.Label(left + pw, height - 4, "arithmetic intensity, FLOP/byte", "end"))
    unit = "TFLOP/s (CPU)" if cpu else "TFLOP/s"
    labels.append(charts.Label(left + 4, top + 10, unit, "start"))
    if peak and bw:
        ridge = peak * 1e3 / bw  # FLOP/byte where the bandwidth roof meets the compute roof
        x0 = x_lo
        y0 = x0 * bw / 1e3
        if y0 < y_lo:
            x0, y0 = y_lo * 1e3 / bw, y_lo
        lines.append(charts.Line(px(x0), py(y0), px(ridge), py(peak)))
        lines.append(charts.Line(px(ridge), py(peak), px(x_hi), py(peak)))
        labels.append(
            charts.Label(px(x_hi) - 4, py(peak) - 4, f"{main_dtype} peak {peak:g} TFLOP/s", "end")
        )
        labels.append(charts.Label(px(ridge) - 6, py(peak) + 14, f"{bw:g} GB/s", "end"))
    rects = [
        charts.Rect(
            px(float(p["intensity"])) - 4,
            py(float(p["tflops"])) - 4,
            8,
            8,
            VERDICT_COLORS.get(str(p.get("verdict") or ""), VERDICT_COLORS[""]),
            f"#{p['rank']} {p['name']} {p['shapes']} {p['dtype']}: {p['tflops']:.3g} TFLOP/s, "
            f"{p['intensity']:.3g} FLOP/byte, {p['time_ms']:.3f} ms"
            + (f", {p['verdict']}" if p.get("verdict") else ""),
        )
        for p in pts
    ]
    seen = sorted({str(p.get("verdict") or "") for p in pts})
    legend = tuple(charts.LegendItem(v or "no peak known", VERDICT_COLORS[v]) for v in seen)
    title = "Ops on the roofline" + (f" of {dev['name']}" if dev else " (no device peak)")
    return [
        charts.Chart(
            laid.chart_id("roofline-chart"),
            title + (" — CPU times" if cpu else ""),
            width,
            height,
            tuple(rects),
            tuple(lines),
            tuple(labels),
            legend,
            "One point per op and input shape (hover for figures); lines: the device's roofs.",
            len(pts),
        )
    ]
