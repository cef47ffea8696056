"""`tracekit capture` of a program that runs its own torch.profiler (issue 40).

torch keeps one profiler session per process: the program's ended the runner's under it and
the runner's export then crashed the process (exit 139, no torch trace). The runner now stands
aside and records through the program's profiler. Oracles: the program's own profiler output
(its export, its tensorboard_trace_handler file), a plain-Python pass over the Chrome JSON and
sqlite3 over the nsys export.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import procs

REPO = Path(__file__).resolve().parent.parent
STAGES = ("inference", "postprocess", "preprocess")
HAVE_NSYS = shutil.which("nsys") is not None

# One request before the program's profiler, six under it (p.step() after each), one after.
SCRIPT = """\
import sys
import torch
import tracekit
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

mode, out = sys.argv[1], sys.argv[2]
kw = {}
if mode in ("schedule", "tensorboard"):
    kw["schedule"] = schedule(wait=1, warmup=1, active=2, repeat=1)
if mode == "tensorboard":
    kw["on_trace_ready"] = tensorboard_trace_handler(out)

def serve():
    with tracekit.request():
        with tracekit.stage("preprocess"):
            x = torch.randn(32, 32)
        with tracekit.stage("inference"):
            y = x @ x
        with tracekit.stage("postprocess"):
            float(y.sum())

serve()
if mode == "unstopped":  # started, never stopped: the runner stops it when the program ends
    p = profile(activities=[ProfilerActivity.CPU])
    p.start()
    for _ in range(6):
        serve()
    serve()
    print("served 8")
    sys.exit(0)
with profile(activities=[ProfilerActivity.CPU]{kw}) as p:
    for _ in range(6):
        serve()
        p.step()
serve()
if mode == "plain":
    p.export_chrome_trace(out + "/own.json")
print("served 8")
"""


def stage_counts(path: Path) -> dict[str, int]:
    """tracekit:<stage> ranges in a Chrome trace, by a plain pass over its JSON."""
    counts: dict[str, int] = {}
    for e in json.loads(path.read_text())["traceEvents"]:
        name = e.get("name", "")
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and \
                name.startswith("tracekit:") and name != "tracekit:request":  # fmt: skip
            counts[name[9:]] = counts.get(name[9:], 0) + 1
    return counts


def nvtx_counts(sqlite_path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT name, count(*) FROM (SELECT coalesce(e.text, s.value) AS name "
            "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType IN (59, 60)) WHERE name IN ('preprocess', 'inference', "
            "'postprocess') GROUP BY name"
        ).fetchall()
    finally:
        con.close()
    return dict(rows)


def capture(tmp_path: Path, mode: str, *tracers: str) -> tuple[Path, Path, Any]:
    kw = ", **kw" if mode != "plain" else ""
    script = tmp_path / "selfprof.py"
    script.write_text(SCRIPT.replace("{kw}", kw))
    own = tmp_path / "own"
    own.mkdir()
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "tracekit", "capture", "-o", str(run_dir), *tracers, "--",
           sys.executable, str(script), mode, str(own)]  # fmt: skip
    res = procs.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    return run_dir, own, res


@pytest.mark.parametrize("mode", ["plain", "schedule", "tensorboard", "unstopped"])
def test_torch_capture_records_through_the_programs_profiler(tmp_path, mode):
    run_dir, own, res = capture(tmp_path, mode, "--no-nsys")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "served 8" in res.stdout
    assert "stands aside" in res.stderr
    trace = run_dir / "torch.pt.trace.json"
    # schedule: steps 2 and 3 are active; unstopped: it records to the end (7 requests)
    expected = {"plain": 6, "unstopped": 7}.get(mode, 2)
    assert stage_counts(trace) == dict.fromkeys(STAGES, expected)
    if mode == "plain":
        assert stage_counts(own / "own.json") == stage_counts(trace)
    if mode == "tensorboard":
        (written,) = own.glob("*.pt.trace.json")  # the program's handler still wrote its file
        assert stage_counts(written) == stage_counts(trace)
    manifest = json.loads((run_dir / "capture.json").read_text())
    assert [f["path"] for f in manifest["files"] if f["path"].endswith(".json")] == [
        "torch.pt.trace.json"
    ]


@pytest.mark.nsys
@pytest.mark.skipif(not HAVE_NSYS, reason="nsys not on PATH")
def test_nsys_and_torch_capture_of_a_self_profiling_program(tmp_path):
    run_dir, _own, res = capture(tmp_path, "schedule")
    assert res.returncode == 0, res.stderr[-2000:]
    assert stage_counts(run_dir / "torch.pt.trace.json") == dict.fromkeys(STAGES, 2)
    assert nvtx_counts(run_dir / "nsys.sqlite") == dict.fromkeys(STAGES, 8)  # every request
    # nsys runs the child with umask 0: the trace the runner writes is still not world-writable
    for written in (run_dir / "torch.pt.trace.json", *run_dir.glob("attributes/*.jsonl")):
        assert not written.stat().st_mode & stat.S_IWOTH, written


@pytest.mark.nsys
@pytest.mark.skipif(not HAVE_NSYS, reason="nsys not on PATH")
def test_nsys_alone_captures_a_self_profiling_program(tmp_path):
    run_dir, own, res = capture(tmp_path, "plain", "--no-torch")
    assert res.returncode == 0, res.stderr[-2000:]
    assert not (run_dir / "torch.pt.trace.json").exists()
    assert nvtx_counts(run_dir / "nsys.sqlite") == dict.fromkeys(STAGES, 8)
    assert stage_counts(own / "own.json") == dict.fromkeys(STAGES, 6)
