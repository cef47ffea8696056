"""Memory (issue 38 item 4): allocator peaks per device and stage, memory over time, and the
findings, against a plain json pass over the trace (its own formulas)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES

import tracekit
from tests.kineto_oracle import load
from tracekit.report.context import build_report_context

MEMORY_TRACE = SHARED_TRACES / "kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz"
needs_memory_trace = pytest.mark.skipif(
    not MEMORY_TRACE.exists(), reason=f"{MEMORY_TRACE} is absent"
)
MIB = 1 << 20
GIB = 1 << 30


def oracle_memory(path: Path) -> dict[int, dict[str, int]]:
    """Device Id -> events, allocations, frees, peak Total Allocated / Reserved of every
    `[memory]` instant, and the device's totalGlobalMem where deviceProperties has it."""
    doc = load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    out: dict[int, dict[str, int]] = defaultdict(
        lambda: {"events": 0, "allocations": 0, "frees": 0, "allocated": 0, "reserved": 0}
    )
    for e in events:
        if e.get("name") != "[memory]" or e.get("ph") not in ("i", "I"):
            continue
        a = e.get("args") or {}
        d = out[int(a.get("Device Id", -1))]
        d["events"] += 1
        d["allocations"] += a.get("Bytes", 0) > 0
        d["frees"] += a.get("Bytes", 0) < 0
        d["allocated"] = max(d["allocated"], int(a["Total Allocated"]))
        d["reserved"] = max(d["reserved"], int(a["Total Reserved"]))
    if isinstance(doc, dict):
        for p in doc.get("deviceProperties", []):
            if p.get("id") in out and "totalGlobalMem" in p:
                out[p["id"]]["capacity"] = int(p["totalGlobalMem"])
    return dict(out)


@needs_memory_trace
def _device_peaks_equal(
    peaks: list[dict[str, Any]], timeline: list[dict[str, Any]], expected: dict[int, Any]
) -> dict[int, dict[str, Any]]:
    """memory_peaks' device rows and memory_timeline's bins against the oracle's per-device
    counts and allocated peak: the chart's tallest bin is the peak, and its bins count every
    event once. Returns the device rows by device."""
    devices = {r["device"]: r for r in peaks if r["scope"] == "device"}
    assert devices.keys() == expected.keys()
    for dev, want in expected.items():
        got = devices[dev]
        assert (got["events"], got["allocations"], got["frees"]) == (
            want["events"], want["allocations"], want["frees"],
        )  # fmt: skip
        assert got["peak_allocated_bytes"] == want["allocated"]
        bins = [b for b in timeline if b["device"] == dev]
        assert max(b["allocated_bytes"] or 0 for b in bins) == want["allocated"]
        assert sum(b["events"] for b in bins) == want["events"]
    return devices


def test_peaks_equal_a_plain_json_pass() -> None:
    src = MEMORY_TRACE
    expected = oracle_memory(MEMORY_TRACE)
    # MANIFEST.md: 310 allocations and 310 frees, peak 220.62 MiB allocated, 234.0 MiB reserved
    assert sum(d["allocations"] for d in expected.values()) == 310
    assert round(expected[0]["allocated"] / MIB, 2) == 220.62
    assert round(expected[0]["reserved"] / MIB, 1) == 234.0
    with tracekit.open(src) as ts:
        peaks = ts.query_dicts("memory_peaks", trace_id=1)
        timeline = ts.query_dicts("memory_timeline", trace_id=1)
        ctx = build_report_context(ts)
    devices = _device_peaks_equal(peaks, timeline, expected)
    for dev, want in expected.items():
        assert devices[dev]["peak_reserved_bytes"] == want["reserved"]
        assert devices[dev]["capacity_bytes"] == want.get("capacity")
        bins = [b for b in timeline if b["device"] == dev]
        assert max(b["reserved_bytes"] or 0 for b in bins) == want["reserved"]
    # a stage's peak never exceeds its device's, and the device peak lies in some stage here
    stages = [r for r in peaks if r["scope"] == "stage"]
    assert stages and all(
        r["peak_allocated_bytes"] <= devices[r["device"]]["peak_allocated_bytes"] for r in stages
    )
    trace = ctx.traces[0]
    table = next(t for t in trace.tables if t.query == "memory_peaks")
    assert table.rows[0][6].text == "220.6 MiB" and table.rows[0][7].text == "234.0 MiB"
    assert [c.id for c in table.charts] == ["t1-memory-chart"]
    json_peaks = {r["device"]: r for r in trace.figures["memory"]["peaks"]
                  if r["scope"] == "device"}  # fmt: skip
    assert json_peaks[0]["peak_allocated_bytes"] == expected[0]["allocated"]
    # 0.3% of an 80 GB H100, reserved 1.06x allocated: no memory finding
    assert not {f.id for f in trace.findings} & {"memory_near_capacity", "memory_reserved_unused"}


LEGACY = SHARED_TRACES / "kineto_v100_resnet50_train_pt1.9_legacy_cats_tbplugin.json.gz"


@pytest.mark.skipif(not LEGACY.exists(), reason=f"{LEGACY} is absent")
def test_events_without_totals_peak_at_their_running_sum() -> None:
    """torch 1.9 records only Bytes: allocated is their running sum from the trace's start
    (in time order, file order among equal times), reserved unknown."""
    doc = load(LEGACY)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    mem = sorted(
        (round(float(e["ts"]) * 1000), i, e["args"])
        for i, e in enumerate(events)
        if e.get("name") == "[memory]" and e.get("ph") in ("i", "I")
    )
    assert mem and all("Total Allocated" not in a for _, _, a in mem)
    expected: dict[int, int] = {}
    running: dict[int, int] = defaultdict(int)
    for _, _, a in mem:
        dev = int(a.get("Device Id", -1))
        running[dev] += int(a["Bytes"])
        expected[dev] = max(expected.get(dev, running[dev]), running[dev])
    with tracekit.open(LEGACY) as ts:
        peaks = ts.query_dicts("memory_peaks", trace_id=1)
        timeline = ts.query_dicts("memory_timeline", trace_id=1)
    got = {r["device"]: r for r in peaks if r["scope"] == "device"}
    assert {d: r["peak_allocated_bytes"] for d, r in got.items()} == expected
    assert all(r["peak_reserved_bytes"] is None for r in got.values())
    for dev, peak in expected.items():
        assert max(b["allocated_bytes"] for b in timeline
                   if b["device"] == dev and b["allocated_bytes"] is not None) == peak  # fmt: skip


def _memory_trace(path: Path, capacity: int, steps: list[tuple[int, int, int]]) -> Path:
    """A Kineto trace of one ProfilerStep with `[memory]` instants (bytes, total allocated,
    total reserved) on device 0, whose deviceProperties give `capacity`."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 1000, "dur": 1000},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1100, "dur": 100,
         "args": {"device": 0, "stream": 7}},
    ]  # fmt: skip
    for i, (nbytes, allocated, reserved) in enumerate(steps):
        ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                   "tid": 1, "ts": 1010 + 10 * i,
                   "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * (i + 1),
                            "Bytes": nbytes, "Total Allocated": allocated,
                            "Total Reserved": reserved}})  # fmt: skip
    doc = {
        "schemaVersion": 1,
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": capacity}],
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("capacity", "steps", "finding"),
    [
        # 7.5 of 8 GiB allocated at the peak: near capacity
        (8 * GIB, [(4 * GIB, 4 * GIB, 4 * GIB), (int(3.5 * GIB), int(7.5 * GIB), 8 * GIB),
                   (-4 * GIB, int(3.5 * GIB), 8 * GIB)], "memory_near_capacity"),
        # 1 GiB allocated, 3 GiB reserved on an 80 GiB device: cached, unused
        (80 * GIB, [(GIB, GIB, 3 * GIB), (-GIB, 0, 3 * GIB), (GIB, GIB, 3 * GIB)],
         "memory_reserved_unused"),
        # 1 GiB of 80, reserved 1.25 GiB: nothing to say
        (80 * GIB, [(GIB, GIB, GIB + GIB // 4), (-GIB, 0, GIB + GIB // 4),
                    (GIB, GIB, GIB + GIB // 4)], None),
    ],
)  # fmt: skip
def test_findings_follow_the_peaks(tmp_path: Path, capacity: int, steps: Any,
                                   finding: str | None) -> None:  # fmt: skip
    src = _memory_trace(tmp_path / "mem.json", capacity, steps)
    expected = oracle_memory(src)[0]
    with tracekit.open(src) as ts:
        ctx = build_report_context(ts)
    found = {f.id: f for f in ctx.traces[0].findings if f.id.startswith("memory_")}
    assert set(found) == ({finding} if finding else set())
    if finding:
        f = found[finding]
        assert f.numbers["peak_allocated_bytes"] == expected["allocated"]
        assert f.numbers["peak_reserved_bytes"] == expected["reserved"]


def test_no_memory_section_without_allocator_events() -> None:
    with tracekit.open(SAMPLE_TRACES) as ts:
        ctx = build_report_context(ts)
    for trace in ctx.traces:
        assert "memory_peaks" not in {t.query for t in trace.tables}
        assert trace.figures["memory"] == {"peaks": [], "timeline": []}


NSYS_MEMORY_TRACE = SHARED_TRACES / "nsys_2022_gtx1060_concurrent_nvtx.sqlite"
HOST_KINDS = (0, 1)  # ENUM_CUDA_MEM_KIND: pageable, pinned (host memory)


def oracle_nsys_memory(path: Path) -> dict[int, dict[str, int]]:
    """Device (-1: host) -> events, allocations, frees and peak running sum of the bytes of
    CUDA_GPU_MEMORY_USAGE_EVENTS in start order (memoryOperationType 1 = a free)."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = con.execute(
        "SELECT deviceId, memKind, memoryOperationType, bytes FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
        "ORDER BY start, rowid"
    ).fetchall()
    con.close()
    out: dict[int, dict[str, int]] = defaultdict(
        lambda: {"events": 0, "allocations": 0, "frees": 0, "now": 0, "allocated": 0}
    )
    for device, kind, op, nbytes in rows:
        d = out[-1 if kind in HOST_KINDS else device]
        d["events"] += 1
        d["frees" if op == 1 else "allocations"] += 1
        d["now"] += -nbytes if op == 1 else nbytes
        d["allocated"] = max(d["allocated"], d["now"])
    return dict(out)


@pytest.mark.skipif(not NSYS_MEMORY_TRACE.exists(), reason=f"{NSYS_MEMORY_TRACE} is absent")
def test_nsys_cuda_memory_usage_peaks_equal_a_plain_sqlite_pass() -> None:  # type: ignore[no-untyped-def]
    src = NSYS_MEMORY_TRACE
    expected = oracle_nsys_memory(NSYS_MEMORY_TRACE)
    # the export's 60 rows: cudaHostAlloc (pinned) and cudaMalloc (device), 15 of each op
    assert sum(d["events"] for d in expected.values()) == 60
    assert expected.keys() == {-1, 0}
    with tracekit.open(src) as ts:
        peaks = ts.query_dicts("memory_peaks", trace_id=1)
        timeline = ts.query_dicts("memory_timeline", trace_id=1)
    devices = _device_peaks_equal(peaks, timeline, expected)
    for got in devices.values():
        assert got["peak_reserved_bytes"] is None  # nsys records no allocator reserve
