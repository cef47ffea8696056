"""A batched server's answer (tracekit.batch ranges): the served requests' waterfall (queue,
the batches' stages, hand-back) and throughput, from queries/serving_waterfall.sql and
serving_throughput.sql, as the report's sentence and the JSON report's `serving` object. Empty
for traces with no `tracekit.batch` ranges."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Queries = Mapping[str, list[dict[str, Any]]]

END_TO_END = "end_to_end"
PART_WORDS = {"batch (no stage)": "batch outside stages"}  # how a part reads in the sentence


def served(q: Queries) -> bool:
    """Whether the trace has requests that batches served."""
    return bool(q.get("serving_waterfall"))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def serving_sentence(q: Queries) -> str:
    """'Over 40 served requests, end-to-end p50 52.2 ms (p99 186.4 ms): queue 9%, preprocess
    4%, inference 70%, ...; 106.4 requests/s; mean batch 6.4 (max 8).' ("" when none)."""
    if not served(q):
        return ""
    rows = q["serving_waterfall"]
    e2e = next(r for r in rows if r["part"] == END_TO_END)
    parts = ", ".join(
        f"{PART_WORDS.get(r['part'], r['part'])} {r['share']:.0%}"
        for r in rows
        if r["part"] != END_TO_END and (r["share"] or 0) >= 0.005
    )
    tp = (q.get("serving_throughput") or [{}])[0]
    tail = []
    rps = _num(tp.get("requests_per_s"))
    if rps is not None:
        tail.append(f"{rps:.1f} requests/s")
    mean_batch = _num(tp.get("mean_batch"))
    if mean_batch is not None:
        tail.append(f"mean batch {mean_batch:.1f} (max {tp['max_batch']}, {tp['batches']} batches)")
    return (
        f"Over {e2e['requests']} served requests, end-to-end p50 {e2e['p50_ms']:.1f} ms "
        f"(p99 {e2e['p99_ms']:.1f} ms): {parts}" + ("; " + "; ".join(tail) if tail else "") + "."
    )


def serving_split(q: Queries) -> tuple[tuple[str, float, float], ...]:
    """(part, total ms over served requests, share of their end-to-end time), waterfall order:
    the report's split bar for a batched server."""
    return tuple(
        (str(PART_WORDS.get(r["part"], r["part"])), float(r["mean_ms"]) * r["requests"],
         float(r["share"] or 0.0))
        for r in q.get("serving_waterfall") or []
        if r["part"] != END_TO_END and (r["share"] or 0) > 0
    )  # fmt: skip


def serving_figures(q: Queries) -> dict[str, Any]:
    """The JSON report's `serving` object: parts with their statistics, and throughput."""
    tp = (q.get("serving_throughput") or [{}])[0]

    def r6(v: Any) -> Any:
        n = _num(v)
        return round(n, 6) if n is not None and isinstance(v, float) else v

    return {
        "sentence": serving_sentence(q),
        "parts": [
            {
                k: r6(r[k])
                for k in (
                    "part",
                    "requests",
                    "mean_ms",
                    "p50_ms",
                    "p90_ms",
                    "p99_ms",
                    "max_ms",
                    "share",
                )
            }  # fmt: skip
            for r in q["serving_waterfall"]
        ],
        "throughput": {k: r6(v) for k, v in tp.items() if k != "trace_id"},
    }
