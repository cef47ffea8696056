"""Operator efficiency: the FLOPs and bytes of each op (tracekit.op_work) against the time of
the kernels it launched, the device's roofs (tracekit.device_peaks), a verdict per op, the
share of attention FLOPs spent on padding, and model-level TFLOP/s and MFU per request.

Input: the rows of queries/op_kernels.sql (every host op with its shapes and the kernels it
launched itself). An op's work is counted once, at the outermost op that has a formula
(aten::linear, not also its aten::addmm); the kernels of the ops nested in it are its time.
Without kernels (a CPU run) the time is the op's host duration and every throughput figure is
labelled as the CPU's.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.device_peaks import DevicePeak, find_device
from tracekit.op_work import DTYPES, FORMULAS, Work, causal_pairs, op_work

LATENCY_SHARE = 0.10  # under 10% of its roof ...
LATENCY_KERNEL_US = 20.0  # ... with kernels this short on average: launch/latency-bound
TABLE_ROWS = 15  # op groups in the report's table (the JSON has up to JSON_ROWS)
JSON_ROWS = 100
WEIGHT_GEMMS = ("aten::linear", "aten::mm", "aten::addmm")  # x @ W: never attention scores
REQUEST = "(request)"  # model figures over the whole request when no stage is 'inference'
UNNAMED = re.compile(r"GPU (\d+|\(unnamed\))$")  # gpu_devices' name of a device named nowhere
FLOATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")  # model FLOPs: floating point only
ENABLE = (
    "No input shapes recorded: FLOPs, bytes and the roofline need torch.profiler's "
    "record_shapes=True (tracekit capture turns it on; nsys traces carry no shapes)."
)


@dataclass(frozen=True)
class OpCall:
    """One modeled op call with its work and the time of the kernels under it."""

    event_id: int
    name: str
    stage: str | None
    request_id: int | None
    shapes: str  # its tensor inputs' dims, e.g. '[16,559,1024] [1024,1024] [1024]'
    dims: list[Any]
    concrete: list[Any]
    work: Work
    time_ns: int  # its kernels' summed durations (GPU) or its host duration (CPU)
    kernels: int
    top_kernel: str | None
    top_kernel_ns: int


def _loads(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None


def _shapes(dims: list[Any], types: list[Any]) -> str:
    return " ".join(
        "[" + ",".join(str(x) for x in d) + "]"
        for d, t in zip(dims, types, strict=False)
        if t in DTYPES and isinstance(d, list)
    )


def modeled_calls(rows: Sequence[Mapping[str, Any]]) -> tuple[list[OpCall], bool]:
    """Each outermost op with a formula, with the kernel time of its subtree; and whether the
    time is GPU kernel time (False: no kernels at all, host time instead)."""
    by_id = {int(r["event_id"]): r for r in rows}
    work: dict[int, Work] = {}
    parsed: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
    # A model calls the same op with the same shapes every step: each distinct recorded call
    # is parsed and modelled once (it was 50 ms a trace of ~1,000 calls, 60% of a 64-rank
    # report's Python time).
    seen: dict[tuple[str, ...], tuple[Work | None, tuple[list[Any], list[Any], list[Any]]]] = {}
    for eid, r in by_id.items():
        if r["name"] not in FORMULAS:  # (most ops: views, copies, allocations)
            continue
        raw = (r["name"], r["input_dims"], r["input_types"], r["concrete_inputs"])
        key = raw if all(isinstance(v, str | None) for v in raw) else None
        if key is None or key not in seen:
            dims, types = _loads(r["input_dims"]), _loads(r["input_types"])
            concrete = _loads(r["concrete_inputs"]) or []
            done = (op_work(str(r["name"]), dims, types, concrete), (dims, types, concrete))
            if key is not None:
                seen[key] = done
        w, (dims, types, concrete) = seen[key] if key is not None else done
        if w is not None:
            work[eid] = w
            parsed[eid] = (dims, types, concrete)

    memo: dict[int, int | None] = {}

    def outermost(eid: int) -> int | None:
        """The outermost op with a formula on the parent chain from eid (eid included)."""
        chain: list[int] = []
        cur: int | None = eid
        while cur is not None and cur in by_id and cur not in memo and len(chain) < 10_000:
            chain.append(cur)
            p = by_id[cur]["parent_id"]
            cur = int(p) if p is not None else None
        above = memo.get(cur) if cur is not None else None
        for node in reversed(chain):  # from the top down
            above = above if above is not None else (node if node in work else None)
            memo[node] = above
        return memo.get(eid)

    gpu = any(int(r["kernels"] or 0) > 0 for r in rows)
    time_ns: dict[int, int] = defaultdict(int)
    kernels: dict[int, int] = defaultdict(int)
    top: dict[int, tuple[int, str]] = {}
    for eid, r in by_id.items():
        if not r["kernels"]:
            continue
        owner = outermost(eid)
        if owner is None:
            continue
        time_ns[owner] += int(r["kernel_ns"])
        kernels[owner] += int(r["kernels"])
        cand = (int(r["top_kernel_ns"] or 0), str(r["top_kernel"]))
        if owner not in top or cand[0] > top[owner][0]:
            top[owner] = cand
    calls = []
    for eid, w in work.items():
        if outermost(eid) != eid:
            continue
        r = by_id[eid]
        dims, types, concrete = parsed[eid]
        t = time_ns.get(eid, 0) if gpu else int(round(float(r["host_ms"]) * 1e6))
        calls.append(OpCall(eid, str(r["name"]), r["stage"], r["request_id"],
                            _shapes(dims, types), dims, concrete, w, t, kernels.get(eid, 0),
                            top[eid][1] if eid in top else None,
                            top[eid][0] if eid in top else 0))  # fmt: skip
    return calls, gpu


def verdict(flops: float, nbytes: float, ns: int, kernels: int, peak: DevicePeak | None,
            dtype: str) -> tuple[str, float | None, float | None]:  # fmt: skip
    """(verdict, share of peak compute, share of peak bandwidth) of work done in ns."""
    if peak is None or ns <= 0:
        return "", None, None
    peak_flops = peak.peak_tflops(dtype) * 1e12
    bw = peak.memory_gb_s * 1e9
    secs = ns / 1e9
    c_share, m_share = flops / secs / peak_flops, nbytes / secs / bw
    intensity = flops / nbytes if nbytes > 0 else math.inf
    roof = min(peak_flops, intensity * bw)
    attained = (flops / secs / roof) if roof > 0 else m_share
    mean_us = ns / 1e3 / max(kernels, 1)
    if attained < LATENCY_SHARE and mean_us < LATENCY_KERNEL_US:
        return "latency-bound", c_share, m_share
    ridge = peak_flops / bw
    return ("compute-bound" if intensity >= ridge else "memory-bound"), c_share, m_share


def group_rows(calls: Sequence[OpCall], peak: DevicePeak | None) -> list[dict[str, Any]]:
    """Calls grouped by (op, input shapes, dtype), most time first: the table's rows."""
    groups: dict[tuple[str, str, str], list[OpCall]] = defaultdict(list)
    for c in calls:
        groups[(c.name, c.shapes, c.work.dtype)].append(c)
    out: list[dict[str, Any]] = []
    for (name, shapes, dtype), cs in groups.items():
        ns = sum(c.time_ns for c in cs)
        flops = sum(c.work.flops for c in cs)
        nbytes = sum(c.work.bytes for c in cs)
        kernels = sum(c.kernels for c in cs)
        v, c_share, m_share = verdict(flops, nbytes, ns, kernels, peak, dtype)
        tops: dict[str, int] = defaultdict(int)
        for c in cs:
            if c.top_kernel:
                tops[c.top_kernel] += c.top_kernel_ns
        out.append({
            "name": name, "shapes": shapes, "dtype": dtype, "kind": cs[0].work.kind,
            "calls": len(cs), "kernels": kernels, "time_ms": ns / 1e6,
            "gflop": flops / 1e9, "mbytes": nbytes / 1e6,
            "intensity": flops / nbytes if nbytes > 0 else None,
            "tflops": flops / ns / 1e3 if ns > 0 else None,
            "gb_per_s": nbytes / ns if ns > 0 else None,
            "share_peak_compute": c_share, "share_peak_memory": m_share, "verdict": v,
            "top_kernel": max(tops, key=lambda k: (tops[k], k)) if tops else None,
        })  # fmt: skip
    out.sort(key=lambda r: (-r["time_ms"], -r["gflop"], r["name"], r["shapes"]))
    for i, r in enumerate(out, 1):
        r["rank"] = i
    return out


def kernel_rows(calls: Sequence[OpCall], peak: DevicePeak | None) -> list[dict[str, Any]]:
    """Per kernel name, over the op calls that launched exactly that one kernel (a GEMM's,
    most often): the call's FLOPs and bytes are the kernel's, so its TFLOP/s and verdict are
    the kernel's own. Calls of several kernels stay in the per-op table only."""
    groups: dict[tuple[str, str], list[OpCall]] = defaultdict(list)
    for c in calls:
        if c.kernels == 1 and c.top_kernel and c.time_ns > 0:
            groups[(c.top_kernel, c.work.dtype)].append(c)
    out: list[dict[str, Any]] = []
    for (kernel, dtype), cs in groups.items():
        ns = sum(c.time_ns for c in cs)
        flops = sum(c.work.flops for c in cs)
        nbytes = sum(c.work.bytes for c in cs)
        v, c_share, m_share = verdict(flops, nbytes, ns, len(cs), peak, dtype)
        out.append(
            {
                "kernel": kernel,
                "dtype": dtype,
                "ops": ", ".join(sorted({c.name for c in cs})),
                "count": len(cs),
                "time_ms": ns / 1e6,
                "gflop": flops / 1e9,
                "mbytes": nbytes / 1e6,
                "intensity": flops / nbytes if nbytes > 0 else None,
                "tflops": flops / ns / 1e3,
                "gb_per_s": nbytes / ns,
                "share_peak_compute": c_share,
                "share_peak_memory": m_share,
                "verdict": v,
            }
        )
    out.sort(key=lambda r: (-r["time_ms"], r["kernel"], r["dtype"]))
    return out


def _score_dims(call: OpCall) -> tuple[list[int], int] | None:
    """(leading dims, L) when the call works on attention scores [..., L, L]: a fused attention
    op ([B, H] and the query length), a batched Q·Kᵀ [N, L, d] @ [N, d, L], or an op (softmax,
    scale, mask add, P·V) with an [..., L, L] input. Weight GEMMs (linear, mm, addmm) and norms
    never are: their [B, L, d] activation looks like scores when L = d."""
    if call.work.kind == "attention":
        q = call.dims[0]
        if call.name == "aten::_flash_attention_forward":
            return [q[0], q[2]], q[1]
        return [q[0], q[1]], q[2]
    if call.work.kind not in ("gemm", "softmax", "elementwise") or call.name in WEIGHT_GEMMS:
        return None
    tensors = [d for d in call.dims if isinstance(d, list) and len(d) >= 3]
    for d in tensors:
        if d[-1] == d[-2]:
            return d[:-2], d[-1]
    if call.work.kind == "gemm" and len(tensors) >= 2:
        a, b = tensors[0], tensors[1]
        if len(a) == len(b) and a[-2] == b[-1] and a[-1] == b[-2] and a[:-2] == b[:-2]:
            return a[:-2], a[-2]
    return None


def _batch_of(lead: list[int], sequences: int) -> bool:
    """Whether scores with these leading dims hold one block per head of a batch of
    `sequences`: [B, H, ...] with B = sequences, or [N] with N = B·H, H >= 2 (a flat [B, L, L]
    is left out: a [B, L, d] activation with L = d has that shape)."""
    if len(lead) >= 2:
        return lead[0] == sequences
    return len(lead) == 1 and lead[0] % sequences == 0 and lead[0] // sequences >= 2


def _causal(call: OpCall) -> bool:
    at = {"aten::scaled_dot_product_attention": 5, "aten::_scaled_dot_product_flash_attention": 4,
          "aten::_scaled_dot_product_efficient_attention": 6,
          "aten::_scaled_dot_product_cudnn_attention": 6,
          "aten::_flash_attention_forward": 8}.get(call.name)  # fmt: skip
    return at is not None and at < len(call.concrete) and call.concrete[at] == "True"


def padding_share(
    calls: Sequence[OpCall], lengths: Mapping[int, list[int]]
) -> dict[str, Any] | None:
    """Share of attention FLOPs spent on padding, for requests whose real sequence lengths are
    known (`lengths`: request_id -> one real length per sequence of its batch). An attention op
    of a request with B sequences padded to L does B·pairs(L) query-key pairs of which
    Σ pairs(l_b) are real; pairs(l) = l² (causal: l(l+1)/2)."""
    total = real = 0.0
    ops = 0
    for c in calls:
        lens = lengths.get(c.request_id) if c.request_id is not None else None
        dims = _score_dims(c) if lens else None
        if not lens or dims is None or c.work.flops <= 0:
            continue
        lead, length = dims
        if not _batch_of(lead, len(lens)) or max(lens) > length:
            continue  # not this batch's scores (another batch size or length)
        pairs = (lambda x: causal_pairs(x, x)) if _causal(c) else (lambda x: x * x)
        total += c.work.flops
        real += c.work.flops * sum(pairs(x) for x in lens) / (len(lens) * pairs(length))
        ops += 1
    if not ops or total <= 0:
        return None
    return {"attention_gflop": total / 1e9, "real_gflop": real / 1e9,
            "padding_share": 1 - real / total, "ops": ops,
            "requests": len({c.request_id for c in calls if c.request_id in lengths})}  # fmt: skip


def model_rows(
    calls: Sequence[OpCall],
    stage_ms: Mapping[tuple[int, str], float],
    peak: DevicePeak | None,
    gpu: bool,
) -> list[dict[str, Any]]:
    """Per request: the modeled FLOPs of its `inference` stage (of the whole request when no
    stage is named so), achieved TFLOP/s over that window's duration and over its ops' kernel
    time, and MFU (over the duration, against the peak of its dominant dtype; GPU only)."""
    scope = "inference" if any(c.stage == "inference" for c in calls) else REQUEST
    flops: dict[int, float] = defaultdict(float)
    ns: dict[int, int] = defaultdict(int)
    by_dtype: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for c in calls:
        if c.request_id is None or (scope != REQUEST and c.stage != scope):
            continue
        if c.work.dtype not in FLOATS:
            continue  # index arithmetic (int64 adds of a sampler) is not model work
        rid = int(c.request_id)
        flops[rid] += c.work.flops
        ns[rid] += c.time_ns
        by_dtype[rid][c.work.dtype] += c.work.flops
    out = []
    for rid, f in sorted(flops.items()):
        if f <= 0:
            continue  # (no modeled op did arithmetic: index ops of a graph-replayed step)
        wall = stage_ms.get((rid, scope))
        dtype = max(by_dtype[rid].items(), key=lambda kv: (kv[1], kv[0]))[0]
        achieved = f / (wall * 1e9) if wall else None  # TFLOP/s over the window
        out.append(
            {
                "request_id": rid,
                "scope": scope,
                "gflop": f / 1e9,
                "window_ms": wall,
                "op_time_ms": ns[rid] / 1e6,
                "dtype": dtype,
                "tflops": achieved,
                "tflops_op_time": f / ns[rid] / 1e3 if ns[rid] else None,
                "mfu": achieved / peak.peak_tflops(dtype) if achieved and peak and gpu else None,
            }
        )
    return out


def analyze(q: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Everything the roofline section, its chart, the padding finding and the JSON report use,
    from the report's query rows (op_kernels, gpu_devices, sequence_lengths, request_breakdown)."""
    rows = q.get("op_kernels", [])
    shaped = any(r["input_dims"] not in (None, "[]") for r in rows)
    devices = sorted(q.get("gpu_devices", []), key=lambda d: -float(d["busy_ms"] or 0))
    device_name = str(devices[0]["device_name"]) if devices else None
    recorded = {n for r in q.get("trace_overview", [])
                for n in str(r.get("device_names") or "").split(", ") if n}  # fmt: skip
    if device_name and UNNAMED.match(device_name) and len(recorded) == 1:
        # the GPU rows carry an index the device list does not (MI300X traces: events on
        # device 5, deviceProperties id 0), and the trace names one kind of device
        device_name = recorded.pop()
    calls, gpu = modeled_calls(rows) if shaped else ([], False)
    peak = find_device(device_name) if gpu else None
    lengths = {int(r["request_id"]): json.loads(r["lengths"])
               for r in q.get("sequence_lengths", []) if r["request_id"] is not None}  # fmt: skip
    stage_ms: dict[tuple[int, str], float] = {}
    for r in q.get("request_breakdown", []):
        rid = int(r["request_id"])
        stage_ms[(rid, REQUEST)] = float(r["e2e_ms"])
        stage_ms.update({(rid, str(k)): float(v) for k, v in json.loads(r["stages_json"]).items()})
    groups = group_rows(calls, peak)
    if not shaped:
        note = ENABLE
    elif not gpu:
        note = ("No GPU kernels in this trace: times are the ops' host (CPU) durations, so "
                "TFLOP/s and GB/s are the CPU's; no roofline verdicts.")  # fmt: skip
    elif peak is None:
        note = (
            f"Unknown device {device_name!r}: no peak figures, so no verdicts; add a [[device]] "
            "row (name, match, memory_gb_s, fp32, bf16 ...) to tracekit.toml."
        )
    else:
        peaks = ", ".join(f"{k} {v:g}" for k, v in peak.tflops)
        note = (
            f"Peaks of {peak.name} (from {peak.source}; the trace says {device_name!r}): "
            f"{peak.memory_gb_s:g} GB/s, {peaks} TFLOP/s. Time = the kernels each op launched, "
            "its nested ops' included."
        )
    top_gemm = next((g for g in groups if g["kind"] == "gemm" and g["tflops"]), None)
    return {
        "shapes": shaped,
        "basis": "gpu" if gpu else "cpu",
        "device_name": device_name,
        "device": None
        if peak is None
        else {
            "name": peak.name,
            "memory_gb_s": peak.memory_gb_s,
            "tflops": dict(peak.tflops),
            "source": peak.source,
        },  # fmt: skip
        "note": note,
        "calls": len(calls),
        "gflop": sum(c.work.flops for c in calls) / 1e9,
        "gbytes": sum(c.work.bytes for c in calls) / 1e9,
        "time_ms": sum(c.time_ns for c in calls) / 1e6,
        "ops": groups,
        "top_gemm": top_gemm,
        "kernels": kernel_rows(calls, peak) if gpu else [],
        "model": model_rows(calls, stage_ms, peak, gpu),
        "padding": padding_share(calls, lengths),
        "_calls": calls,
    }
