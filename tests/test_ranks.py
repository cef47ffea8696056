"""The cross-rank view (issue 38 item 3): per-rank figures against an independent pass over the
rank files (json for Kineto, sqlite3 for nsys), and the late rank named."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES

import tracekit
from tests.gpu_oracle import raw_gpu_intervals, union_ns
from tracekit.report.context import build_report_context
from tracekit.report.render import render

TORCHREC = SHARED_TRACES / "kineto_ampere_torchrec_2of128ranks_sampled_hta"
MFU = [SHARED_TRACES / f"nsys_2026_h100x2_mfu_{w}.sqlite" for w in ("before", "after")]
COMM = re.compile("nccl", re.I)  # the only communication kernels in these traces
MS = 1e6


def _figures(kernels: list[tuple[str, int, int]], activity: list[tuple[int, int]]) -> dict:
    """busy, compute, communication, exposed communication and idle (ms) of one device."""
    comm = [(s, e) for n, s, e in kernels if COMM.search(n)]
    compute = [(s, e) for n, s, e in kernels if not COMM.search(n)]
    busy = union_ns(activity)
    active = max(e for _, e in activity) - min(s for s, _ in activity)
    return {
        "busy_ms": busy / MS,
        "compute_ms": union_ns(compute) / MS,
        "communication_ms": union_ns(comm) / MS,
        "exposed_communication_ms": (union_ns(comm + compute) - union_ns(compute)) / MS,
        "idle_ms": (active - busy) / MS,
    }


def oracle_kineto(files: list[Path]) -> dict[int, dict[str, Any]]:
    """rank (distributedInfo) -> figures, from each file with Python's json module."""
    out = {}
    for f in files:
        doc = json.loads(gzip.decompress(f.read_bytes()))
        rank = int(doc["distributedInfo"]["rank"])
        kernels = []
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "kernel":
                s = round(float(e["ts"]) * 1000)
                kernels.append((e["name"], s, s + round(float(e["dur"]) * 1000)))
        steps = [
            float(e["dur"]) / 1e3
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        ]
        (activity,) = raw_gpu_intervals(f).values()  # one device per rank file
        out[rank] = {**_figures(kernels, activity), "steps": len(steps),
                     "step_ms": sum(steps) / len(steps)}  # fmt: skip
    return out


def oracle_nsys(path: Path) -> dict[int, dict[str, Any]]:
    """device -> figures, from the export with sqlite3."""
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    rows = con.execute(
        "SELECT k.deviceId, s.value, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    con.close()
    activity = raw_gpu_intervals(path)
    return {
        dev: _figures([(n, s, e) for d, n, s, e in rows if d == dev], activity[dev])
        for dev in activity
    }


def late_of(expected: dict[int, dict[str, Any]]) -> int:
    """The oracle's late rank: the least time in communication kernels."""
    return min(expected, key=lambda r: expected[r]["communication_ms"])


def _check(ctx: Any, expected: dict[int, dict[str, Any]]) -> None:
    assert ctx.ranks is not None
    per_rank = {r["rank"]: r for r in ctx.ranks.figures["per_rank"]}
    assert per_rank.keys() == expected.keys()
    for rank, want in expected.items():
        for key, value in want.items():
            assert per_rank[rank][key] == pytest.approx(value, abs=1e-3), (rank, key)
    late = late_of(expected)
    assert ctx.ranks.late_rank == late
    assert ctx.ranks.sentence.startswith(f"Rank {late} is late")
    comm = {r: w["communication_ms"] for r, w in expected.items()}
    for rank in expected:  # each other rank's wait: its communication over the late rank's
        assert per_rank[rank]["wait_ms"] == pytest.approx(comm[rank] - comm[late], abs=1e-3)


@pytest.mark.skipif(not TORCHREC.is_dir(), reason=f"{TORCHREC} is absent")
def test_rank_folder_figures_equal_a_json_pass(tmp_path: Path) -> None:
    folder = tmp_path / TORCHREC.name
    folder.mkdir()
    files = []
    for f in sorted(TORCHREC.iterdir()):
        (folder / f.name).write_bytes(f.read_bytes())
        files.append(folder / f.name)
    expected = oracle_kineto(files)
    with tracekit.open(folder) as ts:
        ctx = build_report_context(ts, [folder])
    _check(ctx, expected)
    # rank 1's embedding kernels take ~2.5x rank 0's (MANIFEST): rank 1 is late, rank 0 waits
    assert ctx.ranks.late_rank == 1
    page = render(ctx, "html")
    assert page.index('id="ranks-h"') < page.index('id="trace-1"')
    assert page.count('<details class="rank-trace">') == 2  # per-rank sections folded
    assert json.loads(render(ctx, "json"))["ranks"]["late_rank"] == 1
    assert "## Ranks: 2 ranks compared" in render(ctx, "md")


@pytest.mark.parametrize("trace", [pytest.param(p, id=p.name) for p in MFU])
def test_two_gpus_of_one_export_are_ranks(trace: Path) -> None:
    if not trace.exists():
        pytest.skip(f"{trace} is absent")
    expected = oracle_nsys(trace)
    with tracekit.open(trace) as ts:
        ctx = build_report_context(ts)
    _check(ctx, expected)


def test_one_capture_seen_by_two_tools_is_not_a_rank_set() -> None:
    with tracekit.open(SAMPLE_TRACES) as ts:
        ctx = build_report_context(ts, [SAMPLE_TRACES])
    assert ctx.ranks is None
    assert "ranks" not in json.loads(render(ctx, "json"))
