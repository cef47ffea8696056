"""The JSON report's per-trace object: each section's figures (Section.json_figures, declared
in sections.py beside its table) plus what no table shows: request counts, the program kind,
generation, host waits, graph replay and the findings (docs/report.md documents the keys)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from tracekit.report.finding import Finding
from tracekit.report.model import Answer
from tracekit.report.section_json import put, query_rows, rounded
from tracekit.report.sections import SECTIONS, Laid
from tracekit.report.serving import generation
from tracekit.report.timeline import device_names, timeline_json

__all__ = ["figures", "rounded"]


def _program(q: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The program kind (program_kind): inference/training/other, single or multi-rank."""
    rows = q.get("program_kind") or []
    if not rows:
        return None
    k = rows[0]
    return {key: v for key, v in k.items() if key != "trace_id"}


def figures(laid: Laid, answer: Answer, findings: Sequence[Finding]) -> dict[str, Any]:
    q = laid.q
    out: dict[str, Any] = {
        "trace_id": q["trace_overview"][0]["trace_id"],
        "requests": {
            "count": answer.requests,
            "source": answer.source,
            "throughput_rps": rounded(answer.throughput_rps),
        },
        "program": _program(q),
        "generation": _generation(q),
        "stage_host_waits": query_rows(q.get("stage_host_waits", [])),
        # host calls that can block on the GPU (the evidence of a blocking-call cause)
        "blocking_calls": query_rows(q.get("blocking_calls", [])),
        "graph_replay": next(
            (r for r in query_rows(q.get("graph_replay", [])) if r["replayed_kernels"]), None
        ),
        "timeline": timeline_json(q.get("timeline_lanes", []), device_names(q)),
        "findings": [
            {
                "id": f.id,
                "severity": f.severity,
                "title": f.title,
                "evidence": f.evidence,
                "query": f.query,
                "next_step": f.next_step,
                "numbers": {k: rounded(v) for k, v in f.numbers.items()},
                "scope": f.scope,
            }
            for f in findings
        ],
    }
    for sec in SECTIONS:
        for path, value in sec.json_figures(laid).items():
            put(out, path, value)
    return out


def _generation(q: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """TTFT / TPOT percentiles and the per-request rows of generation_requests (None: no
    prefill/decode steps)."""
    rows = q.get("generation_requests", [])
    g = generation(rows)
    if g is None:
        return None
    return {
        **{k: rounded(v) for k, v in asdict(g).items()},
        "per_request": query_rows(rows),
    }
