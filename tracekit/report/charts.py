"""Chart geometry for the HTML report: plain shapes the template draws as inline SVG.

Everything is computed here (templates compute nothing): rectangles, lines and labels in SVG
user units, with axes, units and a legend. Large inputs are binned so a chart stays small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Okabe-Ito: distinguishable under the common colour-vision deficiencies; GPU busy is blue (a
# busy GPU is good news, not an alarm), idle a light grey.
FIXED_COLORS = {
    "preprocess": "#56b4e9",
    "inference": "#e69f00",
    "postprocess": "#009e73",
    "unattributed": "#bbbbbb",
    "busy": "#0072b2",
    "idle": "#dddddd",
}
PALETTE = ("#cc79a7", "#f0e442", "#0072b2", "#d55e00", "#999933", "#88ccee", "#aa4499")
OTHER_COLOR = "#777777"
MAX_LEGEND = len(PALETTE)  # split-bar segments named (+ unattributed); the rest: "N others"
MIN_VALUES = 3  # a chart of fewer values says nothing a sentence does not
CHAR_PX = 6.6  # width of an 11 px system-ui character, generously: labels that might not fit go
MAX_BARS = 120
W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 240, 56, 12, 26, 36


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
    fill: str = "#333333"


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
    values: int = 0  # data values drawn (the report leaves out charts of fewer than MIN_VALUES)


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


def _luminance(color: str) -> float:
    def channel(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.03928 else float(((x + 0.055) / 1.055) ** 2.4)

    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two #rrggbb colours."""
    la, lb = _luminance(a), _luminance(b)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def ink_on(fill: str) -> str:
    """Black or white text, whichever reads better on `fill`."""
    return "#000000" if contrast("#000000", fill) >= contrast("#ffffff", fill) else "#ffffff"


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


def _y_axis(vmax: float, unit: str, integer: bool = False) -> tuple[list[Line], list[Label], float]:
    step = max(nice_step(vmax), 1.0) if integer else nice_step(vmax)
    top = max(step * math.ceil(vmax / step), step)
    lines = [Line(LEFT, TOP, LEFT, H - BOTTOM), Line(LEFT, H - BOTTOM, W - RIGHT, H - BOTTOM)]
    labels = [Label(LEFT - 6, TOP - 12, unit, "end")]  # above the tick labels, never clipped
    k = 0
    while k * step <= top + 1e-12:
        y = H - BOTTOM - (k * step) / top * (H - TOP - BOTTOM)
        lines.append(Line(LEFT - 4, y, LEFT, y))
        labels.append(Label(LEFT - 6, y + 4, fmt_num(k * step), "end"))
        k += 1
    return lines, labels, top


def split_bar(
    segments: Sequence[tuple[str, float]], colors: Mapping[str, str], chart_id: str
) -> Chart:
    """One horizontal 100% bar: the stage split of end-to-end time (label, ms). Past
    MAX_LEGEND segments the smallest are drawn as one 'other' segment; a label goes inside its
    segment only where it fits, in black or white for contrast."""
    total = sum(ms for _, ms in segments) or 1.0
    biggest = sorted(segments, key=lambda s: -s[1])
    keep = {n for n, _ in biggest[:MAX_LEGEND]} | ({"unattributed"} & {n for n, _ in segments})
    if len(segments) <= MAX_LEGEND + 1:
        keep = {n for n, _ in segments}
    rest = [(n, ms) for n, ms in segments if n not in keep]
    shown = [(n, ms, colors[n]) for n, ms in segments if n in keep]
    if rest:
        shown.append((f"{len(rest)} others", sum(ms for _, ms in rest), OTHER_COLOR))
    width, height, x = 760, 56, 0.0
    rects, labels = [], []
    for name, ms, color in shown:
        w = ms / total * width
        rects.append(Rect(x, 8, w, 28, color, f"{name}: {ms:.3f} ms ({ms / total:.1%})"))
        text = f"{name} {ms / total:.0%}"
        if len(text) * CHAR_PX + 8 <= w:
            labels.append(Label(x + w / 2, 27, text, fill=ink_on(color)))
        x += w
    lines = [Line(0, 40, width, 40)]
    labels += [Label(0, 52, "0%", "start"), Label(width, 52, "100% of end-to-end", "end")]
    legend = tuple(LegendItem(n, c) for n, _, c in shown)
    return Chart(
        chart_id,
        "Stage split of end-to-end time",
        width,
        height,
        tuple(rects),
        tuple(lines),
        tuple(labels),
        legend,
        f"{len(rest)} smaller stages drawn as one segment; the stages table lists all."
        if rest
        else "",
        len(segments),
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
            grp = list(requests[i : i + size])
            slowest = max(grp, key=lambda r: sum(r.get(k, 0.0) for k in order))
            bins.append((f"requests {i + 1}-{min(i + size, n)} (slowest)", [slowest]))
        note = (
            f"{n} requests binned by {size} in request order; each bar is the slowest request "
            "of its bin, so outliers stay visible."
        )
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
        n,
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
    lines, labels, top = _y_axis(max(counts, default=1) or 1, "count", integer=True)
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
        "",
        len(values),
    )


def _fit(text: str, px: float) -> str:
    """`text` cut to about `px` wide, with an ellipsis (the full text is in the rect's title)."""
    n = int(px / CHAR_PX)
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"


def _label_width(labels: Sequence[str]) -> int:
    """Width of a left label column: the longest label, within 80-260 px (longer ones are cut
    by _fit)."""
    longest = max((len(t) for t in labels), default=0)
    return int(min(max(longest * CHAR_PX + 12, 80), 260))


def busy_bars(rows: Sequence[tuple[str, float, float]], chart_id: str) -> Chart:
    """Horizontal busy/idle bars per window: (name, busy_ms, window_ms)."""
    row_h, width = 26, 760
    label_w = _label_width([name for name, _, _ in rows])
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
        labels.append(Label(label_w - 6, y + 14, _fit(name, label_w - 12), "end"))
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
        "",
        len(rows),
    )


def _x_axis(
    vmax: float, x0: float, x1: float, y: float, unit: str
) -> tuple[list[Line], list[Label]]:
    """A time axis from 0 to vmax drawn from x0 to x1 at height y, ticks at nice steps."""
    step = nice_step(vmax)
    lines, labels = [Line(x0, y, x1, y)], []
    k = 0
    while k * step <= vmax + 1e-12:
        x = x0 + k * step / vmax * (x1 - x0)
        lines.append(Line(x, y, x, y + 4))
        labels.append(Label(x, y + 15, fmt_num(k * step), "middle"))
        k += 1
    labels.append(Label(x1, y + 28, unit, "end"))
    return lines, labels
