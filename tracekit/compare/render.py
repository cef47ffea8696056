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

from tracekit.compare.page import render_page
from tracekit.compare.result import DiffResult
from tracekit.compare.sections import count, sections
from tracekit.present import md_cell, md_table, term_text

RENDER_FORMATS = ("table", "md", "json", "html")
WRAP = 100  # headline lines in the terminal table


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
    return count(v) if v == int(v) else f"{v:,.3f}"


def render_md(d: DiffResult) -> str:
    """Markdown. Sentences that carry trace strings, and every table label and cell (as in
    the report: present.md_table), go through md_cell; the section titles and notes are
    tracekit's own text."""
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
        out += md_table(sec).splitlines()
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
        head = [c.label for c in sec.columns]
        cells = [head] + [[term_text(c.text) for c in r] for r in sec.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
        right = [c.numeric for c in sec.columns]
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
