"""Each report section declares the JSON report keys that hold its figures (Section.json_key in
tracekit/report/sections.py); every section a trace's page shows must find them in that trace's
JSON object, so a new section cannot ship HTML and md without its JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES, shared_params

import tracekit
from tracekit.report.context import build_report_context
from tracekit.report.render import render
from tracekit.report.sections import SECTIONS


def resolves(obj: Any, path: str) -> bool:
    """Whether `path` ('gpu.per_device[].streams') is in `obj`: `[]` steps into every element
    of a list (an empty list holds every path)."""
    head, dot, rest = path.partition(".")
    each = head.endswith("[]")
    key = head.removesuffix("[]")
    if not isinstance(obj, dict) or key not in obj:
        return False
    value = obj[key]
    if each:
        if not isinstance(value, list):
            return False
        return all(resolves(v, rest) for v in value) if dot else True
    return resolves(value, rest) if dot else True


def test_resolves_reads_paths_as_documented() -> None:
    doc = {"gpu": {"per_device": [{"streams": []}, {"streams": [1]}], "busy_ms": 1.0}}
    assert resolves(doc, "gpu.busy_ms") and resolves(doc, "gpu.per_device[].streams")
    assert not resolves(doc, "gpu.per_device[].by_category") and not resolves(doc, "memory")


def missing_keys(source: Path) -> list[str]:
    with tracekit.open(source) as ts:
        ctx = build_report_context(ts)
    doc = json.loads(render(ctx, "json"))
    missing = []
    for tr, obj in zip(ctx.traces, doc["traces"], strict=True):
        shown = {t.id for t in tr.tables}
        for sec in SECTIONS:
            if f"t{tr.trace_id}-{sec.key}" not in shown or not sec.json_key:
                continue
            for path in (p.strip() for p in sec.json_key.split(",")):
                if not resolves(obj, path):
                    missing.append(f"trace {tr.trace_id} section {sec.key}: {path}")
    return missing


def test_sample_json_has_every_shown_sections_keys() -> None:
    assert missing_keys(SAMPLE_TRACES) == []


@pytest.mark.parametrize(
    "trace",
    shared_params("nsys_2026_h100x2_mfu_before.sqlite")
    + shared_params("kineto_h100_bert_small_inference_tracelens.json.gz")
    + shared_params("kineto_b300_sglang_qwen3-30b-a3b_decode_bs16_cudagraph_tracelens.json.gz"),
)
def test_shared_traces_json_has_every_shown_sections_keys(trace: Path) -> None:
    assert missing_keys(trace) == []
