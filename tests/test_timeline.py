"""The report's timelines (issue 19): gpu_timeline (GPU busy per bin of the trace span, per
device) and request_timeline (stages of the slowest and typical requests on each request's own
clock). Oracles: a plain sqlite3 / json pass over the raw files, with an interval union written
here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES, shared_params
from tests.gpu_oracle import raw_gpu_intervals, union_ns

BINS = 50


@pytest.mark.parametrize(
    "trace",
    shared_params("nsys_2026_h100x2_mfu_before.sqlite")
    + shared_params("kineto_h100_qwen1.5_0.5b_inference_tracelens.json.gz"),
)
def test_gpu_timeline_bins_add_up_to_each_devices_busy_time(trace: Path) -> None:
    with tracekit.open(trace) as t:
        rows = t.query("gpu_timeline", trace_id=1, bins=BINS).to_dicts()
        span_ms = t.sql("SELECT duration_ns / 1e6 AS s FROM traces").rows()[0][0]
    raw = raw_gpu_intervals(trace)
    assert {r["device"] for r in rows} == set(raw)
    for device, intervals in raw.items():
        bins = [r for r in rows if r["device"] == device]
        assert [r["bin"] for r in bins] == list(range(BINS))
        assert sum(r["bin_ms"] for r in bins) == pytest.approx(span_ms, rel=1e-6)
        busy = union_ns(intervals) / 1e6
        assert sum(r["busy_ms"] for r in bins) == pytest.approx(busy, rel=1e-3)
        assert all(0 <= r["busy_share"] <= 1 + 1e-9 for r in bins)


def test_request_timeline_picks_the_slowest_and_places_stages_on_the_request_clock() -> None:
    data = json.loads((SAMPLE_TRACES / "torch.pt.trace.json").read_text())
    ranges = [e for e in data["traceEvents"] if e.get("ph") == "X"
              and str(e.get("name", "")).startswith("tracekit:")]  # fmt: skip
    requests = sorted((e for e in ranges if e["name"] == "tracekit:request"),
                      key=lambda e: -float(e["dur"]))  # fmt: skip
    with tracekit.open(SAMPLE_TRACES / "torch.pt.trace.json") as t:
        rows = t.query("request_timeline", trace_id=1, slowest=3, typical=2).to_dicts()
    slow = [r for r in rows if r["pick"] == "slowest"]
    e2e = sorted({(r["pick_rank"], r["e2e_ms"]) for r in slow})
    assert [ms for _, ms in e2e] == pytest.approx(
        [float(e["dur"]) / 1e3 for e in requests[:3]], rel=1e-6
    )
    assert len({r["request_id"] for r in rows if r["pick"] == "typical"}) == 2
    slowest = requests[0]
    t0, t1 = float(slowest["ts"]), float(slowest["ts"]) + float(slowest["dur"])
    inside = sorted((float(e["ts"]) - t0, float(e["dur"]), e["name"].split(":", 1)[1])
                    for e in ranges if e["name"] != "tracekit:request"
                    and t0 <= float(e["ts"]) < t1 and e["tid"] == slowest["tid"])  # fmt: skip
    ours = sorted((r["start_ms"] * 1e3, r["dur_ms"] * 1e3, r["stage"]) for r in slow
                  if r["pick_rank"] == 1)  # fmt: skip
    assert [n for _, _, n in ours] == [n for _, _, n in inside]
    for (s1, d1, _), (s2, d2, _) in zip(ours, inside, strict=True):
        assert s1 == pytest.approx(s2, abs=0.01) and d1 == pytest.approx(d2, abs=0.01)
