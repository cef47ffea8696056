"""Findings: a small rule set over the query results of one trace.

Each rule reads rows of named queries (`results[query_name]` is a list of row dicts, as
`TraceSet.query(...).to_dicts()` returns) and yields at most one or a few `Finding`s, each with
the numbers that triggered it and the query that produced them. Rules never read the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Rows = Sequence[Mapping[str, Any]]
Results = Mapping[str, Rows]

SEVERITIES = ("high", "medium", "low", "info")
ATTENTION_OPS = ("bmm", "softmax", "baddbmm", "scaled_dot_product_attention")
LENGTH_KEYS = (
    "seq_len",
    "sequence_length",
    "seq_length",
    "num_tokens",
    "tokens",
    "length",
    "input_length",
    "n_tokens",
)


@dataclass(frozen=True)
class Finding:
    """One observation with its evidence and what to do next."""

    id: str = field(metadata={"help": "stable rule id, e.g. 'prepost_dominant'"})
    severity: str = field(metadata={"help": "high | medium | low | info"})
    title: str = field(metadata={"help": "one line saying what was found"})
    evidence: str = field(metadata={"help": "the numbers, in words"})
    query: str = field(metadata={"help": "the query whose rows are the evidence"})
    next_step: str = field(metadata={"help": "what to try or measure next"})
    numbers: Mapping[str, float] = field(
        default_factory=dict, metadata={"help": "the figures the rule compared"}
    )


def _stage_rows(results: Results) -> dict[str, Mapping[str, Any]]:
    return {r["stage"]: r for r in results.get("stage_summary", []) if r.get("row_kind") == "stage"}


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def rule_prepost_dominant(results: Results) -> Iterable[Finding]:
    stages = _stage_rows(results)
    inf = stages.get("inference")
    if inf is None:
        return
    share = _num(stages.get("preprocess", {}).get("share")) + _num(
        stages.get("postprocess", {}).get("share")
    )
    p50 = _num(inf.get("p50_ms"))
    if share >= 0.30 and p50 < 50:
        yield Finding(
            "prepost_dominant",
            "high",
            "Pre- and postprocessing take a large share of latency",
            f"preprocess + postprocess = {share:.0%} of end-to-end time while inference p50 is "
            f"{p50:.2f} ms",
            "stage_summary",
            "Optimize pre/post first: batch or cache tokenization, move tensor construction and "
            "copies off the request path, use a fast (Rust) tokenizer.",
            {"prepost_share": share, "inference_p50_ms": p50},
        )


def rule_model_slow(results: Results) -> Iterable[Finding]:
    inf = _stage_rows(results).get("inference")
    if inf is not None and _num(inf.get("p50_ms")) > 200:
        p50 = _num(inf.get("p50_ms"))
        yield Finding(
            "model_slow",
            "high",
            "Inference itself is slow",
            f"inference p50 is {p50:.1f} ms (> 200 ms)",
            "stage_summary",
            "Optimize the model first: half precision, torch.compile, a smaller or distilled "
            "model, fused attention (scaled_dot_product_attention).",
            {"inference_p50_ms": p50},
        )


def rule_attention_heavy(results: Results) -> Iterable[Finding]:
    ops = [r for r in results.get("top_ops", []) if r.get("stage") == "inference"]
    if not ops:
        return
    total = _num(ops[0].get("stage_ops_self_ms"))
    attn = sum(
        _num(r.get("self_ms"))
        for r in ops
        if any(a in str(r.get("name", "")).lower() for a in ATTENTION_OPS)
    )
    if total > 0 and attn / total > 0.5:
        yield Finding(
            "attention_heavy",
            "medium",
            "Attention ops dominate inference op time",
            f"bmm/softmax/baddbmm/scaled_dot_product_attention self time = {attn:.3f} ms, "
            f"{attn / total:.0%} of inference op self time ({total:.3f} ms)",
            "top_ops",
            "Use fused attention (torch.nn.functional.scaled_dot_product_attention / "
            "FlashAttention) and check sequence padding.",
            {"attention_self_ms": attn, "share": attn / total},
        )


def rule_gpu_idle_inference(results: Results) -> Iterable[Finding]:
    overview = results.get("trace_overview", [])
    if not overview or _num(overview[0].get("gpu_events")) == 0:
        return
    for r in results.get("gpu_utilization", []):
        if r.get("scope") == "stage" and r.get("name") == "inference":
            util = _num(r.get("utilization"))
            if util < 0.5:
                yield Finding(
                    "gpu_idle_inference",
                    "medium",
                    "The GPU is idle for much of inference",
                    f"GPU busy {_num(r.get('busy_ms')):.3f} ms of {_num(r.get('window_ms')):.3f}"
                    f" ms inference time ({util:.0%})",
                    "gpu_utilization",
                    "The host is the bottleneck: look at idle_gaps and launch_overhead; try CUDA "
                    "graphs, torch.compile, larger batches, fewer syncs.",
                    {"utilization": util},
                )


def rule_tail_latency(results: Results) -> Iterable[Finding]:
    for r in results.get("stage_summary", []):
        p50, p99 = _num(r.get("p50_ms")), _num(r.get("p99_ms"))
        if r.get("row_kind") == "end_to_end" or p50 <= 0 or p99 / p50 <= 2:
            continue
        yield Finding(
            f"tail_latency:{r['stage']}",
            "medium",
            f"Long tail in {r['stage']}",
            f"{r['stage']} p99 {p99:.3f} ms is {p99 / p50:.1f}x its p50 {p50:.3f} ms",
            "stage_summary",
            "Find the slow requests in request_breakdown and compare their ops with a typical "
            "one (input size, first-call warmup, GC, contention).",
            {"p50_ms": p50, "p99_ms": p99},
        )


def rule_memcpy(results: Results) -> Iterable[Finding]:
    rows = [r for r in results.get("memcpy_summary", []) if r.get("direction") != "memset"]
    sync = sum(int(_num(r.get("sync_count"))) for r in rows)
    pageable = sum(int(_num(r.get("pageable_count"))) for r in rows)
    if sync or pageable:
        yield Finding(
            "memcpy_sync_pageable",
            "low",
            "Synchronous or pageable memory copies",
            f"{sync} synchronous copies, {pageable} copies from/to pageable memory",
            "memcpy_summary",
            "Use pinned memory (tensor.pin_memory()) and non_blocking=True copies; avoid "
            ".item()/.cpu() inside the request until the result is needed.",
            {"sync_count": sync, "pageable_count": pageable},
        )


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def rule_length_growth(results: Results) -> Iterable[Finding]:
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in results.get("stage_attributes", []):
        if str(r.get("key", "")).lower() in LENGTH_KEYS and r.get("stage") in (
            "preprocess",
            "tokenize",
            "tokenization",
        ):
            groups.setdefault((r["stage"], r["key"]), []).append(
                (_num(r.get("value")), _num(r.get("dur_ms")))
            )
    for (stage, key), points in sorted(groups.items()):
        if len(points) < 5:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        corr = _pearson(xs, ys)
        mx = sum(xs) / len(xs)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - sum(ys) / len(ys)) for x, y in points) / sxx if sxx else 0.0
        if corr >= 0.8 and slope > 0:
            yield Finding(
                f"length_growth:{stage}",
                "info",
                f"{stage} time grows with {key}",
                f"correlation {corr:.2f} over {len(points)} ranges; +{slope * 100:.3f} ms per 100 "
                f"{key}",
                "stage_attributes",
                "Cap or bucket input lengths, truncate early, batch tokenization.",
                {"correlation": corr, "ms_per_unit": slope},
            )


def rule_low_coverage(results: Results) -> Iterable[Finding]:
    kernels = results.get("top_kernels", [])
    if kernels and kernels[0].get("coverage") is not None and _num(kernels[0]["coverage"]) < 0.8:
        cov = _num(kernels[0]["coverage"])
        yield Finding(
            "low_gpu_coverage",
            "low",
            "Much GPU time is not attributed to any stage",
            f"{cov:.0%} of kernel time is attributed to a stage",
            "top_kernels",
            "Wrap the code that launches the remaining kernels in tracekit.stage(...) or map "
            "it with --stage NAME=REGEX.",
            {"coverage": cov},
        )
    rows = {r["row_kind"]: r for r in results.get("stage_summary", [])}
    if "end_to_end" in rows and "unattributed" in rows:
        covered = 1.0 - _num(rows["unattributed"].get("share"))
        if covered < 0.8:
            yield Finding(
                "low_request_coverage",
                "low",
                "Much request time is not covered by any stage",
                f"{covered:.0%} of request time lies inside a stage",
                "stage_summary",
                "Annotate the uncovered code with tracekit.stage(...) or pass --stage "
                "NAME=REGEX (e.g. --stage inference='forward').",
                {"coverage": covered},
            )


RULES: tuple[Callable[[Results], Iterable[Finding]], ...] = (
    rule_prepost_dominant,
    rule_model_slow,
    rule_attention_heavy,
    rule_gpu_idle_inference,
    rule_tail_latency,
    rule_memcpy,
    rule_length_growth,
    rule_low_coverage,
)


def evaluate(results: Results) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity)."""
    from tracekit.report import input_findings  # (imports Finding from here)

    found = [f for rule in RULES for f in rule(results)] + input_findings.evaluate(results)
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
