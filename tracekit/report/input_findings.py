"""Findings about input size: padding waste and attention-score work (issue 21).

They read the rows of `padding_waste` and `attention_score_ops` (facts recorded by
`--stage`/`--request` call hooks, and op input shapes) and, like the rules in findings.py, never
read the store. Thresholds are materiality thresholds: below them no card is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from tracekit.report.finding import Finding, Results, Rows, pearson

PADDING_SHARE = 0.5  # most tokens are padding
# attention-score ops dominate a stage's op time: two thirds, not a half (a bucketed BERT sits
# at 0.49-0.51 from run to run, and a verdict must not flip on noise)
SCORE_SHARE = 2 / 3
MODEL_STAGES = ("inference", "model", "forward")
MIN_REQUESTS = 5  # fewer requests: no statement about sizes
TAIL_MS, TAIL_RATIO = 1.0, 0.2  # slowest request at least this much over the median
MATERIAL_SHARE = 0.05  # stages under 5% of end to end get no growth card
GROWTH_CORR = 0.8
# the slowest requests are a verdict about size only when request time follows the size the
# model computes on across all requests: with every request padded to one length, which of them
# also hold the most real tokens is chance (half of 6 requests are "among the largest")
SIZE_CORR = 0.5


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def _attention_padding(results: Results) -> Mapping[str, Any] | None:
    """The roofline's share of attention FLOPs spent on padding (tracekit.roofline), if known."""
    rows = results.get("op_efficiency") or [{}]
    pad = rows[0].get("padding")
    return pad if isinstance(pad, Mapping) else None


def rule_padding_waste(results: Results) -> Iterable[Finding]:
    rows = [r for r in results.get("padding_waste", []) if _num(r.get("padded_tokens")) > 0]
    flops = _attention_padding(results)
    flops_text = ""
    numbers: dict[str, float] = {}
    if flops is not None:
        flops_share = _num(flops["padding_share"])
        flops_text = (
            f"{flops_share:.0%} of attention FLOPs are on padding tokens "
            f"({_num(flops['attention_gflop']) - _num(flops['real_gflop']):.3f} of "
            f"{_num(flops['attention_gflop']):.3f} GFLOP over {int(_num(flops['requests']))} "
            "requests, from their real sequence lengths)"
        )
        numbers["attention_padding_flops_share"] = flops_share
    if not rows:
        if flops is None or numbers["attention_padding_flops_share"] < PADDING_SHARE:
            return
        yield Finding(
            "padding_waste",
            "high",
            "Most attention work is on padding",
            flops_text[:1].upper() + flops_text[1:],
            "op_kernels",
            "Pad to the batch's longest input or to length buckets (dynamic padding), sort or "
            "bucket requests by length; attention work grows with the square of the padded "
            "length.",
            numbers,
        )
        return
    # the model's stage when it has the facts, else the stage with the most padded tokens
    row = next((r for r in rows if r["stage"] in MODEL_STAGES), None) or max(
        rows, key=lambda r: (_num(r["padded_tokens"]), r["stage"])
    )
    share = _num(row["padding_share"])
    if share < PADDING_SHARE:
        return
    yield Finding(
        "padding_waste",
        "high",
        "Most tokens are padding",
        f"{share:.0%} of the {int(_num(row['padded_tokens']))} tokens {row['stage']} computed on "
        f"are padding ({int(_num(row['real_tokens']))} real; mean padded length "
        f"{_num(row['mean_padded_len']):.0f}, most real tokens in one call "
        f"{int(_num(row['max_real_per_range']))})" + (f"; {flops_text}" if flops_text else ""),
        "padding_waste",
        "Pad to the batch's longest input or to length buckets (dynamic padding), sort or "
        "bucket requests by length; attention work grows with the square of the padded length.",
        {
            "padding_share": share,
            "padded_tokens": _num(row["padded_tokens"]),
            "real_tokens": _num(row["real_tokens"]),
            **numbers,
        },  # fmt: skip
    )


def rule_attention_scores(results: Results) -> Iterable[Finding]:
    rows = {r["stage"]: r for r in results.get("attention_score_ops", [])}
    row = next((rows[s] for s in MODEL_STAGES if s in rows), None)
    if row is None or _num(row.get("share")) < SCORE_SHARE:
        return
    share = _num(row["share"])
    names = ", ".join(str(row.get("top_ops") or "").split(", ")[:4])
    padded = any(
        _num(r.get("padding_share")) >= PADDING_SHARE for r in results.get("padding_waste", [])
    )
    fix = "cut padding first (see padding_waste), then use" if padded else "use"
    yield Finding(
        "attention_scores",
        "high",
        f"Attention-score work dominates {row['stage']}",
        f"ops on the [B, H, L, L] attention scores ({names} ...) take "
        f"{_num(row['score_self_ms']):.3f} ms, {share:.0%} of {row['stage']} op self time "
        f"({_num(row['ops_self_ms']):.3f} ms)",
        "attention_score_ops",
        f"This work grows with the square of the sequence length: {fix} fused attention "
        "(scaled_dot_product_attention / FlashAttention).",
        {"share": share, "score_self_ms": _num(row["score_self_ms"])},
    )


def _sized(results: Results) -> list[Mapping[str, Any]]:
    return [r for r in results.get("request_sizes", []) if r.get("real_tokens") is not None]


def _describe(r: Mapping[str, Any], n: int) -> str:
    # real and padded tokens are the request's (all its sequences); padded_len is per sequence
    pad = ""
    if r.get("padded_tokens") is not None:
        pad = f" of {int(_num(r['padded_tokens']))} computed"
        if r.get("padded_len"):
            pad += f" (padded length {int(_num(r['padded_len']))})"
    return (f"request {r['request_id']} {_num(r['e2e_ms']):.1f} ms, {int(r['real_tokens'])} real "
            f"tokens{pad} (size rank {r['size_rank']} of {n})")  # fmt: skip


def _size_explains_time(rows: Rows) -> bool:
    """Request time correlates with input size: padded tokens where every request has them
    (the work done), else real tokens; never when the size is the same for all."""
    padded = [r.get("padded_tokens") for r in rows]
    key = "padded_tokens" if all(p is not None for p in padded) else "real_tokens"
    xs = [_num(r[key]) for r in rows]
    if len(set(xs)) < 2:
        return False
    return pearson(xs, [_num(r["e2e_ms"]) for r in rows]) >= SIZE_CORR


def rule_slowest_requests(results: Results) -> Iterable[Finding]:
    """The slow requests (at least 1 ms and 20% over the median) named with their sizes. When
    most of them are among the largest inputs and request time follows input size, that is a
    verdict about the program (slowest_requests); otherwise they are outliers of this run
    (slow_outliers, scope 'run')."""
    rows = _sized(results)
    if len(rows) < MIN_REQUESTS:
        return
    e2e = sorted(_num(r["e2e_ms"]) for r in rows)
    median = e2e[len(e2e) // 2]
    cut = median + max(TAIL_MS, TAIL_RATIO * median)
    slow = [r for r in rows if _num(r["e2e_ms"]) >= cut]  # the query lists slowest first
    if not slow:
        return
    largest = sum(1 for r in slow if int(r["size_rank"]) <= max(3, len(rows) // 4))
    named = "; ".join(_describe(r, len(rows)) for r in slow[:3])
    more = f" and {len(slow) - 3} more" if len(slow) > 3 else ""
    evidence = f"{named}{more}; median {median:.1f} ms"
    numbers = {"slowest_ms": _num(slow[0]["e2e_ms"]), "median_ms": median, "slow": len(slow)}
    if 2 * largest > len(slow) and _size_explains_time(rows):
        yield Finding(
            "slowest_requests",
            "medium",
            "The slowest requests are the largest inputs",
            evidence,
            "request_sizes",
            "Cap or bucket input lengths and batch requests of similar length.",
            numbers,
        )
    else:
        yield Finding(
            "slow_outliers",
            "info",
            "Some requests are slow and are not the largest inputs",
            evidence,
            "request_sizes",
            "Look for what else differs in those requests: first calls, GC, other processes; "
            "capture again to see whether they recur.",
            numbers,
            scope="run",
        )


def rule_length_growth(results: Results) -> Iterable[Finding]:
    sizes = {r["request_id"]: _num(r["padded_tokens"]) for r in _sized(results)
             if r.get("padded_tokens") is not None}  # fmt: skip
    share = {r["stage"]: _num(r.get("share")) for r in results.get("stage_summary", [])
             if r.get("row_kind") == "stage"}  # fmt: skip
    per_stage: dict[str, list[tuple[float, float]]] = {}
    for r in results.get("request_breakdown", []):
        if r["request_id"] not in sizes:
            continue
        for stage, ms in json.loads(r["stages_json"]).items():
            per_stage.setdefault(stage, []).append((sizes[r["request_id"]], float(ms)))
    grows = []
    for stage, pts in sorted(per_stage.items()):
        if len(pts) < MIN_REQUESTS or share.get(stage, 0.0) < MATERIAL_SHARE:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        corr = pearson(xs, ys)
        if corr >= GROWTH_CORR and len(set(xs)) > 1:
            grows.append((stage, corr))
    if grows:
        yield Finding(
            "length_growth_padded",
            "medium",
            "Stage time grows with the padded input size",
            ", ".join(f"{s} (correlation {c:.2f})" for s, c in grows)
            + f" over {len(sizes)} requests, against padded tokens per request",
            "request_sizes",
            "Reduce padded length: dynamic padding, length buckets, truncation.",
            {f"corr_{s}": c for s, c in grows},
        )


RULES = (rule_padding_waste, rule_attention_scores, rule_slowest_requests, rule_length_growth)
QUERIES = ("padding_waste", "attention_score_ops", "request_sizes")


def evaluate(results: Results) -> list[Finding]:
    return [f for rule in RULES for f in rule(results)]
