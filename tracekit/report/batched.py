"""A batched server's answer (tracekit.batch ranges): the served requests' waterfall (queue,
the batches' stages, hand-back) and throughput, from queries/serving_waterfall.sql and
serving_throughput.sql, as the report's sentence and the JSON report's `serving` object. Empty
for traces with no `tracekit.batch` ranges. `--warmup N` and `--slo` (tracekit.slo) are those
queries' parameters; each target's share comes from serving_throughput with it alone."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tracekit.slo import Slo

# the queries that take --warmup / --slo (tracekit.slo.ServingOptions.params)
SERVED = frozenset({"serving_requests", "serving_waterfall", "serving_throughput"})

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
        tokens = _num(tp.get("output_tokens_per_s"))
        tail.append(f"{rps:.1f} requests/s" + (f", {tokens:.0f} output tokens/s" if tokens else ""))
    ttft, tpot = _num(tp.get("ttft_p50_ms")), _num(tp.get("tpot_p50_ms"))
    if ttft is not None:
        tail.append(f"time to first token p50 {ttft:.1f} ms (p99 {_num(tp['ttft_p99_ms']):.1f})")
    if tpot is not None:
        tail.append(f"per output token p50 {tpot:.2f} ms (p99 {_num(tp['tpot_p99_ms']):.2f})")
    mean_batch = _num(tp.get("mean_batch"))
    if mean_batch is not None:
        tail.append(f"mean batch {mean_batch:.1f} (max {tp['max_batch']}, {tp['batches']} batches)")
    tail += [_slo_words(r) for r in q.get("serving_slo") or []]
    good = _num(tp.get("within_slo"))
    if good is not None and len(q.get("serving_slo") or []) > 1:
        tail.append(f"{good:.1%} within every target")
    if good is not None:
        tail.append(f"goodput {_num(tp['goodput_per_s']) or 0.0:.1f} requests/s")
    return (
        f"Over {e2e['requests']} served requests, end-to-end p50 {e2e['p50_ms']:.1f} ms "
        f"(p99 {e2e['p99_ms']:.1f} ms): {parts}" + ("; " + "; ".join(tail) if tail else "") + "."
    )


def served_generation(q: Queries) -> tuple[float | None, ...]:
    """TTFT p50/p99, TPOT p50/p99 (ms) and output tokens/s of the served requests (None
    each without prefill / decode steps in their batches): the answer's generation fields."""
    tp = (q.get("serving_throughput") or [{}])[0]
    keys = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "output_tokens_per_s")
    return tuple(_num(tp.get(k)) for k in keys)


def slo_row(slo: Slo, throughput: list[dict[str, Any]]) -> dict[str, Any]:
    """One --slo target over the served requests (serving_throughput with it alone): the share
    of requests within its limit, and whether that share reaches its percentile."""
    within = _num((throughput or [{}])[0].get("within_slo"))
    return {
        "slo": slo.text,
        "metric": slo.metric,
        "percentile": slo.percentile,
        "limit_ms": slo.limit_ms,
        "within": None if within is None else round(within, 6),
        "met": within is not None and within * 100 >= slo.percentile - 1e-9,
    }


def _slo_words(r: dict[str, Any]) -> str:
    """'SLO end_to_end.p99<=200ms: 97.5% of requests within (met: needs 99%)'."""
    if r["within"] is None:
        return f"SLO {r['slo']}: no requests"
    verdict = "met" if r["met"] else "missed"
    return (
        f"SLO {r['slo']}: {r['within']:.1%} of requests within "
        f"({verdict}: needs {r['percentile']:g}%)"
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
        "slo": list(q.get("serving_slo") or []),
    }
