"""The two serving examples (issue 36), each captured with no flags at all and recorded with a
plain torch.profiler (with_stack=True) outside tracekit: their stages, and the generate
service's time to first token / per output token, against the programs' own clocks (their
`--self-times` files).

- examples/pipeline_service.py: an HF text-classification `pipeline`; the stage shares of
  request time (preprocess / inference / postprocess) within 2 points of the service's clock.
- examples/generate_service.py: HF `generate`; tokenize / generate / detokenize shares within 2
  points; TTFT and TPOT p50 within 3% (or 0.3 ms) of the service's streamer clock.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import tracekit
from tests import procs

pytest.importorskip("transformers", reason="examples extra not installed (transformers)")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
REQUESTS, WARMUP = 10, 2


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _run(cmd: list[str]) -> None:
    res = procs.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]


def _record(tmp: Path, script: str, how: str) -> tuple[Path, list[dict]]:
    """(the trace or run folder, the service's own rows for the requests the trace holds)."""
    clock = tmp / f"{how}.self.jsonl"
    args = ["--requests", str(REQUESTS), "--warmup", str(WARMUP), "--self-times", str(clock)]
    if how == "capture":  # no tracekit flag at all: the trace holds the warm-up requests too
        out = tmp / "run"
        _run([sys.executable, "-m", "tracekit", "capture", "-o", str(out), "--no-nsys", "--",
              sys.executable, str(EXAMPLES / script), *args])  # fmt: skip
        rows = json.loads(clock.read_text())["requests"]
    else:  # plain torch.profiler, started after the warm-up
        out = tmp / "plain.json"
        _run([sys.executable, str(EXAMPLES / script), *args, "--torch-profile", str(out)])
        rows = [r for r in json.loads(clock.read_text())["requests"] if not r["warmup"]]
    return out, rows


def _trace_shares(path: Path) -> tuple[dict[str, float], int]:
    """Top-level stage totals / request totals, and the request count."""
    with tracekit.open(path) as t:
        req = t.sql("SELECT count(*) AS n, sum(dur_ns) AS ns FROM requests").to_dicts()[0]
        rows = t.sql("SELECT stage, sum(dur_ns) AS ns FROM stages WHERE request_id IS NOT NULL "
                     "AND parent_stage IS NULL GROUP BY stage").to_dicts()  # fmt: skip
    return {r["stage"]: float(r["ns"]) / float(req["ns"]) for r in rows}, req["n"]


def _own_shares(rows: list[dict], stages: tuple[str, ...]) -> dict[str, float]:
    total = sum(r["request"] for r in rows)
    return {s: sum(r[s] for r in rows) / total for s in stages}


@pytest.fixture(scope="module", params=["capture", "plain"])
def pipeline_run(request, tmp_path_factory) -> tuple[Path, list[dict], str]:
    tmp = tmp_path_factory.mktemp(f"pipe-{request.param}")
    return (*_record(tmp, "pipeline_service.py", request.param), request.param)


@pytest.fixture(scope="module", params=["capture", "plain"])
def generate_run(request, tmp_path_factory) -> tuple[Path, list[dict], str]:
    tmp = tmp_path_factory.mktemp(f"gen-{request.param}")
    return (*_record(tmp, "generate_service.py", request.param), request.param)


@pytest.mark.slow
def test_pipeline_stage_shares_match_the_services_clock(pipeline_run) -> None:
    path, own, how = pipeline_run
    got, n = _trace_shares(path)
    assert n == len(own)
    want = _own_shares(own, ("preprocess", "inference", "postprocess"))
    assert set(want) <= set(got)
    for stage, share in want.items():
        assert abs(got[stage] - share) <= 0.02, (how, stage, got[stage], share)
    with tracekit.open(path) as t:
        sources = {r[0] for r in t.sql("SELECT DISTINCT source FROM stages").rows()}
    assert sources == ({"annotated"} if how == "capture" else {"inferred:hf-pipeline"})


@pytest.mark.slow
def test_generate_steps_ttft_and_tpot_match_the_services_clock(generate_run) -> None:
    path, own, how = generate_run
    got, n = _trace_shares(path)
    assert n == len(own)
    for stage, share in _own_shares(own, ("tokenize", "generate", "detokenize")).items():
        assert abs(got[stage] - share) <= 0.02, (how, stage, got[stage], share)
    with tracekit.open(path) as t:
        rows = t.query("generation_requests").to_dicts()
    assert len(rows) == len(own)
    for r, o in zip(rows, own, strict=True):
        assert r["prefill_steps"] == 1 and r["decode_steps"] == o["output_tokens"] - 1
    for key in ("ttft", "tpot"):
        theirs = quantile([o[key] for o in own], 0.5)
        pairs = [(float(r[f"{key}_ms"]), float(o[key])) for r, o in zip(rows, own, strict=True)]
        # Request by request, the median difference: a request the loaded machine stalled
        # between the service's clock and the next step (8.5 ms, seen beside 14 other jobs)
        # moves one pair, not the answer; a wrong definition would move them all.
        bias = quantile([m - t for m, t in pairs], 0.5)
        detail = [(round(m, 3), round(t, 3)) for m, t in pairs]
        assert abs(bias) <= max(0.03 * theirs, 0.3), (how, key, bias, theirs, detail)


HANDLER = """
import time

class Handler:
    def preprocess(self, x):
        time.sleep(0.004)
        return x

    def inference(self, x):
        time.sleep(0.006)
        return x

    def postprocess(self, x):
        time.sleep(0.002)
        return x

    def handle(self, x):
        return self.postprocess(self.inference(self.preprocess(x)))

h = Handler()
for i in range(5):
    h.handle(i)
"""


def test_a_handler_class_gets_stages_and_requests_with_no_flags(tmp_path: Path) -> None:
    """A TorchServe-style class in the script: its methods are stages, handle the request."""
    script = tmp_path / "handler_app.py"
    script.write_text(HANDLER)
    out = tmp_path / "run"
    _run([sys.executable, "-m", "tracekit", "capture", "-o", str(out), "--no-nsys", "--",
          sys.executable, str(script)])  # fmt: skip
    data = json.loads((out / "torch.pt.trace.json").read_text())
    names = [
        e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("tracekit:")
    ]
    assert sorted(set(names)) == ["tracekit:inference", "tracekit:postprocess",
                                  "tracekit:preprocess", "tracekit:request"]  # fmt: skip
    assert names.count("tracekit:request") == 5
    with tracekit.open(out) as t:
        stages = dict(t.sql("SELECT stage, count(*) FROM stages GROUP BY ALL").rows())
        reqs = t.sql("SELECT count(*), any_value(source) FROM requests").rows()[0]
    assert stages == {"preprocess": 5, "inference": 5, "postprocess": 5}
    assert reqs == (5, "tracekit:request")
