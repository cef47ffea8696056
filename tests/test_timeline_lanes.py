"""The one picture (issue 38 item 1): queries/timeline_lanes.sql, the timeline SVG and its JSON.

Oracles: the GPU lanes against an independent pass over the raw file (tests/gpu_oracle.py: its
kernel, copy and memset intervals, their union here), merged with the rule docs/report.md
states (busy islands closer than the tolerance, window / px, become one bar); the drawn lanes
against the JSON report's, as Chromium lays out the page (tests/test_report_browser.py's
test_drawn_lanes_equal_the_json_lanes, on the dumps the other browser tests take)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit
from tests.conftest import shared_params
from tests.gpu_oracle import raw_gpu_intervals, union_ns
from tracekit.report.timeline import PX

GPU_TRACES = (
    shared_params("nsys_2026_h100x2_mfu_before.sqlite")
    + shared_params("nsys_2022_gtx1060_concurrent_nvtx.sqlite")
    + shared_params("kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz")
    + shared_params("kineto_trace_diff_control_hta.json.gz")
)


def islands(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def merged(isl: list[tuple[int, int]], tol: int) -> list[tuple[int, int]]:
    """Islands whose gap is under `tol` as one interval (the stated merge rule)."""
    out: list[tuple[int, int]] = []
    for s, e in isl:
        if out and s - out[-1][1] < tol:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_gpu_lanes_are_the_raw_busy_islands_merged_below_one_pixel(trace: Path) -> None:
    with tracekit.open(trace) as t:
        rows = t.query_dicts("timeline_lanes", trace_id=1, px=PX)
    raw = raw_gpu_intervals(trace)
    gpu = [r for r in rows if r["lane_kind"] == "gpu"]
    assert {r["device"] for r in gpu} == set(raw)
    origin = rows[0]["origin_ns"]
    tol = round(rows[0]["merge_ms"] * 1e6)
    window_ns = (rows[0]["window_end_ms"] - rows[0]["window_start_ms"]) * 1e6
    assert tol == max(int(window_ns) // PX, 1) or abs(tol - window_ns / PX) <= 1
    for device, intervals in raw.items():
        lane = [r for r in gpu if r["device"] == device]
        want = merged(islands(intervals), tol)
        got = [(origin + round(r["start_ms"] * 1e6), origin + round(r["end_ms"] * 1e6))
               for r in lane]  # fmt: skip
        assert len(got) == len(want)
        # ms doubles from the trace's start: within 1 ns of the raw nanoseconds
        assert all(
            abs(a - c) <= 1 and abs(b - d) <= 1 for (a, b), (c, d) in zip(got, want, strict=True)
        )
        # the bars hide only gaps under the tolerance; their busy time is the exact union
        assert sum(r["busy_ms"] for r in lane) == pytest.approx(union_ns(intervals) / 1e6,
                                                                abs=1e-6)  # fmt: skip
        assert len(lane) <= PX + 1


def test_a_lane_stays_small_with_200k_kernels(tmp_path: Path) -> None:
    """200,000 kernels of 1 µs, 1 µs apart, in 50 bursts: the GPU lane is a few dozen bars
    (every gap left at least window / PX), its busy time exact."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 1_000_000}]  # fmt: skip
    ts = 10
    for _burst in range(50):
        for _ in range(4000):
            events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                           "ts": ts, "dur": 1, "args": {"device": 0, "stream": 7}})  # fmt: skip
            ts += 2
        ts += 12_000  # a gap the plot shows (window ~1 s: 1 px ~ 1.6 ms)
    path = tmp_path / "many.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with tracekit.open(path) as t:
        rows = t.query_dicts("timeline_lanes", trace_id=1, px=PX)
    gpu = [r for r in rows if r["lane_kind"] == "gpu"]
    assert len(gpu) == 50
    assert sum(r["merged"] for r in gpu) == 200_000
    assert sum(r["busy_ms"] for r in gpu) == pytest.approx(200.0, abs=1e-6)
    assert len(rows) < 4 * (PX + 1)
