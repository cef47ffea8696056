"""Findings: a small rule set over the query results of one trace.

Each rule reads rows of named queries (`results[query_name]` is a list of row dicts, as
`TraceSet.query(...).to_dicts()` returns) and yields at most one or a few `Finding`s, each with
the numbers that triggered it and the query that produced them. Rules never read the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tracekit.report import input_findings, memory
from tracekit.report.finding import SEVERITIES, Finding, Results, pearson

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
    """Attention by op name: the fallback for traces without shapes. With shapes,
    attention_score_ops measures the same thing by what the ops do, and this rule stays quiet."""
    ops = [r for r in results.get("top_ops", []) if r.get("stage") == "inference"]
    shaped = any(r.get("stage") == "inference" and _num(r.get("shaped_ops")) > 0
                 for r in results.get("attention_score_ops", []))  # fmt: skip
    if not ops or shaped:
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
            (
                "Fused attention kernels are already in use: check sequence padding."
                if _num(_program(results).get("fused_attention_kernels")) > 0
                else "Use fused attention (torch.nn.functional.scaled_dot_product_attention / "
                "FlashAttention) and check sequence padding."
            ),
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
                    "The host is the bottleneck: look at idle_gaps and launch_overhead; try "
                    + ("" if _graphs_in_use(results) else "CUDA graphs, ")
                    + "torch.compile, larger batches, fewer syncs.",
                    {"utilization": util},
                )


TAIL_RATIO = 2.0  # p99 over p50
TAIL_MATERIAL = 0.1  # ... and p99 - p50 at least this share of the end-to-end p50
TAIL_MIN_MS = 1.0  # ... and at least this long
TAIL_MIN_SHARE = 0.05  # ... in a stage holding at least this share of end to end


def rule_tail_latency(results: Results) -> Iterable[Finding]:
    """One card for every stage with a long tail that matters: p99 > 2x p50, the gap at least
    1 ms and 10% of the end-to-end p50, in a stage of at least 5% of end to end (a 0.4 ms gap in
    glue code is not worth a card). A tail is about this run: scope 'run'."""
    rows = results.get("stage_summary", [])
    e2e = next((r for r in rows if r.get("row_kind") == "end_to_end"), None)
    floor = max(TAIL_MATERIAL * _num(e2e.get("p50_ms")) if e2e else 0.0, TAIL_MIN_MS)
    tails = []
    for r in rows:
        p50, p99 = _num(r.get("p50_ms")), _num(r.get("p99_ms"))
        if r.get("row_kind") == "end_to_end" or p50 <= 0 or p99 / p50 <= TAIL_RATIO:
            continue
        if p99 - p50 >= floor and _num(r.get("share")) >= TAIL_MIN_SHARE:
            tails.append((p99 - p50, str(r["stage"]), p50, p99))
    if not tails:
        return
    tails.sort(key=lambda t: (-t[0], t[1]))
    names = [t[1] for t in tails]
    yield Finding(
        "tail_latency",
        "medium",
        f"Long tail in {names[0]}"
        + (f" and {len(names) - 1} more stages" if len(names) > 1 else ""),
        "; ".join(
            f"{n} p99 {p99:.3f} ms is {p99 / p50:.1f}x its p50 {p50:.3f} ms"
            for _, n, p50, p99 in tails
        ),  # fmt: skip
        "stage_summary",
        "Find the slow requests in request_breakdown and compare their ops with a typical "
        "one (input size, first-call warmup, GC, contention).",
        {f"p99_over_p50:{n}": p99 / p50 for _, n, p50, p99 in tails},
        scope="run",
    )


MIN_COPY_SPAN_SHARE = 0.01  # sync/pageable copies: of the devices' summed active spans


def rule_memcpy(results: Results) -> Iterable[Finding]:
    rows = [r for r in results.get("memcpy_summary", []) if r.get("direction") != "memset"]
    sync = sum(int(_num(r.get("sync_count"))) for r in rows)
    pageable = sum(int(_num(r.get("pageable_count"))) for r in rows)
    ms = sum(_num(r.get("total_ms")) for r in rows)
    active = sum(_num(d.get("active_ms")) for d in results.get("gpu_devices", []))
    # a few tiny copies (0.03 ms) are not a finding, nor copies under 1% of the GPU's active span
    if (sync or pageable) and ms >= 0.1 and ms >= MIN_COPY_SPAN_SHARE * active:
        yield Finding(
            "memcpy_sync_pageable",
            "low",
            "Synchronous or pageable memory copies",
            f"{sync} synchronous copies, {pageable} copies from/to pageable memory; copies "
            f"take {ms:.3f} ms"
            + (f", {ms / active:.0%} of the GPU's active span" if active > 0 else ""),
            "memcpy_summary",
            "Use pinned memory (tensor.pin_memory()) and non_blocking=True copies; avoid "
            ".item()/.cpu() inside the request until the result is needed.",
            {"sync_count": sync, "pageable_count": pageable},
        )


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
        corr = pearson(xs, ys)
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
    sources = {str(r.get("source")) for r in results.get("stage_summary", []) if r.get("source")}
    if sources and all(src.startswith("inferred:") for src in sources):
        return  # the answer already says the stages are inferred and how to name them
    kernels = results.get("top_kernels", [])
    if kernels and kernels[0].get("coverage") is not None and _num(kernels[0]["coverage"]) <= 0.5:
        cov = _num(kernels[0]["coverage"])
        yield Finding(
            "low_gpu_coverage",
            "low",
            f"Only {cov:.0%} of GPU time is attributed to a stage",
            f"{cov:.0%} of kernel time is attributed to a stage",
            "top_kernels",
            "Wrap the code that launches the remaining kernels in tracekit.stage(...) or map "
            "it with --stage NAME=REGEX.",
            {"coverage": cov},
        )
    rows = {r["row_kind"]: r for r in results.get("stage_summary", [])}
    if "end_to_end" in rows and "unattributed" in rows:
        covered = 1.0 - _num(rows["unattributed"].get("share"))
        if covered <= 0.5:
            yield Finding(
                "low_request_coverage",
                "low",
                f"Only {covered:.0%} of request time lies inside a stage",
                f"{covered:.0%} of request time lies inside a stage",
                "stage_summary",
                "Annotate the uncovered code with tracekit.stage(...) or pass --stage "
                "NAME=REGEX (e.g. --stage inference='forward').",
                {"coverage": covered},
            )


# Materiality: below these a GPU figure is noise, not a finding.
MIN_WINDOW_MS = 1.0  # a device observed for less than this says nothing about utilization
LOW_UTILIZATION = 0.5
MIN_COMM_EXPOSED_MS = 0.5
MIN_COMM_EXPOSED_SHARE = 0.05  # of the device's busy time
IMBALANCE_RATIO = 1.25
MIN_IMBALANCE_MS = 1.0
ATTENTION_SHARE = 0.4  # of a device's kernel time
MIN_COPY_MS = 0.5
MIN_COPY_SHARE = 0.02  # of the trace span


CAUSE_SHARE = 0.2  # a cause must explain at least this share of the GPU's idle time
LAUNCH_SHARE = 0.5  # launch-bound: launch API time at least this share of the idle time


def _program(results: Results) -> Mapping[str, Any]:
    return (results.get("program_kind") or [{}])[0]


def _graphs_in_use(results: Results) -> bool:
    k = _program(results)
    return _num(k.get("graph_kernels")) > 0


def _low_util_cause(results: Results, busy_ms: float, idle_ms: float) -> tuple[str, str]:
    """(cause in words with its share of the idle time, next step), chosen by what the trace
    proves: blocking calls, data loading, syncs, launches (only without graph replay)."""
    w = (results.get("host_waits") or [{}])[0]
    k = _program(results)
    idle = max(idle_ms, 1e-9)
    sync_ms, item_calls = _num(w.get("sync_ms")), int(_num(w.get("item_calls")))
    dl_ms = _num(w.get("dataloader_ms"))
    kernels, short = int(_num(w.get("kernels"))), int(_num(w.get("short_kernels")))
    launch_ms = _num(w.get("launch_api_ms"))
    graph_kernels = _num(k.get("graph_kernels"))
    blocking = [b for b in results.get("blocking_calls", []) if _num(b.get("total_ms")) > 0]
    top = blocking[0] if blocking else None
    if top and _num(top.get("total_ms")) >= CAUSE_SHARE * idle:
        where = f" in stage {top['stage']}" if top.get("stage") else ""
        return (
            f"blocking calls: {top['name']} x{top['calls']} takes {_num(top['total_ms']):.3f} ms "
            f"on the host (longest {_num(top['max_ms']):.3f} ms{where}), "
            f"{min(_num(top['total_ms']) / idle, 1):.0%} of the GPU's {idle_ms:.3f} ms idle time",
            "Remove the blocking call from the hot path: copy from pinned memory with "
            "non_blocking=True, keep results on the GPU, or move the copy/sync after the next "
            "batch's work is queued.",
        )
    windows = (results.get("trace_overview") or [{}])[0].get("request_source") == "window"
    reqs = [
        r
        for r in results.get("request_breakdown", [])
        if _num(r.get("gpu_events")) > 0 and not windows  # a thread's window is not a request
    ]
    before_ms = sum(_num(r.get("gpu_idle_before_ms")) for r in reqs)
    if before_ms >= CAUSE_SHARE * idle and before_ms > 0:
        return (
            f"GPU idle before the first kernel: inside the {len(reqs)} requests the GPU waits "
            f"{before_ms:.3f} ms in all for its first work (host work before it: preprocessing, "
            f"data preparation), {min(before_ms / idle, 1):.0%} of the GPU's idle time",
            "Move the host work before the first kernel off the critical path (preprocess the "
            "next request while the GPU runs this one, or move it to the GPU).",
        )
    if dl_ms >= CAUSE_SHARE * idle and dl_ms > 0:
        return (
            f"input pipeline: data loading ranges take {dl_ms:.3f} ms "
            f"({min(dl_ms / idle, 1):.0%} of the GPU's idle time)",
            "Load data in parallel (DataLoader num_workers, pin_memory=True, prefetch) so the "
            "GPU does not wait for the next batch.",
        )
    if sync_ms >= CAUSE_SHARE * idle and sync_ms > 0:
        return (
            f"host syncs: the host waits in synchronize calls for {sync_ms:.3f} ms "
            f"({min(sync_ms / idle, 1):.0%} of the GPU's idle time; {item_calls} "
            ".item()/nonzero-style ops)",
            "Remove synchronizations from the loop (.item(), .cpu(), print of tensors, "
            "torch.cuda.synchronize) or move them after the work is queued.",
        )
    # launch-bound only when kernels are launched one by one and the launches explain the idle
    eager = kernels - graph_kernels
    if (
        eager > 0
        and eager >= 0.5 * kernels
        and short >= 0.5 * kernels
        and (launch_ms >= LAUNCH_SHARE * idle)
    ):
        step = (
            "Fewer, larger kernels: operator fusion (torch.compile), larger batches."
            if _graphs_in_use(results)
            else "Fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), "
            "operator fusion (torch.compile), larger batches."
        )
        return (
            f"launch-bound: {short} of {kernels} kernels run under 10 µs (median "
            f"{_num(w.get('median_kernel_us')):.1f} µs) and kernel launches take {launch_ms:.3f} "
            f"ms of host time, {min(launch_ms / idle, 1):.0%} of the GPU's {idle_ms:.3f} ms "
            "idle time",
            step,
        )
    return (
        f"the host does other work between GPU bursts (no blocking call, sync, data wait or "
        f"launch overhead explains {CAUSE_SHARE:.0%} of the {idle_ms:.3f} ms idle time)",
        "Look at the longest idle gaps (idle_gaps) and what the host does in them.",
    )


def rule_gpu_low_utilization(results: Results) -> Iterable[Finding]:
    """Utilization over each device's ACTIVE span (first to last GPU activity): start-up
    before the first activity and teardown after the last are not idle time."""
    for d in results.get("gpu_devices", []):
        active = _num(d.get("active_ms"))
        util = _num(d.get("active_utilization"))
        if active < MIN_WINDOW_MS or util >= LOW_UTILIZATION:
            continue
        busy = _num(d.get("busy_ms"))
        cause, step = _low_util_cause(results, busy, active - busy)
        w = (results.get("host_waits") or [{}])[0]
        yield Finding(
            f"gpu_low_utilization:{d['device']}",
            "high" if util < 0.25 else "medium",
            f"{d['device_name']} is busy only {util:.0%} of its active span",
            f"GPU busy {busy:.3f} ms of its {active:.3f} ms active span (first to last GPU "
            f"activity; {util:.0%}); likely cause: {cause}",
            "gpu_devices",
            step,
            {
                "utilization": util,
                "busy_ms": busy,
                "window_ms": active,
                "sync_ms": _num(w.get("sync_ms")),
                "launch_api_ms": _num(w.get("launch_api_ms")),
                "short_kernels": _num(w.get("short_kernels")),
            },  # fmt: skip
        )


def rule_attention_dominated(results: Results) -> Iterable[Finding]:
    for d in results.get("gpu_devices", []):
        cats = {c["category"]: c for c in results.get("gpu_categories", [])
                if c["device"] == d["device"]}  # fmt: skip
        kernel_ms = _num(d.get("kernel_ms"))
        attn = _num(cats.get("attention", {}).get("total_ms"))
        if kernel_ms < MIN_WINDOW_MS or attn / kernel_ms < ATTENTION_SHARE:
            continue
        top = cats["attention"].get("top_kernel")
        yield Finding(
            f"attention_dominated:{d['device']}",
            "medium",
            f"Attention takes {attn / kernel_ms:.0%} of GPU kernel time on {d['device_name']}",
            f"attention kernels {attn:.3f} ms of {kernel_ms:.3f} ms kernel time (top: {top})",
            "gpu_categories",
            (
                "Fused attention kernels are already in use: when input lengths vary, bucket "
                "or pack sequences instead of padding to the longest."
                if _num(_program(results).get("fused_attention_kernels")) > 0
                else "Use fused attention (scaled_dot_product_attention / FlashAttention); when "
                "input lengths vary, bucket or pack sequences instead of padding to the longest."
            ),
            {"attention_ms": attn, "kernel_ms": kernel_ms, "share": attn / kernel_ms},
        )


def rule_exposed_communication(results: Results) -> Iterable[Finding]:
    for d in results.get("gpu_devices", []):
        exposed, busy = _num(d.get("exposed_communication_ms")), _num(d.get("busy_ms"))
        if exposed < MIN_COMM_EXPOSED_MS or busy <= 0 or exposed / busy < MIN_COMM_EXPOSED_SHARE:
            continue
        comm = _num(d.get("communication_ms"))
        yield Finding(
            f"exposed_communication:{d['device']}",
            "medium",
            f"Communication on {d['device_name']} is not hidden behind compute",
            f"communication {comm:.3f} ms, of which {exposed:.3f} ms with no other kernel "
            f"running ({exposed / busy:.0%} of the device's busy time)",
            "gpu_devices",
            (
                "Overlap communication with compute: run collectives on a separate stream, "
                "bucket gradients (DDP bucket_cap_mb), prefetch (FSDP forward/backward_prefetch)."
                if _program(results).get("kind") == "training"
                else "Overlap communication with compute (collectives on a separate stream, "
                "fused GEMM + all-reduce), or shard so fewer collectives sit on the critical path."
            ),
            {"communication_ms": comm, "exposed_communication_ms": exposed},
        )


def rule_device_imbalance(results: Results) -> Iterable[Finding]:
    devs = results.get("gpu_devices", [])
    if len(devs) < 2:
        return
    hi = max(devs, key=lambda d: _num(d.get("busy_ms")))
    lo = min(devs, key=lambda d: _num(d.get("busy_ms")))
    b_hi, b_lo = _num(hi.get("busy_ms")), _num(lo.get("busy_ms"))
    if b_hi - b_lo < MIN_IMBALANCE_MS or b_hi < IMBALANCE_RATIO * b_lo:
        return
    yield Finding(
        "device_imbalance",
        "medium",
        "One GPU is much busier than another",
        f"{hi['device_name']} busy {b_hi:.3f} ms vs {lo['device_name']} {b_lo:.3f} ms "
        f"({b_hi / b_lo if b_lo else float('inf'):.1f}x)",
        "gpu_devices",
        "Balance the work across devices (data/sequence lengths per rank, pipeline stage "
        "sizes, expert routing); the idle device waits for the busy one.",
        {"max_busy_ms": b_hi, "min_busy_ms": b_lo},
    )


def rule_memcpy_hot_loop(results: Results) -> Iterable[Finding]:
    # copy time of every device against the span of every device (device-time, as GPU busy)
    span = _num((results.get("host_waits") or [{}])[0].get("span_ms")) * max(
        len(results.get("gpu_devices", [])), 1
    )
    reqs = max(len(results.get("request_breakdown", [])), 1)
    for r in results.get("memcpy_summary", []):
        if r.get("direction") not in ("HtoD", "DtoH"):
            continue
        ms, n = _num(r.get("total_ms")), int(_num(r.get("count")))
        if ms < MIN_COPY_MS or span <= 0 or ms / span < MIN_COPY_SHARE or n < 2 * reqs:
            continue
        yield Finding(
            f"memcpy_hot_loop:{r['direction']}",
            "medium",
            f"Repeated {r['direction']} copies in the loop",
            f"{n} {r['direction']} copies ({n / reqs:.1f} per request), {ms:.3f} ms of copy "
            f"time ({ms / span:.1%} of the trace's device time), "
            f"{int(_num(r.get('bytes')))} bytes",
            "memcpy_summary",
            "Keep tensors on the GPU between steps, copy once per batch with pinned memory and "
            "non_blocking=True, avoid .cpu()/.item() inside the loop.",
            {"count": n, "total_ms": ms, "per_request": n / reqs},
        )


RULES: tuple[Callable[[Results], Iterable[Finding]], ...] = (
    rule_gpu_low_utilization,
    rule_attention_dominated,
    rule_exposed_communication,
    rule_device_imbalance,
    rule_memcpy_hot_loop,
    rule_prepost_dominant,
    rule_model_slow,
    rule_attention_heavy,
    rule_gpu_idle_inference,
    rule_tail_latency,
    rule_memcpy,
    rule_length_growth,
    rule_low_coverage,
)


# One card per cause: a catch-all card gives way to one that names its cause.
GIVES_WAY_TO = {
    "model_slow": frozenset({"padding_waste", "attention_scores"}),
    "tail_latency": frozenset({"slowest_requests", "slow_outliers"}),
}


def evaluate(results: Results) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity); verdicts about the
    program before observations about this run."""
    found = [f for rule in RULES for f in rule(results)] + input_findings.evaluate(results)
    found += memory.evaluate(results)
    ids = {f.id for f in found}
    found = [f for f in found if not GIVES_WAY_TO.get(f.id, frozenset()) & ids]
    return sorted(found, key=lambda f: (f.scope == "run", SEVERITIES.index(f.severity)))
