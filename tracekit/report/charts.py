"""Chart geometry for the HTML report: plain shapes the template draws as inline SVG.

Everything is computed here (templates compute nothing): rectangles, lines and labels in SVG
user units, with axes, units and a legend. Large inputs are binned so a chart stays small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FIXED_COLORS = {
    "preprocess": "#4e79a7",
    "inference": "#f28e2b",
    "postprocess": "#59a14f",
    "unattributed": "#bab0ac",
    "busy": "#e15759",
    "idle": "#d7d7d7",
}
PALETTE = ("#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#af7aa1", "#86bcb6")
MAX_BARS = 120
W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 240, 56, 12, 12, 36


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "middle"


@dataclass(frozen=True)
class LegendItem:
    label: str
    color: str


@dataclass(frozen=True)
class Chart:
    """An SVG chart: draw `rects`, `lines` (axes, ticks) and `labels`; show `legend`."""

    id: str
    title: str
    width: int
    height: int
    rects: tuple[Rect, ...]
    lines: tuple[Line, ...]
    labels: tuple[Label, ...]
    legend: tuple[LegendItem, ...]
    note: str = ""


def stage_colors(names: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    for n in names:
        if n in FIXED_COLORS:
            out[n] = FIXED_COLORS[n]
        elif n not in out:
            out[n] = PALETTE[i % len(PALETTE)]
            i += 1
    return out


def nice_step(span: float, ticks: int = 5) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


def fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _y_axis(vmax: float, unit: str) -> tuple[list[Line], list[Label], float]:
    step = nice_step(vmax)
    top = max(step * math.ceil(vmax / step), step)
    lines = [Line(LEFT, TOP, LEFT, H - BOTTOM), Line(LEFT, H - BOTTOM, W - RIGHT, H - BOTTOM)]
    labels = [Label(14, TOP + (H - TOP - BOTTOM) / 2, unit, "middle")]
    k = 0
    while k * step <= top + 1e-12:
        y = H - BOTTOM - (k * step) / top * (H - TOP - BOTTOM)
        lines.append(Line(LEFT - 4, y, LEFT, y))
        labels.append(Label(LEFT - 6, y + 4, fmt_num(k * step), "end"))
        k += 1
    return lines, labels, top


def split_bar(segments: Sequence[tuple[str, float]], colors: Mapping[str, str]) -> Chart:
    """One horizontal 100% bar: the stage split of end-to-end time (label, ms)."""
    total = sum(ms for _, ms in segments) or 1.0
    width, height, x = 760, 56, 0.0
    rects, labels = [], []
    for name, ms in segments:
        w = ms / total * width
        rects.append(Rect(x, 8, w, 28, colors[name], f"{name}: {ms:.3f} ms ({ms / total:.1%})"))
        if w > 60:
            labels.append(Label(x + w / 2, 27, f"{name} {ms / total:.0%}"))
        x += w
    lines = [Line(0, 40, width, 40)]
    labels += [Label(0, 52, "0%", "start"), Label(width, 52, "100% of end-to-end", "end")]
    legend = tuple(LegendItem(n, colors[n]) for n, _ in segments)
    return Chart(
        "split",
        "Stage split of end-to-end time",
        width,
        height,
        tuple(rects),
        tuple(lines),
        tuple(labels),
        legend,
    )


def request_bars(
    requests: Sequence[Mapping[str, float]],
    order: Sequence[str],
    colors: Mapping[str, str],
    chart_id: str,
) -> Chart:
    """Stacked bars per request (ms per stage); over MAX_BARS requests, means of bins."""
    n = len(requests)
    bins: list[tuple[str, list[Mapping[str, float]]]] = []
    note = ""
    if n > MAX_BARS:
        size = math.ceil(n / MAX_BARS)
        for i in range(0, n, size):
            bins.append(
                (f"requests {i + 1}-{min(i + size, n)} (mean)", list(requests[i : i + size]))
            )
        note = f"{n} requests binned by {size} in request order; each bar is the bin's mean."
    else:
        bins = [(f"request {i + 1}", [r]) for i, r in enumerate(requests)]
    means = [{k: sum(r.get(k, 0.0) for r in grp) / len(grp) for k in order} for _, grp in bins]
    vmax = max((sum(m.values()) for m in means), default=0.0) or 1.0
    lines, labels, top = _y_axis(vmax, "ms")
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    bw = plot_w / max(len(bins), 1)
    rects = []
    for i, ((label, _), m) in enumerate(zip(bins, means, strict=True)):
        y: float = H - BOTTOM
        for k in order:
            h = m[k] / top * plot_h
            if h > 0:
                rects.append(
                    Rect(
                        LEFT + i * bw + bw * 0.1,
                        y - h,
                        max(bw * 0.8, 0.5),
                        h,
                        colors[k],
                        f"{label}: {k} {m[k]:.3f} ms",
                    )
                )
            y -= h
    labels.append(Label(LEFT + plot_w / 2, H - 6, "requests in start order"))
    labels.append(Label(LEFT, H - BOTTOM + 14, "1", "start"))
    labels.append(Label(W - RIGHT, H - BOTTOM + 14, str(n), "end"))
    legend = tuple(LegendItem(k, colors[k]) for k in order)
    return Chart(
        chart_id,
        "Per-request time by stage",
        W,
        H,
        tuple(rects),
        tuple(lines),
        tuple(labels),
        legend,
        note,
    )


def histogram(
    values: Sequence[float], name: str, color: str, chart_id: str, bins: int = 30
) -> Chart:
    """Distribution of one stage's per-request totals (ms)."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5 * (abs(lo) or 1.0) * 0.1, hi + 0.5 * (abs(hi) or 1.0) * 0.1
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    lines, labels, top = _y_axis(max(counts, default=1) or 1, "count")
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    bw = plot_w / bins
    rects = [
        Rect(
            LEFT + i * bw,
            H - BOTTOM - c / top * plot_h,
            bw * 0.95,
            c / top * plot_h,
            color,
            f"{lo + i * width:.3f}-{lo + (i + 1) * width:.3f} ms: {c}",
        )
        for i, c in enumerate(counts)
        if c
    ]
    labels += [
        Label(LEFT, H - BOTTOM + 14, f"{lo:.3f}", "start"),
        Label(W - RIGHT, H - BOTTOM + 14, f"{hi:.3f}", "end"),
        Label(LEFT + plot_w / 2, H - 6, f"{name} per request (ms)"),
    ]
    return Chart(
        chart_id,
        f"{name}: distribution over requests",
        W,
        H,
        tuple(rects),
        tuple(lines),
        tuple(labels),
        (LegendItem(name, color),),
    )


def busy_bars(rows: Sequence[tuple[str, float, float]], chart_id: str) -> Chart:
    """Horizontal busy/idle bars per window: (name, busy_ms, window_ms)."""
    row_h, width, label_w = 26, 760, 150
    height = row_h * len(rows) + 30
    rects, labels = [], []
    plot = width - label_w - 70
    for i, (name, busy, window) in enumerate(rows):
        y = 4 + i * row_h
        frac = busy / window if window > 0 else 0.0
        rects.append(
            Rect(label_w, y, plot * frac, 18, FIXED_COLORS["busy"], f"{name}: busy {busy:.3f} ms")
        )
        rects.append(
            Rect(
                label_w + plot * frac,
                y,
                plot * (1 - frac),
                18,
                FIXED_COLORS["idle"],
                f"{name}: idle {window - busy:.3f} ms",
            )
        )
        labels.append(Label(label_w - 6, y + 14, name, "end"))
        labels.append(Label(label_w + plot + 6, y + 14, f"{frac:.0%}", "start"))
    bottom = height - 14
    lines = [Line(label_w, bottom, label_w + plot, bottom)]
    labels += [
        Label(label_w, height - 2, "0%", "start"),
        Label(label_w + plot, height - 2, "100% of window", "end"),
    ]
    legend = (
        LegendItem("GPU busy", FIXED_COLORS["busy"]),
        LegendItem("GPU idle", FIXED_COLORS["idle"]),
    )
    return Chart(
        chart_id,
        "GPU busy / idle per window",
        width,
        height,
        tuple(rects),
        tuple(lines),
        tuple(labels),
        legend,
    )
