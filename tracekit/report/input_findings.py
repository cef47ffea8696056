"""Findings about input size: padding waste and attention-score work (issue 21).

They read the rows of `padding_waste` and `attention_score_ops` (facts recorded by
`--stage`/`--request` call hooks, and op input shapes) and, like the rules in findings.py, never
read the store. Thresholds are materiality thresholds: below them no card is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tracekit.report.findings import Finding

Rows = Sequence[Mapping[str, Any]]
Results = Mapping[str, Rows]

PADDING_SHARE = 0.5  # most tokens are padding
SCORE_SHARE = 0.5  # attention-score ops take most of a stage's op time
MODEL_STAGES = ("inference", "model", "forward")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def rule_padding_waste(results: Results) -> Iterable[Finding]:
    rows = [r for r in results.get("padding_waste", []) if _num(r.get("padded_tokens")) > 0]
    if not rows:
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
        f"{int(_num(row['max_real_per_range']))})",
        "padding_waste",
        "Pad to the batch's longest input or to length buckets (dynamic padding), sort or "
        "bucket requests by length; attention work grows with the square of the padded length.",
        {
            "padding_share": share,
            "padded_tokens": _num(row["padded_tokens"]),
            "real_tokens": _num(row["real_tokens"]),
        },  # fmt: skip
    )


def rule_attention_scores(results: Results) -> Iterable[Finding]:
    rows = {r["stage"]: r for r in results.get("attention_score_ops", [])}
    row = next((rows[s] for s in MODEL_STAGES if s in rows), None)
    if row is None or _num(row.get("share")) < SCORE_SHARE:
        return
    share = _num(row["share"])
    names = ", ".join(str(row.get("top_ops") or "").split(", ")[:4])
    yield Finding(
        "attention_scores",
        "high",
        f"Attention-score work dominates {row['stage']}",
        f"ops on the [B, H, L, L] attention scores ({names} ...) take "
        f"{_num(row['score_self_ms']):.3f} ms, {share:.0%} of {row['stage']} op self time "
        f"({_num(row['ops_self_ms']):.3f} ms)",
        "attention_score_ops",
        "This work grows with the square of the sequence length: cut padding first (see "
        "padding_waste), then use fused attention (scaled_dot_product_attention / "
        "FlashAttention).",
        {"share": share, "score_self_ms": _num(row["score_self_ms"])},
    )


RULES = (rule_padding_waste, rule_attention_scores)
QUERIES = ("padding_waste", "attention_score_ops")


def evaluate(results: Results) -> list[Finding]:
    return [f for rule in RULES for f in rule(results)]
