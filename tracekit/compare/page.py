"""The HTML diff page: one documented context object, a bar chart of the largest changes as
plain shapes, rendered by templates/diff.html.j2 (autoescaped; the inline script's sha256
goes into the page's Content-Security-Policy, so the page runs offline and nothing else).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tracekit.compare.headline import outermost, short_name
from tracekit.compare.items import ItemDelta
from tracekit.compare.result import DiffResult
from tracekit.present import environment, inline_script
from tracekit.present_table import Table

CHART_BARS = 12
W, LABEL_W, ROW_H, TOP = 900, 330, 22, 8
SLOWER, FASTER = "#c85200", "#5d3a9b"  # orange / purple: apart under common colour blindness


@dataclass(frozen=True)
class Bar:
    """One bar of the chart: geometry in SVG units, the label, and the full text on hover."""

    y: float
    x: float
    w: float
    fill: str
    opacity: float
    label: str
    value: str
    value_x: float
    value_anchor: str
    title: str


@dataclass(frozen=True)
class ChartGeom:
    """A diverging bar chart: what each change adds per unit of work (ms)."""

    title: str
    width: int
    height: int
    zero_x: float
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class DiffPage:
    """Everything diff.html.j2 shows; the template computes nothing."""

    context: str = field(metadata={"help": "first headline line: the work compared"})
    entries: tuple[str, ...] = field(metadata={"help": "headline sentences, most material first"})
    note: str = field(metadata={"help": "what else changed or did not"})
    heading: str = field(metadata={"help": "baseline vs candidate, runs and requests"})
    views: tuple[str, ...] = field(metadata={"help": "which trace of each run gave which figures"})
    unit_line: str = field(metadata={"help": "the unit of work ops and kernels are compared per"})
    chart: ChartGeom | None = field(metadata={"help": "largest changes, or None"})
    sections: tuple[Table, ...] = field(metadata={"help": "tables (sortable)"})
    script: str = field(metadata={"help": "inline script (table sorting)"})
    script_hash: str = field(metadata={"help": "CSP source of the script"})


def _script() -> tuple[str, str]:
    text, source = inline_script("diff.js.j2")
    return text, f"'{source}'"


def chart(d: DiffResult) -> ChartGeom | None:
    """Bars for the largest per-call changes (and rows that appeared or vanished); of nested
    ops with the same calls and change, the outer one (as in the headline)."""
    items: list[tuple[str, ItemDelta, str]] = []
    groups = (("kernel", list(d.kernels), d.kernels_unit), ("op", outermost(d.ops), d.ops_unit))
    for kind, rows, unit in groups:
        items += [(kind, i, unit.name) for i in rows if i.status != "same" and i.weight_ms]
    items.sort(key=lambda t: -abs(t[1].weight_ms))
    items = items[:CHART_BARS]
    if not items:
        return None
    units = sorted({u for _, _, u in items})
    top = max(abs(i.weight_ms) for _, i, _ in items)
    half = (W - LABEL_W) / 2 - 90
    zero = LABEL_W + (W - LABEL_W) / 2
    bars = []
    for k, (kind, i, per) in enumerate(items):
        w = abs(i.weight_ms) / top * half
        right = i.weight_ms > 0
        x = zero if right else zero - w
        full = f"{kind} {i.name}" + (f" {i.shape}" if i.shape else "")
        bars.append(
            Bar(
                y=TOP + k * ROW_H,
                x=x,
                w=max(w, 1.0),
                fill=SLOWER if right else FASTER,
                opacity=0.45 if i.status == "unsure" else 1.0,
                label=f"{kind} {short_name(i.name, 44)}",
                value=f"{i.weight_ms:+,.3f} ms",
                value_x=(x + w + 4) if right else (x - 4),
                value_anchor="start" if right else "end",
                title=f"{full}: {i.status}, {i.weight_ms:+,.3f} ms per {per}",
            )
        )
    title = (
        f"Largest changes: ms per {' / '.join(units)} added by the per-call change "
        "(orange slower, purple faster, pale: within noise)"
    )
    return ChartGeom(title, W, TOP * 2 + ROW_H * len(bars), zero, tuple(bars))


def build_page(
    d: DiffResult, sections: Sequence[Table], heading: str, views: Sequence[str], unit_line: str
) -> DiffPage:
    text, digest = _script()
    h = d.headline
    return DiffPage(
        h.context,
        h.entries,
        h.note,
        heading,
        tuple(views),
        unit_line,
        chart(d),
        tuple(sections),
        text,
        digest,
    )


def render_page(
    d: DiffResult, sections: Sequence[Table], heading: str, views: Sequence[str], unit_line: str
) -> str:
    page = build_page(d, sections, heading, views, unit_line)
    return environment().get_template("diff.html.j2").render(page=page)
