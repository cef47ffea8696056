"""Renderers for a DiffResult: markdown, JSON, a terminal table and one offline HTML file.

The renderers only format; every figure is computed by tracekit.compare.diff.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from tracekit.compare.diff import DiffResult, ItemDelta, MetricDelta

RENDER_FORMATS = ("table", "md", "json", "html")
TOP_ITEMS = 15


def _num(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:,.{digits}f}"


def _count(v: float) -> str:
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"×{v:.3f}"


def _signed(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:+,.{digits}f}"


def _noise(m: MetricDelta) -> str:
    if m.noise is None:
        return ""
    n = m.noise
    spread = f", spread {_num(n.spread)}" if n.spread is not None else ""
    verdict = "beyond noise" if n.exceeds else "within noise"
    return f"95% CI [{_signed(n.ci_low)}, {_signed(n.ci_high)}]{spread}: {verdict}"


def _stage_rows(d: DiffResult) -> list[list[str]]:
    rows = []
    for s in d.stages:
        for m in s.metrics:
            rows.append([s.stage, m.metric, _num(m.before), _num(m.after), _signed(m.delta),
                         _ratio(m.ratio), _noise(m)])  # fmt: skip
    return rows


def _item_rows(items: tuple[ItemDelta, ...], shape: bool) -> list[list[str]]:
    rows = []
    for i in [i for i in items if i.status != "unchanged"][:TOP_ITEMS]:
        row = [i.status, i.name] + ([i.shape] if shape else [])
        row += [_count(i.before_count), _count(i.after_count), _num(i.before_ms),
                _num(i.after_ms), _signed(i.delta_ms), _ratio(i.ratio)]  # fmt: skip
        rows.append(row)
    return rows


def _summary_rows(d: DiffResult) -> list[list[str]]:
    labels = {"rps_request_time": "requests/s (of summed request time)",
              "rps_span": "requests/s (of trace span)", "gpu_busy_ms": "GPU busy ms (per run)",
              "gpu_utilization": "GPU utilization"}  # fmt: skip
    return [[labels[m.metric], _num(m.before), _num(m.after), _signed(m.delta), _ratio(m.ratio)]
            for m in d.throughput + d.gpu]  # fmt: skip


STAGE_HEAD = ["stage", "metric", "before", "after", "delta", "ratio", "noise"]
SUMMARY_HEAD = ["", "before", "after", "delta", "ratio"]
ITEM_TAIL = ["count before", "count after", "ms before", "ms after", "delta ms", "ratio"]


def tables(d: DiffResult) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for each section, shared by the md, table and html renderers."""
    return [
        ("Stages (ms across requests)", STAGE_HEAD, _stage_rows(d)),
        ("Throughput and GPU", SUMMARY_HEAD, _summary_rows(d)),
        ("Ops that changed (by name and input shapes)", ["change", "op", "shape"] + ITEM_TAIL,
         _item_rows(d.ops, True)),
        ("Kernels that changed", ["change", "kernel"] + ITEM_TAIL, _item_rows(d.kernels, False)),
    ]  # fmt: skip


def _heading(d: DiffResult) -> str:
    b, c = d.baseline, d.candidate
    return (
        f"baseline {b.label} ({len(b.runs)} run(s), {b.requests} requests) vs "
        f"candidate {c.label} ({len(c.runs)} run(s), {c.requests} requests)"
    )


def render_md(d: DiffResult) -> str:
    out = ["# tracekit diff", "", _heading(d), ""]
    for title, head, rows in tables(d):
        out += [f"## {title}", ""]
        if not rows:
            out += ["(none)", ""]
            continue
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
        out.append("")
    return "\n".join(out)


def render_table(d: DiffResult) -> str:
    out = [_heading(d)]
    for title, head, rows in tables(d):
        out += ["", title]
        if not rows:
            out.append("(none)")
            continue
        cells = [head] + [[c if len(c) <= 60 else c[:59] + "…" for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
        for k, r in enumerate(cells):
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
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
    data: dict[str, Any] = _clean(dataclasses.asdict(d))
    data["format"] = "tracekit-diff/1"
    return data


def render_json(d: DiffResult) -> str:
    return json.dumps(to_dict(d), sort_keys=True, indent=2) + "\n"


def render_html(d: DiffResult) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tracekit.templates", "."),
        autoescape=True, undefined=jinja2.StrictUndefined,
    )  # fmt: skip
    return env.get_template("diff.html.j2").render(heading=_heading(d), sections=tables(d))


def render(d: DiffResult, fmt: str) -> str:
    """Render in one of RENDER_FORMATS."""
    return {"md": render_md, "json": render_json, "table": render_table,
            "html": render_html}[fmt](d)  # fmt: skip
