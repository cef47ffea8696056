"""The report held to an answer key per shared trace (tests/answer_keys/<trace>.toml).

Each key was written from a plain-Python reading of its trace (busy = union of kernel, memcpy
and memset intervals per device; active span = first to last of them) and says what a reader
must conclude: program kind, single or multi-rank, the headline window and figure per device,
the top kernel category, the top kernel (full name) and its time, the cause of low
utilization (or "none"), and text that must and must not appear. A new trace kind only needs
a key file here. Every finding is also held to the JSON report's own tables
(verdict_checks.contradictions): no verdict the report's tables contradict.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, SHARED_TRACES
from verdict_checks import contradictions

import tracekit
from tracekit.report.context import build_report_context
from tracekit.report.render import render_html, render_json, render_md

KEYS = sorted((REPO / "tests" / "answer_keys").glob("*.toml"))


def _params() -> list[object]:
    if not SHARED_TRACES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{SHARED_TRACES} is absent"))]
    return [pytest.param(k, id=k.stem) for k in KEYS]


def test_every_shared_trace_has_a_key() -> None:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent")
    keyed = {tomllib.loads(k.read_text())["trace"] for k in KEYS}
    traces = {
        p.name
        for p in SHARED_TRACES.iterdir()
        if p.is_dir() or p.name.endswith((".sqlite", ".json.gz"))
    }
    assert traces <= keyed, sorted(traces - keyed)


@pytest.mark.parametrize("key_file", _params())
def test_report_matches_its_answer_key(key_file: Path, tmp_path: Path) -> None:
    key = tomllib.loads(key_file.read_text())
    src = SHARED_TRACES / key["trace"]  # read only: its store is built once per run
    one_kineto_file = src.name.startswith("kineto_") and src.is_file()
    with tracekit.open(src) as ts:
        ctx = build_report_context(ts, [src])
        if one_kineto_file:  # the store's kernel count and GPU busy, for the report's
            kernels = ts.sql("SELECT count(*) AS n FROM events WHERE kind = 'kernel'")["n"][0]
            busy = ts.query("gpu_utilization").filter(scope="trace")["busy_ms"][0]
    doc = json.loads(render_json(ctx))
    md = render_md(ctx)
    # The three formats from one context (tests/test_report_browser.py writes each shared
    # trace's HTML end to end and reads it in Chromium).
    assert render_html(ctx).startswith("<!DOCTYPE html>") and md.startswith("# ")
    assert {f["format"] for f in doc["traces"]} == {"nsys" if src.suffix == ".sqlite" else "kineto"}
    if one_kineto_file:
        assert doc["traces"][0]["gpu"]["busy_ms"] == pytest.approx(busy, abs=1e-6)
        assert sum(k["count"] for k in doc["traces"][0]["top_kernels"]) <= kernels
    figs = doc["traces"]
    member = key.get("member")
    fig = next(f for f in figs if not member or Path(f["file"]).name == member)
    tr = next(t for t in ctx.traces if not member or Path(t.figures["file"]).name == member)

    program = fig["program"]
    assert program["kind"] == key["kind"], program
    assert bool(program["multi_rank"]) == key["multi_rank"], program

    devices = {d["device"]: d for d in fig["gpu"]["per_device"]}
    assert sorted(devices) == sorted(d["device"] for d in key.get("device", []))
    for want in key.get("device", []):
        got = devices[want["device"]]
        assert want["window"] == "active" and fig["gpu"]["windows"]["active_utilization"] == (
            "active"
        )
        assert got["busy_ms"] == pytest.approx(want["busy_ms"], rel=1e-3, abs=1e-3)
        assert got["active_ms"] == pytest.approx(want["active_ms"], rel=1e-3, abs=1e-3)
        assert got["active_utilization"] == pytest.approx(want["active_utilization"], abs=2e-3)

    # top kernel category of the busiest device (copies and memsets are not kernels)
    if devices:
        busiest = max(devices.values(), key=lambda d: d["busy_ms"])
        kernel_cats = {
            c: v
            for c, v in busiest["by_category"].items()
            if not c.startswith(("memcpy", "memset"))
        }
        assert max(kernel_cats, key=lambda c: kernel_cats[c]) == key["top_category"]

    # one trace-wide ranking by full name: its first row is the key's top kernel
    if "top_kernel" in key:
        first = fig["top_kernels"][0]
        assert first["rank"] == 1 and first["name"] == key["top_kernel"], first["name"]
        assert first["total_ms"] == pytest.approx(key["top_kernel_ms"], rel=1e-3, abs=1e-3)
    else:
        assert not fig["top_kernels"]

    low = [f for f in tr.findings if f.id.startswith("gpu_low_utilization")]
    if key["low_utilization_cause"] == "none":
        assert not low, [f.evidence for f in low]
    else:
        assert low and all(key["low_utilization_cause"] in f.evidence for f in low), [
            f.evidence for f in low
        ]
    for text in key["must"]:
        assert text in md, text
    for text in key["must_not"]:
        assert text not in md, text
    # no finding contradicted by the report's own tables (every trace of the source)
    assert [c for f in figs for c in contradictions(f)] == []
