"""The roofline on a real CPU capture of the example service: `--padding max` vs `bucket`.

Oracles: the example's own record of the attention masks its model saw (`--self-times`: per
request the mask's rows, padded length and per-row sums), and the attention FLOPs its encoder
does by construction (examples/infer.py: d=64, 4 heads, 2 layers, explicit bmm/softmax).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import procs

REPO = Path(__file__).resolve().parent.parent
INFER = REPO / "examples" / "infer.py"
D, HEADS, LAYERS = 64, 4, 2  # examples/infer.py Encoder defaults
# per layer, head and query-key pair: Q·Kᵀ and P·V (2·2·head dim), the 1/sqrt(d) scale, the mask
# add, and softmax (5): the FLOPs tracekit's formulas give those ops (docs/report.md)
PER_PAIR = LAYERS * HEADS * (4 * (D // HEADS) + 1 + 1 + 5)


def _capture(tmp: Path, padding: str) -> tuple[dict, dict, str]:
    run, clock = tmp / padding, tmp / f"{padding}.jsonl"
    cmd = [sys.executable, "-m", "tracekit", "capture", "-o", str(run), "--no-nsys", "--",
           sys.executable, str(INFER), "--requests", "8", "--padding", padding,
           "--self-times", str(clock)]  # fmt: skip
    res = procs.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    out = {}
    for fmt in ("json", "md"):
        dest = tmp / f"{padding}.{fmt}"
        argv = [sys.executable, "-m", "tracekit", "report", str(run), "--format", fmt, "-o",
                str(dest)]  # fmt: skip
        rep = procs.run(argv, capture_output=True, text=True, cwd=REPO)
        assert rep.returncode == 0, rep.stderr[-2000:]
        out[fmt] = dest.read_text()
    return json.loads(out["json"]), json.loads(clock.read_text().splitlines()[0]), out["md"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict, str]]:
    tmp = tmp_path_factory.mktemp("roofline")
    return {p: _capture(tmp, p) for p in ("max", "bucket")}


@pytest.mark.slow
@pytest.mark.parametrize("padding", ["max", "bucket"])
def test_padding_share_of_attention_flops_equals_the_masks(runs, padding: str) -> None:
    report, clock, md = runs[padding]
    (trace,) = report["traces"]
    roof = trace["roofline"]
    masks = clock["masks"]
    assert len(masks) == 8
    padded_pairs = sum(m["rows"] * m["padded_len"] ** 2 for m in masks)
    real_pairs = sum(x * x for m in masks for x in m["row_sums"])
    expected = 1 - real_pairs / padded_pairs
    # (the JSON report rounds to 6 decimals)
    assert roof["padding"]["padding_share"] == pytest.approx(expected, abs=1e-6)
    assert roof["padding"]["requests"] == 8
    # the attention FLOPs themselves, from the model's construction
    assert roof["padding"]["attention_gflop"] == pytest.approx(PER_PAIR * padded_pairs / 1e9,
                                                               abs=1e-6)  # fmt: skip
    finding = next(f for f in trace["findings"] if f["id"] == "padding_waste")
    assert f"{expected:.0%} of attention FLOPs are on padding tokens" in finding["evidence"]
    # a CPU run: times are the CPU's and say so; no device, no verdicts, no MFU
    assert roof["basis"] == "cpu" and roof["device"] is None
    assert "TFLOP/s (CPU)" in md and "CPU ms" in md
    assert all(r["mfu"] is None for r in roof["model"])
    assert all(not r["verdict"] for r in roof["ops"])


@pytest.mark.slow
def test_bucketing_cuts_the_padded_attention_work(runs) -> None:
    share = {p: runs[p][0]["traces"][0]["roofline"]["padding"]["padding_share"] for p in runs}
    gflop = {p: runs[p][0]["traces"][0]["roofline"]["padding"]["attention_gflop"] for p in runs}
    assert share["bucket"] < share["max"]
    assert gflop["bucket"] < gflop["max"]
