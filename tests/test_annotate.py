"""tracekit.stage / tracekit.request under a real torch.profiler, and their attribute sidecars.

Each case runs in a fresh interpreter: annotate keeps process-wide state (NVTX handles, the
sidecar) that is fixed at the first stage, as in a real service.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import tracekit
from tests import procs


def run_py(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> str:
    import os

    full_env = {**os.environ, **(env or {})}
    res = procs.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=tmp_path, env=full_env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


PROFILED = """
import torch, tracekit
from torch.profiler import profile, ProfilerActivity

@tracekit.stage("decode", kind="text")
def decode(x):
    return (x * 2).sum()

with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for i in range(4):
        with tracekit.request(request=i):
            with tracekit.stage("preprocess", batch=2) as s:
                x = torch.ones(2, 8 + i)
                s.set(seq_len=8 + i)
            with tracekit.stage("inference"):
                y = torch.mm(x, torch.ones(8 + i, 4))
            decode(y)
prof.export_chrome_trace("trace.json")
"""


def test_stages_become_torch_ranges_and_store_stages(tmp_path):
    run_py(PROFILED, tmp_path)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    for st in ("preprocess", "inference", "decode", "request"):
        assert names.count(f"tracekit:{st}") == 4, st
    with tracekit.open(tmp_path / "trace.json") as t:
        df = t.sql("SELECT stage, count(DISTINCT request_id) AS n FROM stages "
                   "GROUP BY 1 ORDER BY 1")  # fmt: skip
        mm = t.sql("SELECT stage FROM events WHERE name = 'aten::mm'")
        req = t.sql("SELECT source, count(*) AS n FROM requests GROUP BY 1")
    assert dict(df.iter_rows()) == {"decode": 4, "inference": 4, "preprocess": 4}
    assert set(mm["stage"]) == {"inference"}  # ops are attributed to the enclosing stage
    assert dict(req.iter_rows()) == {"tracekit:request": 4}


def test_attributes_sidecar_pairs_with_trace_ranges(tmp_path):
    side = tmp_path / "attributes"
    run_py(PROFILED, tmp_path, env={"TRACEKIT_ATTRIBUTES_DIR": str(side)})
    (sidecar,) = side.glob("attributes-*.jsonl")
    records = [json.loads(x) for x in sidecar.read_text().splitlines()]
    pre = [r for r in records if r["name"] == "preprocess"]
    assert [r["attrs"] for r in pre] == [{"batch": 2, "seq_len": 8 + i} for i in range(4)]
    assert all(r["end_ns"] >= r["start_ns"] for r in records)
    # A trace beside an attributes/ folder is a run folder: its store carries the attributes.
    with tracekit.open(tmp_path / "trace.json") as t:
        df = t.sql("SELECT s.request_id, a.value::INT AS seq_len FROM attributes a "
                   "JOIN stages s USING (trace_id, event_id) WHERE a.key = 'seq_len' "
                   "ORDER BY 1")  # fmt: skip
        kinds = t.sql("SELECT DISTINCT value FROM attributes WHERE key = 'kind'")
    assert df["seq_len"].to_list() == [8, 9, 10, 11]
    assert kinds["value"].to_list() == ['"text"']


def test_no_listener_writes_nothing_and_imports_no_torch(tmp_path):
    out = run_py(
        """
        import sys, tracekit
        with tracekit.request():
            with tracekit.stage("a", n=1):
                pass
        print("torch" in sys.modules)
        """,
        tmp_path,
    )
    assert out.strip() == "False"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["", "a:b", "request", 3])
def test_bad_stage_names_are_rejected(bad):
    with pytest.raises(ValueError):
        tracekit.stage(bad)


def test_request_ranges_nest_and_the_decorator_keeps_the_function(tmp_path):
    @tracekit.stage("f")
    def f(x: int) -> int:
        """doc"""
        return x + 1

    assert f(1) == 2 and f.__name__ == "f" and f.__doc__ == "doc"
