"""Latency that includes the GPU, and GPU busy per step, held to a plain json pass over shared
Kineto traces whose GPU lags the host (issue 35).

Oracle (shares no code with tracekit): a step is a ProfilerStep# or step[...] user_annotation;
the GPU work it launched = the kernels/memcpys/memsets whose runtime call (same correlation id,
graph launches included) starts inside the step on the step's thread. Latency = max(host end,
last such GPU end) - start. Busy per step = the union of every GPU interval per device clipped
to that latency window, summed over the trace's devices, over window x devices.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_params

import tracekit
from tests.latency_oracle import oracle_steps
from tracekit.report.context import build_report_context
from tracekit.report.render import render_json, render_md


def _report(path: Path) -> tuple[dict[str, Any], str, Any]:
    with tracekit.open(path) as ts:
        ctx = build_report_context(ts, [path])
        stats = {r["stage"]: r for r in ts.query_dicts("compare_stage_stats")}
    return json.loads(render_json(ctx))["traces"][0], render_md(ctx), stats


@pytest.mark.parametrize("trace", shared_params("kineto_trace_diff_test_hta.json.gz"))
def test_step_latency_includes_the_gpu(trace: Path) -> None:  # type: ignore[no-untyped-def]
    src = trace
    want = oracle_steps(src, r"ProfilerStep#")
    assert max(w["tail_ms"] for w in want) > 40  # the GPU lags the host here: the case tested
    fig, md, stats = _report(src)
    got = fig["per_request"]
    assert [r["latency_ms"] for r in got] == pytest.approx(
        [w["latency_ms"] for w in want], abs=1e-3
    )
    assert [r["e2e_ms"] for r in got] == pytest.approx([w["host_ms"] for w in want], abs=1e-3)
    # the headline, the stage table's end_to_end row, diff/check's samples: the same figure
    p50 = statistics.median(w["latency_ms"] for w in want)
    assert fig["requests"]["end_to_end"]["p50_ms"] == pytest.approx(p50, abs=1e-3)
    assert stats["end_to_end"]["p50_ms"] == pytest.approx(p50, abs=1e-3)
    assert f"**Latency p50 {p50:.3f} ms" in md
    host = statistics.median(w["host_ms"] for w in want)
    tail = statistics.median(w["tail_ms"] for w in want)
    assert f"(host {host:.3f} ms, GPU finishes {tail:.3f} ms later: medians)" in md
    # per step GPU busy over its latency window, labelled with the window
    assert fig["gpu"]["windows"]["per_request[].gpu_utilization"] == "request latency"
    assert [r["gpu_utilization"] for r in got] == pytest.approx([w["util"] for w in want], abs=1e-5)
    med = statistics.median(w["util"] for w in want)
    assert fig["gpu"]["per_request_utilization"]["p50"] == pytest.approx(med, abs=1e-5)
    assert f"GPU busy {med:.0%} of each step's latency (median over {len(want)} steps)" in md
    # the timeline's line per step: its span to the end of its GPU work, busy over that window
    for w, r in zip(want, sorted(got, key=lambda r: r["start_ms"]), strict=True):
        line = next(x for x in md.splitlines() if x.startswith(f"- req {r['request_id']} "))
        end = r["start_ms"] + w["latency_ms"]
        assert f"-{end:.3f} ms (host to {r['start_ms'] + w['host_ms']:.3f})" in line, line
        assert line.endswith(f"(GPU busy {w['util']:.0%} of its latency)"), line


@pytest.mark.parametrize(
    "trace",
    shared_params("kineto_b300_sglang_qwen3-30b-a3b_decode_bs16_cudagraph_tracelens.json.gz")
    + shared_params("kineto_mi300x_sglang_qwen3-30b-a3b_decode_bs16_hipgraph_tracelens.json.gz"),
)
def test_graph_replayed_decode_step_latency(trace: Path) -> None:  # type: ignore[no-untyped-def]
    """The decode step's kernels all come from one graph launch: they count via the launch."""
    src = trace
    (step,) = oracle_steps(src, r"step\[DECODE")
    assert step["tail_ms"] > step["host_ms"]  # the GPU finishes long after the host
    fig, md, stats = _report(src)
    decode = next(s for s in fig["stages"] if s["stage"] == "decode")
    assert decode["host_ms"] == pytest.approx(step["host_ms"], abs=1e-3)
    assert decode["p50_ms"] == pytest.approx(step["latency_ms"], abs=1e-3)
    assert decode["gpu_tail_ms"] == pytest.approx(step["tail_ms"], abs=1e-3)
    assert stats["decode"]["p50_ms"] == pytest.approx(step["latency_ms"], abs=1e-3)
    (req,) = fig["per_request"]
    assert f"One request ({req['latency_ms']:.3f} ms; host {req['e2e_ms']:.3f} ms, GPU " in md
