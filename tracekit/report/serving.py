"""Sentences of the report's first screen about how the serving code ran: the host waiting for
the GPU inside a stage, and the GPU work replayed from CUDA/HIP graphs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WAIT_SHARE = 0.1  # a stage's waits are named when they are this much of its time ...
WAIT_MS = 0.1  # ... and at least this long
WAIT_STAGES = 3


def waits_sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """'postprocess 115.059 ms, of which 113.919 ms (99%) the host waits in aten::to
    (hipMemcpyWithStream) for the GPU.' for the stages that wait most."""
    named = [
        r
        for r in rows
        if (r.get("share_of_stage") or 0) >= WAIT_SHARE and (r.get("wait_ms") or 0) >= WAIT_MS
    ][:WAIT_STAGES]
    if not named:
        return ""
    parts = []
    for r in named:
        where = r["op"] if r["op"] == r["call"] else f"{r['op']} ({r['call']})"
        parts.append(
            f"{r['stage']} {r['stage_ms']:.3f} ms, of which {r['wait_ms']:.3f} ms "
            f"({r['share_of_stage']:.0%}) the host waits in {where} for the GPU"
        )
    return "Host waiting inside stages: " + "; ".join(parts) + "."


def graph_sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """'CUDA/HIP graphs replay 85% of kernel time ...' when the trace launches graphs."""
    if not rows or not rows[0].get("replayed_kernels"):
        return ""
    g = rows[0]
    return (
        f"Graphs replay {g['share_of_kernel_time']:.0%} of kernel time ({g['replayed_ms']:.3f} "
        f"of {g['kernel_ms']:.3f} ms: {g['replayed_kernels']} of {g['kernels']} kernels from "
        f"{g['graph_launches']} graph launch{'es' if g['graph_launches'] != 1 else ''}); "
        "each replayed kernel takes the stage of its launch."
    )


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (DuckDB's quantile_cont)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Generation:
    """TTFT / TPOT over the requests with generation steps (queries/generation_requests)."""

    requests: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    output_tokens: float  # mean per request
    output_tokens_per_s: float | None  # mean per request
    batch_size: int | None


def generation(rows: Sequence[Mapping[str, Any]]) -> Generation | None:
    if not rows:
        return None

    def q(key: str, p: float) -> float | None:
        vals = [float(r[key]) for r in rows if r.get(key) is not None]
        return quantile(vals, p) if vals else None

    rates = [float(r["output_tokens_per_s"]) for r in rows if r.get("output_tokens_per_s")]
    batches = {r["batch_size"] for r in rows if r.get("batch_size") is not None}
    return Generation(
        len(rows),
        q("ttft_ms", 0.5),
        q("ttft_ms", 0.99),
        q("tpot_ms", 0.5),
        q("tpot_ms", 0.99),
        sum(float(r["output_tokens"]) for r in rows) / len(rows),
        sum(rates) / len(rates) if rates else None,
        max(batches) if batches else None,
    )


def generation_sentence(g: Generation | None) -> str:
    """'Generation (8 requests): time to first token p50 32.031 ms (p99 ...), ...'."""
    if g is None:
        return ""
    parts = []
    if g.ttft_p50_ms is not None:
        parts.append(f"time to first token p50 {g.ttft_p50_ms:.3f} ms (p99 {g.ttft_p99_ms:.3f})")
    if g.tpot_p50_ms is not None:
        parts.append(f"time per output token p50 {g.tpot_p50_ms:.3f} ms (p99 {g.tpot_p99_ms:.3f})")
    batch = f" at batch {g.batch_size}" if g.batch_size else ""
    parts.append(f"{g.output_tokens:.0f} output tokens per request{batch}")
    if g.output_tokens_per_s:
        parts.append(f"{g.output_tokens_per_s:.1f} output tokens/s")
    n = f"{g.requests} request{'s' if g.requests != 1 else ''}"
    return f"Generation ({n}; prefill and decode steps): " + ", ".join(parts) + "."


def serving_sentence(q: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    return " ".join(
        s
        for s in (
            generation_sentence(generation(q.get("generation_requests", []))),
            waits_sentence(q.get("stage_host_waits", [])),
            graph_sentence(q.get("graph_replay", [])),
        )
        if s
    )
