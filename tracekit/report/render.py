"""Renderers: the report context as one self-contained HTML file, Markdown, or JSON.

The environment and the escapers are tracekit.present's, shared with the diff page. The
inline script is a fixed asset whose sha256 goes into the page's Content-Security-Policy;
data for it travels only as JSON in a <script type="application/json"> block.
"""

from __future__ import annotations

import json
from typing import Any

from tracekit.present import environment, inline_script
from tracekit.report.model import ReportContext

FORMATS = ("html", "md", "json")
JSON_SCHEMA_VERSION = 1


def script() -> tuple[str, str]:
    """(inline script text, its CSP source 'sha256-...')."""
    return inline_script("report.js.j2")


def report_json(ctx: ReportContext) -> dict[str, Any]:
    """The machine-readable report (docs/report.md documents the keys)."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "tracekit_version": ctx.tracekit_version,
        "inputs": list(ctx.inputs),
        "environment": dict(ctx.environment),
        "traces": [dict(t.figures) for t in ctx.traces],
        **({"ranks": dict(ctx.ranks.figures)} if ctx.ranks else {}),
    }


def json_for_script(data: Any) -> str:
    """JSON safe inside <script>: '<', '>' and '&' as \\u escapes, so no '</script>'."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(ctx: ReportContext) -> str:
    text, digest = script()
    data = report_json(ctx)  # per-request rows stay in the JSON report: the page stays small
    data["traces"] = [{k: v for k, v in t.items() if k != "per_request"} for t in data["traces"]]
    template = environment().get_template("report.html.j2")
    return template.render(
        ctx=ctx, script=text, script_hash=digest, data_json=json_for_script(data)
    )


def render_md(ctx: ReportContext) -> str:
    return environment().get_template("report.md.j2").render(ctx=ctx)


def render_json(ctx: ReportContext) -> str:
    return json.dumps(report_json(ctx), sort_keys=True, indent=2, allow_nan=False) + "\n"


def render(ctx: ReportContext, fmt: str) -> str:
    if fmt == "html":
        return render_html(ctx)
    if fmt == "md":
        return render_md(ctx)
    if fmt == "json":
        return render_json(ctx)
    raise ValueError(f"unknown report format {fmt!r}")
