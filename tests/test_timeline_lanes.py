"""The one picture (issue 38 item 1): queries/timeline_lanes.sql, the timeline SVG and its JSON.

Oracles: the GPU lanes against an independent pass over the raw file (tests/gpu_oracle.py: its
kernel, copy and memset intervals, their union here), merged with the rule docs/report.md
states (busy islands closer than the tolerance, window / px, become one bar); the drawn lanes
against the JSON report's, as Chromium lays out the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES, shared_params
from tests.gpu_oracle import raw_gpu_intervals, union_ns
from tracekit.report import write_report
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


# ---- the page, as Chromium lays it out

PAGES = [pytest.param(SAMPLE_TRACES, id="sample_traces (a tracekit capture: nsys + Kineto)")] + [
    pytest.param(SHARED_TRACES / name, id=name, marks=pytest.mark.skipif(
        not (SHARED_TRACES / name).exists(), reason=f"{SHARED_TRACES} is absent"))
    for name in ("nsys_2022_gtx1060_concurrent_nvtx.sqlite",
                 "kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz",
                 "kineto_mi300x_flux.1_xdit_diffusers_pipeline_with_stack_tracelens.json.gz")
]  # fmt: skip
SCREEN_PX = 900
MAX_TIMELINE_PX = 450
_pages: dict[Path, tuple[Path, dict[str, Any]]] = {}


@pytest.fixture(scope="module")
def pages_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("timeline")


def _reports(trace: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The HTML and JSON reports of a trace, written once for both widths."""
    if trace not in _pages:
        page = write_report([trace], output=out / f"{trace.name}.html")
        data = write_report([trace], output=out / f"{trace.name}.json", fmt="json")
        _pages[trace] = (page, json.loads(data.read_text()))
    return _pages[trace]


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
@pytest.mark.parametrize("width", (1400, 800))
@pytest.mark.parametrize("trace", PAGES)
def test_drawn_lanes_equal_the_json_lanes(
    trace: Path, width: int, tmp_path: Path, pages_dir: Path
) -> None:
    from test_report_browser import selfcheck

    page, data = _reports(trace, pages_dir)
    check, _ = selfcheck(page, width, tmp_path / "profile")
    for tr in data["traces"]:
        tl = tr["timeline"]
        want = [ln for ln in tl["lanes"] if ln["kind"] != "zoom_gpu"]
        drawn = check["timelines"][f"t{tr['trace_id']}-timeline"]
        assert len(drawn["lanes"]) == len(want)
        px_ms = (tl["window_end_ms"] - tl["window_start_ms"]) / tl["px"]
        by_name = {(d["kind"], d["name"]): d for d in drawn["lanes"]}
        assert len(by_name) == len(want)
        for ln in want:
            d = by_name[(ln["kind"], ln["name"])]
            assert d["bars"] == len(ln["intervals"])
            first = min(i["start_ms"] for i in ln["intervals"])
            last = max(i["end_ms"] for i in ln["intervals"])
            assert d["first_ms"] == pytest.approx(first, abs=0.01 * px_ms)  # x: 2 decimals
            assert d["last_ms"] == pytest.approx(last, abs=0.5 * px_ms)  # bars >= 0.5 px
        if tr["trace_id"] == 1:  # the first trace's picture is in the first 1.5 screens
            assert drawn["top"] < 1.5 * SCREEN_PX
        # the figure's height at 1400 px (lanes shown, axis, fold line, legend, note)
        if width == 1400:
            assert drawn["height"] <= MAX_TIMELINE_PX
    zoom = check.get("zoom")
    if zoom:  # clicking a request zooms to it; clicking it again goes back
        assert zoom["zoomed"] and "scale(" in zoom["transform"] and zoom["after"] is None
