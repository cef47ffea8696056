"""The roofline on real traces, against an independent pass over the Kineto JSON.

The oracle below reads each shared trace with Python's json module and computes every op's
FLOPs and bytes with its own formulas (written apart from tracekit.op_work, from the
conventions in docs/report.md), and the top GEMM's kernel time by following each kernel's
correlation id to its launching runtime call inside the op's interval on the op's thread.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_params
from tests.kineto_oracle import load
from tracekit.op_work import op_work
from tracekit.roofline import analyze, modeled_calls
from tracekit.store.traceset import open_traces

SIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
        "bool": 1, "unsigned char": 1, "signed char": 1, "short int": 2}  # fmt: skip


def _events(path: Path) -> list[dict[str, Any]]:
    doc = load(path)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _numel(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def oracle_work(name: str, args: dict[str, Any]) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one call, or None for an op this oracle does not cover."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    conc = args.get("Concrete Inputs") or []
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    tens = [(d, SIZE[t]) for d, t in zip(dims, types, strict=False) if t in SIZE]
    op = name.removeprefix("aten::")
    if op in ("mm", "bmm") and len(tens) == 2:
        (a, s), (b, _) = tens
        if len(a) != len(b) or a[-1] != b[-2]:
            return None
        batch = a[0] if len(a) == 3 else 1
        m, k, n = a[-2], a[-1], b[-1]
        return 2.0 * batch * m * n * k, float(s * (batch * (m * k + k * n + m * n)))
    if op in ("addmm", "baddbmm") and len(tens) == 3:
        (c, s), (a, _), (b, _) = tens
        batch = a[0] if len(a) == 3 else 1
        m, k, n = a[-2], a[-1], b[-1]
        return 2.0 * batch * m * n * k, float(s * (_numel(c) + batch * (m * k + k * n + m * n)))
    if op == "linear" and len(tens) in (2, 3):
        x, s = tens[0]
        n, k = tens[1][0]
        rows = _numel(x) // k
        bias = _numel(tens[2][0]) if len(tens) == 3 else 0
        return 2.0 * rows * n * k, float(s * (rows * k + n * k + bias + rows * n))
    if op == "matmul" and len(tens) == 2:
        (a, s), (b, _) = tens
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        k, m, n = a[-1], a[-2], b[-1]
        if len(b) == 2:
            rows = _numel(a) // k
            return 2.0 * rows * n * k, float(s * (rows * k + k * n + rows * n))
        ba, bb = a[:-2], b[:-2]
        width = max(len(ba), len(bb))
        ba = [1] * (width - len(ba)) + ba
        bb = [1] * (width - len(bb)) + bb
        batch = _numel([max(x, y) for x, y in zip(ba, bb, strict=True)])
        return 2.0 * batch * m * n * k, float(s * (_numel(a) + _numel(b) + batch * m * n))
    if op == "scaled_dot_product_attention" and len(tens) >= 3:
        (q, s), (kk, _), (v, _) = tens[:3]
        b, h, lq, d = q
        lk, dv = kk[2], v[3]
        causal = len(conc) > 5 and conc[5] == "True"
        pairs = sum(min(i + 1, lk) for i in range(lq)) if causal else lq * lk
        mask = _numel(tens[3][0]) * tens[3][1] if len(tens) > 3 else 0
        moved = s * (_numel(q) + _numel(kk) + _numel(v) + b * h * lq * dv) + mask
        return 2.0 * b * h * pairs * (d + dv), float(moved)
    if op in ("softmax", "_softmax") and tens:
        x, s = tens[0]
        return 5.0 * _numel(x), 2.0 * s * _numel(x)
    if op in ("layer_norm", "native_layer_norm") and tens:
        x, s = tens[0]
        affine = tens[1:3]
        return (float(_numel(x) * (5 + len(affine))),
                float(s * 2 * _numel(x) + sum(_numel(w) * ws for w, ws in affine)))  # fmt: skip
    if op == "embedding" and len(tens) == 2:
        (w, s), (ids, si) = tens
        return 0.0, float(_numel(ids) * si + 2 * _numel(ids) * w[1] * s)
    if op in ("add", "mul", "sub", "div", "add_", "mul_") and tens:
        width = max(len(t) for t, _ in tens)
        cols = [[1] * (width - len(t)) + t for t, _ in tens]
        out = _numel([max(c) for c in zip(*cols, strict=True)]) if width else 1
        return float(out), float(sum(_numel(t) * s for t, s in tens) + out * tens[0][1])
    return None


KINETO = [p for p in shared_params("kineto_*") if p.values[0] is None or  # type: ignore[union-attr]
          p.values[0].is_file()]  # type: ignore[union-attr]  # fmt: skip
TORCHREC = shared_params("kineto_ampere_torchrec_2of128ranks_sampled_hta/*.json.gz")


def _tracekit_rows(path: Path) -> list[dict[str, Any]]:
    with open_traces([path]) as ts:
        return {
            "op_kernels": ts.query_dicts("op_kernels", trace_id=1),
            "gpu_devices": ts.query_dicts("gpu_devices", trace_id=1),
        }  # type: ignore[return-value]


@pytest.mark.parametrize("src", KINETO + TORCHREC)
def test_op_flops_and_bytes_match_an_independent_pass(src: Path | None) -> None:  # type: ignore[no-untyped-def]
    assert src is not None
    events = _events(src)
    ops = [e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower()
           in ("cpu_op", "operator") and "Input Dims" in (e.get("args") or {})]  # fmt: skip
    if not ops:
        pytest.skip(f"{src.name}: no input shapes recorded")
    expected: Counter[tuple[str, float, float]] = Counter()
    for e in ops:
        w = oracle_work(e["name"], e["args"])
        if w is not None:
            expected[(e["name"], w[0], w[1])] += 1
    assert expected, f"{src.name}: the oracle found no op it covers"
    q = _tracekit_rows(src)
    got: Counter[tuple[str, float, float]] = Counter()
    names = {n for n, _, _ in expected}
    for r in q["op_kernels"]:
        if r["name"] not in names:
            continue
        recorded = {
            "Input Dims": json.loads(r["input_dims"] or "null"),
            "Input type": json.loads(r["input_types"] or "null"),
            "Concrete Inputs": json.loads(r["concrete_inputs"] or "null"),
        }
        oracle = oracle_work(r["name"], recorded)
        if oracle is None:
            continue  # outside what the oracle covers (as in the pass above)
        w = op_work(r["name"], json.loads(r["input_dims"]), json.loads(r["input_types"]),
                    json.loads(r["concrete_inputs"] or "null"))  # fmt: skip
        assert w is not None, f"{r['name']} {r['input_dims']}: no figure from op_work"
        got[(r["name"], w.flops, w.bytes)] += 1
    assert got == expected


def _oracle_top_gemm_tflops(events: list[dict[str, Any]], name: str, shapes: str) -> float:
    """Σ FLOPs / Σ kernel time over the calls of (name, shapes): kernels whose launching
    runtime call (same correlation id) starts inside the op on its thread."""
    runtime = {}
    kernels = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        corr = (e.get("args") or {}).get("correlation")
        if cat in ("cuda_runtime", "cuda_driver", "runtime") and corr is not None:
            runtime[corr] = e
        elif cat == "kernel" and corr is not None:
            kernels.append(e)
    calls = []
    for e in events:
        if str(e.get("cat", "")).lower() not in ("cpu_op", "operator") or e.get("name") != name:
            continue
        args = e.get("args") or {}
        shown = " ".join("[" + ",".join(map(str, d)) + "]"
                         for d, t in zip(args.get("Input Dims", []), args.get("Input type", []),
                                         strict=False) if t in SIZE)  # fmt: skip
        if shown == shapes:
            calls.append(e)
    flops = dur = 0.0
    for c in calls:
        w = oracle_work(name, c["args"])
        assert w is not None
        t0, t1 = float(c["ts"]), float(c["ts"]) + float(c["dur"])
        for k in kernels:
            r = runtime.get(k["args"]["correlation"])
            if r and r.get("tid") == c.get("tid") and t0 <= float(r["ts"]) <= t1:
                dur += float(k["dur"])
        flops += w[0]
    return flops / (dur * 1e-6) / 1e12


@pytest.mark.parametrize("src", [p for p in KINETO if p.values[0] is None or any(  # type: ignore[union-attr]
    s in p.values[0].name for s in ("h100_qwen", "h100_bert", "h100_vit", "trace_diff_control",  # type: ignore[union-attr]
                                    "trace_diff_test"))])  # fmt: skip
def test_top_gemm_tflops_against_the_oracle(src: Path | None) -> None:  # type: ignore[no-untyped-def]
    assert src is not None
    a = analyze(_tracekit_rows(src))
    g = a["top_gemm"]
    assert g is not None and a["device"] is not None, a["note"]
    expected = _oracle_top_gemm_tflops(_events(src), g["name"], g["shapes"])
    assert g["tflops"] == pytest.approx(expected, rel=1e-3)
    peak = a["device"]["tflops"].get(g["dtype"]) or a["device"]["tflops"]["fp32"]
    assert 0 < g["share_peak_compute"] == pytest.approx(g["tflops"] / peak, rel=1e-9)
    assert g["share_peak_compute"] < 1.0  # no op beats its device's peak


def test_work_is_counted_once_per_op_tree() -> None:  # type: ignore[no-untyped-def]
    """aten::linear -> aten::addmm: the FLOPs once, at the linear; its kernels its time."""
    src = Path("../shared/traces/kineto_h100_bert_small_inference_tracelens.json.gz")
    if not src.is_file():
        pytest.skip("../shared/traces is absent")
    q = _tracekit_rows(src)
    calls, gpu = modeled_calls(q["op_kernels"])
    assert gpu
    names = Counter(c.name for c in calls)
    assert "aten::addmm" not in names and names["aten::linear"] == 26
    # every kernel launched under a modeled op is that op's time, once
    total = sum(int(r["kernel_ns"]) for r in q["op_kernels"])
    assert 0 < sum(c.time_ns for c in calls) <= total
    a = analyze(q)
    assert not math.isnan(a["gflop"])
    # per kernel: exactly the calls that launched one kernel, their FLOPs over its time
    single = [c for c in calls if c.kernels == 1 and c.time_ns > 0]
    assert sum(k["count"] for k in a["kernels"]) == len(single)
    for k in a["kernels"]:
        mine = [c for c in single if c.top_kernel == k["kernel"] and c.work.dtype == k["dtype"]]
        assert k["tflops"] == pytest.approx(
            sum(c.work.flops for c in mine) / sum(c.time_ns for c in mine) / 1e3
        )


def test_device_named_once_in_the_trace_gives_the_roofs() -> None:  # type: ignore[no-untyped-def]
    """MI300X traces put GPU events on device 5 while deviceProperties lists id 0: the one
    device name the trace records picks the peaks. Its graph-replayed decode step leaves no
    floating-point work under host ops: no model row (no MFU of 0 from index arithmetic)."""
    src = Path("../shared/traces/kineto_mi300x_sglang_qwen3-30b-a3b_decode_bs16_hipgraph_"
               "tracelens.json.gz")  # fmt: skip
    if not src.is_file():
        pytest.skip("../shared/traces is absent")
    with open_traces([src]) as ts:
        q = {n: ts.query_dicts(n, trace_id=1) for n in ("op_kernels", "gpu_devices",
                                                        "trace_overview")}  # fmt: skip
    assert [d["device_name"] for d in q["gpu_devices"]] == ["GPU 5"]
    a = analyze(q)
    assert a["device_name"] == "AMD Instinct MI300X"
    assert a["device"]["name"] == "AMD Instinct MI300X" and a["device"]["memory_gb_s"] == 5300
    assert a["model"] == []
