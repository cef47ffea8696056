"""Renderers for a DiffResult: markdown, JSON, a terminal table and one offline HTML file.

The renderers only format; every figure is computed by tracekit.compare.diff. Trace strings
(kernel, op and stage names, shapes, paths) are untrusted: Markdown escapes them
(md_cell), the terminal table shows control characters as escapes, HTML autoescapes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from typing import Any

from tracekit.compare.headline import short_name
from tracekit.compare.items import ItemDelta, Unit
from tracekit.compare.page import render_page
from tracekit.compare.result import DiffResult, MetricDelta
from tracekit.compare.table import Cell, Section
from tracekit.present import md_cell, term_text

RENDER_FORMATS = ("table", "md", "json", "html")
TOP_ITEMS = 15
TABLE_NAME = 70
WRAP = 100  # headline lines in the terminal table


def _num(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:,.{digits}f}"


def _count(v: float) -> str:
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def _signed(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:+,.{digits}f}"


def _pct(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v * 100:+.1f}%"


def _rel(m: MetricDelta) -> float | None:
    return m.delta / m.before if m.delta is not None and m.before else None


def _noise(m: MetricDelta) -> str:
    if m.noise is None:
        return ""
    n = m.noise
    spread = f", spread {_num(n.spread)}" if n.spread is not None else ""
    verdict = "beyond noise" if n.exceeds else "within noise"
    return f"95% CI [{_signed(n.ci_low)}, {_signed(n.ci_high)}]{spread}: {verdict}"


def _n(v: float | None, digits: int = 3, signed: bool = False) -> Cell:
    text = _signed(v, digits) if signed else _num(v, digits)
    return Cell(text, "" if v is None else repr(float(v)))


def _c(v: float) -> Cell:
    return Cell(_count(v), repr(float(v)))


def _stage_section(d: DiffResult) -> Section:
    rows = []
    for s in d.stages:
        for m in s.metrics:
            rows.append(
                (
                    Cell(s.stage, s.stage, name=True),
                    Cell(m.metric),
                    _n(m.before),
                    _n(m.after),
                    _n(m.delta, signed=True),
                    Cell(_pct(_rel(m)), repr(_rel(m) or 0.0)),
                    Cell(_noise(m)),
                )
            )
    cols = (
        ("stage", False),
        ("metric", False),
        ("before", True),
        ("after", True),
        ("delta", True),
        ("change", True),
        ("noise", False),
    )
    note = (
        "Per request, in ms. `end_to_end` is the request's duration, `unattributed` the "
        "part no stage covers."
    )
    return Section("stages", "Stages (ms per request)", cols, tuple(rows), note)


def _gpu_section(d: DiffResult) -> Section:
    rows = []
    for dev in d.devices:
        label = "all GPUs (sum of devices)" if dev.device == "all" else dev.device
        u = dev.utilization
        rows.append(
            (
                Cell(label),
                _n(dev.busy.before),
                _n(dev.busy.after),
                _n(dev.busy.delta, signed=True),
                Cell(_num_pct(u.before), repr(u.before or 0.0)),
                Cell(_num_pct(u.after), repr(u.after or 0.0)),
            )
        )
    cols = (
        ("device", False),
        ("busy ms before", True),
        ("busy ms after", True),
        ("delta ms", True),
        ("busy share before", True),
        ("busy share after", True),
    )
    note = (
        "GPU busy of a device = length of the union of its kernel, memcpy and memset "
        "intervals (streams overlap: never a plain sum), per run; share = busy / trace span. "
        "'all GPUs' sums the devices (device-time, as the report counts it); its share is "
        "busy / (span x devices)."
    )
    return Section("gpu", "GPU busy per device", cols, tuple(rows), note)


def _num_pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _throughput_section(d: DiffResult) -> Section:
    labels = {
        "rps_request_time": "requests/s (of summed request time)",
        "rps_span": "requests/s (of trace span)",
        "requests_per_s": "served requests/s (first arrival to last response)",
        "mean_batch": "mean batch size",
        "queue_p50_ms": "queue p50 ms (arrival to batch start)",
        "queue_p99_ms": "queue p99 ms",
        "end_to_end_p50_ms": "served end-to-end p50 ms",
        "end_to_end_p99_ms": "served end-to-end p99 ms",
        "ttft_p50_ms": "time to first token p50 ms",
        "ttft_p99_ms": "time to first token p99 ms",
        "tpot_p50_ms": "time per output token p50 ms",
        "tpot_p99_ms": "time per output token p99 ms",
        "output_tokens_per_s": "output tokens/s",
        "within_slo": "share of requests within the --slo targets",
        "goodput_per_s": "goodput (requests/s within the targets)",
    }
    rows = tuple(
        (
            Cell(labels[m.metric]),
            _n(m.before),
            _n(m.after),
            _n(m.delta, signed=True),
            Cell(_pct(_rel(m)), repr(_rel(m) or 0.0)),
        )
        for m in d.throughput
    )
    cols = (("", False), ("before", True), ("after", True), ("delta", True), ("change", True))
    return Section("throughput", "Throughput", cols, rows if d.baseline.requests else ())


def _item_section(items: tuple[ItemDelta, ...], unit: Unit, kind: str, shape: bool) -> Section:
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for i in items[:TOP_ITEMS]:
        short = short_name(i.name, TABLE_NAME)
        n = seen[(short, i.shape)] = seen.get((short, i.shape), 0) + 1
        if n > 1:  # two names that shorten alike stay apart
            short += f" #{n}"
        row = [Cell(i.status), Cell(short, i.name, i.name if short != i.name else "", True)]
        if shape:
            row.append(Cell(short_name(i.shape, 40), i.shape, i.shape, True))
        row += [
            _c(i.before_count),
            _c(i.after_count),
            _n(i.before_mean_ms, 4),
            _n(i.after_mean_ms, 4),
            Cell(_pct(i.per_call_change), repr(i.per_call_change or 0.0)),
            _n(i.delta_ms, signed=True),
            _n(i.count_part_ms, signed=True),
            _n(i.time_part_ms, signed=True),
            _n(i.weight_ms, signed=True),
        ]
        rows.append(tuple(row))
    cols = [("change", False), (kind, False)] + ([("shape", False)] if shape else [])
    cols += [
        ("calls before", True),
        ("calls after", True),
        ("ms/call before", True),
        ("ms/call after", True),
        ("per call", True),
        ("Δ total ms", True),
        ("from calls", True),
        ("from ms/call", True),
        (f"ms {unit.label}", True),
    ]
    what = "inclusive time" if kind == "op" else "time"
    note = (
        f"Per run; {what} per call. Δ total = from calls (Δcalls × ms/call before) + from "
        f"ms/call (calls after × Δms/call). Ranked by what the per-call change adds "
        f"{unit.label} (last column; the whole change for rows that appeared or vanished). "
        f"{len(items) - min(len(items), TOP_ITEMS)} more rows in --format json."
    )
    title = f"{kind.capitalize()}s compared per call"
    return Section(f"{kind}s", title, tuple(cols), tuple(rows), note)


def sections(d: DiffResult) -> list[Section]:
    """The tables every format shows, in order."""
    out = [_stage_section(d), _throughput_section(d), _gpu_section(d)]
    out.append(_item_section(d.kernels, d.kernels_unit, "kernel", False))
    out.append(_item_section(d.ops, d.ops_unit, "op", True))
    return out


def _heading(d: DiffResult) -> str:
    b, c = d.baseline, d.candidate
    return (
        f"baseline {b.label} ({len(b.runs)} run(s), {b.requests} requests) vs "
        f"candidate {c.label} ({len(c.runs)} run(s), {c.requests} requests)"
    )


def _views(d: DiffResult) -> list[str]:
    return [
        f"{side}: {v}"
        for side, s in (("baseline", d.baseline), ("candidate", d.candidate))
        for v in s.views
    ]


def _unit_line(d: DiffResult) -> str:
    k, o = d.kernels_unit, d.ops_unit
    if k == o:
        amounts = f"{_amount(k.before)} vs {_amount(k.after)} per run"
        return f"Kernels and ops compared per {k.name} ({amounts})."
    return (
        f"Kernels compared per {k.name} ({_amount(k.before)} vs {_amount(k.after)} per run), "
        f"ops per {o.name} ({_amount(o.before)} vs {_amount(o.after)} per run)."
    )


def _amount(v: float) -> str:
    return _count(v) if v == int(v) else f"{v:,.3f}"


def render_md(d: DiffResult) -> str:
    """Markdown. Sentences and cells that carry trace strings go through md_cell; the
    section titles, column labels and notes are tracekit's own text."""
    h = d.headline
    out = ["# tracekit diff", "", md_cell(h.context), ""]
    if h.entries:
        out += [f"- {md_cell(e)}" for e in h.entries] + [""]
    out += [md_cell(h.note), "", md_cell(_heading(d)), ""]
    if _views(d):
        out += [f"- {md_cell(v)}" for v in _views(d)] + [""]
    out += [md_cell(_unit_line(d)), ""]
    for sec in sections(d):
        out += [f"## {sec.title}", ""]
        if not sec.rows:
            out += ["(none)", ""]
            continue
        out.append("| " + " | ".join(c for c, _ in sec.columns) + " |")
        out.append("|" + "|".join("---:" if num else "---" for _, num in sec.columns) + "|")
        for r in sec.rows:
            out.append("| " + " | ".join(md_cell(c.text) if c.name else c.text for c in r) + " |")
        out += ["", sec.note, ""] if sec.note else [""]
    return "\n".join(out)


def _wrap(text: str, lead: str) -> list[str]:
    return textwrap.wrap(
        term_text(text),
        WRAP,
        initial_indent=lead,
        subsequent_indent=" " * len(lead),
        break_on_hyphens=False,
    )


def render_table(d: DiffResult) -> str:
    h = d.headline
    out = _wrap(h.context, "") + [x for e in h.entries for x in _wrap(e, "  * ")]
    out += _wrap(h.note, "") + ["", term_text(_heading(d))]
    out += [f"  {term_text(v)}" for v in _views(d)] + [_unit_line(d)]
    for sec in sections(d):
        out += ["", sec.title]
        if not sec.rows:
            out.append("(none)")
            continue
        head = [c for c, _ in sec.columns]
        cells = [head] + [[term_text(c.text) for c in r] for r in sec.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
        right = [num for _, num in sec.columns]
        for k, r in enumerate(cells):
            line = "  ".join(
                c.rjust(w) if right[i] and k else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            out.append(line.rstrip())
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        if sec.note:
            out.append(sec.note)
    return "\n".join(out) + "\n"


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def to_dict(d: DiffResult) -> dict[str, Any]:
    """The whole result as plain JSON-able data (every op and kernel, unchanged included)."""
    body: dict[str, Any] = _clean(dataclasses.asdict(d))
    data: dict[str, Any] = {"format": "tracekit-diff/2", "headline": body.pop("headline")}
    data.update(body)
    return data


def render_json(d: DiffResult) -> str:
    """JSON with the format and the headline first, then the fields in DiffResult's order."""
    return json.dumps(to_dict(d), indent=2, allow_nan=False) + "\n"


def render_html(d: DiffResult) -> str:
    return render_page(d, sections(d), _heading(d), _views(d), _unit_line(d))


def render(d: DiffResult, fmt: str) -> str:
    """Render in one of RENDER_FORMATS."""
    return {"md": render_md, "json": render_json, "table": render_table, "html": render_html}[fmt](
        d
    )
