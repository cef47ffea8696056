"""Metric extraction for diff/check: stage latency, ops, kernels, GPU busy, throughput.

Every figure comes from the `queries/compare_*.sql` and `gpu_busy_by_device` files run over
the store tables (stages, requests, events, traces), so users can reproduce any number by
hand with `tracekit query`. A run seen by two tools (the nsys and Kineto traces of one
capture) is one run: each group of figures is read from one of its views (tracekit.compare.views).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tracekit.compare.views import RunViews, expand_runs, run_views
from tracekit.slo import NO_SERVING_OPTIONS, ServingOptions
from tracekit.sql import load_query
from tracekit.store.stages import StageRule
from tracekit.store.traceset import TraceSet, open_traces

STAGE_METRICS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms", "share", "count")
# a batched server's figures (queries serving_throughput and serving_waterfall), by name
SERVING_METRICS = ("requests_per_s", "mean_batch", "queue_p50_ms", "queue_p99_ms",
                   "end_to_end_p50_ms", "end_to_end_p99_ms", "ttft_p50_ms", "ttft_p99_ms",
                   "tpot_p50_ms", "tpot_p99_ms", "output_tokens_per_s", "within_slo",
                   "goodput_per_s")  # fmt: skip
# those only a server that generates has (prefill / decode steps in its batches): absent else
GENERATION_SERVING = frozenset({"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                                "output_tokens_per_s"})  # fmt: skip
GOODPUT = ("within_slo", "goodput_per_s")  # only with --slo targets

__all__ = [
    "SERVING_METRICS",
    "STAGE_METRICS",
    "DeviceBusy",
    "ItemStats",
    "RunMetrics",
    "StageStats",
    "expand_runs",
    "extract_run",
    "load_side",
    "pool",
]


@dataclass(frozen=True)
class StageStats:
    """Latency of one stage across requests (one sample per request that has the stage)."""

    stage: str
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    total_ms: float
    share: float  # stage total / end_to_end total

    def metric(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass(frozen=True)
class Calls:
    """Calls of one op or kernel (on one device): count, summed time and squared time."""

    count: float  # per run
    total_ms: float  # per run
    sq_ms2: float  # per run: sum of squared durations, ms²

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0

    @property
    def var_ms2(self) -> float:
        """Sample variance of one call's time (0 for fewer than 2 calls)."""
        n = self.count
        if n < 2:
            return 0.0
        return max(self.sq_ms2 / n - self.mean_ms**2, 0.0) * n / (n - 1)


@dataclass(frozen=True)
class ItemStats:
    """An op (name + input shapes; inclusive times) or kernel (shape '') per run."""

    name: str
    shape: str
    calls: Calls
    max_ms: float = 0.0
    self_ms: float | None = None  # ops: self time (no direct children) per run
    devices: tuple[tuple[str, Calls], ...] = ()  # kernels: per device label

    @property
    def count(self) -> float:
        return self.calls.count

    @property
    def total_ms(self) -> float:
        return self.calls.total_ms

    @property
    def mean_ms(self) -> float:
        return self.calls.mean_ms


@dataclass(frozen=True)
class DeviceBusy:
    """GPU busy time of one device (the union of its kernel/memcpy/memset intervals), per run.
    device 'all' sums the devices (device-time: the report's trace figure)."""

    device: str
    busy_ms: float
    span_ms: float

    @property
    def utilization(self) -> float | None:
        return self.busy_ms / self.span_ms if self.span_ms > 0 else None


@dataclass(frozen=True)
class Work:
    """How much work a group of figures covers, per run: requests, trace span, and the
    ranges named by `diff --per NAME` (iterations; 0 when not asked)."""

    requests: float
    span_ms: float
    iterations: float = 0.0


@dataclass(frozen=True)
class RunMetrics:
    """Everything diff/check compare, for one run or the pool of several runs of one side.

    For a pool, stage percentiles are over all requests of all runs, while op/kernel counts
    and totals, GPU busy and span are means per run (so N vs M runs stay comparable).
    """

    label: str
    runs: tuple[str, ...]
    stages: tuple[StageStats, ...]
    ops: tuple[ItemStats, ...]  # by inclusive time per run, largest first
    kernels: tuple[ItemStats, ...]  # by total per run, largest first
    requests: int  # all runs
    request_ms: float  # summed request wall time, all runs
    span_ms: float  # summed trace span of the request views, all runs
    gpu_busy_ms: float  # per run, device-time: the devices' busy times summed
    gpu_devices: int
    devices: tuple[DeviceBusy, ...] = ()  # per device, then 'all'
    gpu_work: Work = Work(0, 0)  # the work the kernel figures cover (per run)
    ops_work: Work = Work(0, 0)
    views: tuple[str, ...] = ()  # one line per run: which trace gave which figures
    gpu_names: tuple[str, ...] = ()  # GPU models the GPU view's traces record
    samples: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    # SERVING_METRICS of a trace with tracekit.batch ranges (None: no served requests)
    serving: dict[str, float] | None = None

    def stage(self, name: str) -> StageStats | None:
        return next((s for s in self.stages if s.stage == name), None)

    @property
    def rps_request_time(self) -> float | None:
        """Requests per second of summed request wall time (1 / mean latency)."""
        return self.requests / (self.request_ms / 1e3) if self.request_ms > 0 else None

    @property
    def rps_span(self) -> float | None:
        """Requests per second of trace span (first to last event of each trace)."""
        return self.requests / (self.span_ms / 1e3) if self.span_ms > 0 else None

    @property
    def gpu_utilization(self) -> float | None:
        """GPU busy (device-time) / the devices' summed ACTIVE spans (first to last GPU
        activity each, gpu_busy_by_device): the report's trace-wide figure."""
        every = next((d for d in self.devices if d.device == "all"), None)
        return every.utilization if every is not None else None


def _rows(ts: TraceSet, name: str) -> list[dict[str, Any]]:
    return ts.query(name).to_dicts()


GENERATION_METRICS = ("ttft", "tpot")  # per-request figures of generation_requests


def _generation_samples(
    ts: TraceSet, opts: ServingOptions = NO_SERVING_OPTIONS
) -> dict[str, list[float]]:
    """ttft / tpot (ms) of every request with generation steps (queries/generation_requests;
    a batched server's from serving_requests: its batches' steps serve all their requests)."""
    out: dict[str, list[float]] = defaultdict(list)
    ids = ts.sql("SELECT trace_id FROM traces ORDER BY trace_id")["trace_id"].to_list()
    for trace_id in ids:
        rows = ts.query_dicts("serving_requests", trace_id=trace_id, **opts.params({"warmup"}))
        if not rows:
            rows = ts.query("generation_requests", trace_id=trace_id).to_dicts()
        for r in rows:
            for name in GENERATION_METRICS:
                if r[f"{name}_ms"] is not None:
                    out[name].append(float(r[f"{name}_ms"]))
    return out


def _sample_stats(name: str, values: list[float]) -> StageStats:
    """A StageStats of per-request values (quantiles interpolate like quantile_cont)."""
    a = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = (float(np.percentile(a, p)) for p in (50, 90, 99))
    return StageStats(
        name, len(a), p50, p90, p99, float(a.mean()), float(a.max()), float(a.sum()), 0.0
    )


def _stage_part(
    ts: TraceSet, opts: ServingOptions = NO_SERVING_OPTIONS
) -> tuple[tuple[StageStats, ...], dict[str, np.ndarray]]:
    stats = _rows(ts, "compare_stage_stats")
    samples: dict[str, list[float]] = defaultdict(list)
    for r in _rows(ts, "compare_stage_samples"):
        samples[str(r["stage"])].append(r["dur_ns"] / 1e6)
    stages = [StageStats(**{k: r[k] for k in StageStats.__dataclass_fields__}) for r in stats]
    # time to first token / per output token, as pseudo-stages: `ttft.p99_ms`, `tpot.p50_ms`
    for name, values in _generation_samples(ts, opts).items():
        if name not in samples:
            samples[name] = values
            stages.append(_sample_stats(name, values))
    return tuple(stages), {k: np.asarray(v, dtype=np.float64) for k, v in samples.items()}


def _serving(ts: TraceSet, opts: ServingOptions = NO_SERVING_OPTIONS) -> dict[str, float] | None:
    """SERVING_METRICS of the served requests (summed over the traces of the view: requests/s
    of each trace added, percentiles of the first trace that has any); `opts`: --warmup and
    the --slo targets of within_slo and goodput_per_s."""
    out: dict[str, float] | None = None
    for t in (r["trace_id"] for r in ts.sql("SELECT trace_id FROM traces ORDER BY 1").to_dicts()):
        parts = {r["part"]: r for r in ts.query_dicts(
            "serving_waterfall", trace_id=t, **opts.params({"warmup"}))}  # fmt: skip
        if not parts:
            continue
        (tp,) = ts.query_dicts("serving_throughput", trace_id=t,
                               **opts.params({p.name for p in load_query(
                                   "serving_throughput").params}))  # fmt: skip
        if out is not None:
            out["requests_per_s"] += float(tp["requests_per_s"] or 0.0)
            continue
        out = {
            "requests_per_s": float(tp["requests_per_s"] or 0.0),
            "mean_batch": float(tp["mean_batch"] or 0.0),
            "queue_p50_ms": float(parts["queue"]["p50_ms"]),
            "queue_p99_ms": float(parts["queue"]["p99_ms"]),
            "end_to_end_p50_ms": float(parts["end_to_end"]["p50_ms"]),
            "end_to_end_p99_ms": float(parts["end_to_end"]["p99_ms"]),
        }
        if tp.get("ttft_p50_ms") is not None:  # (TPOT 0 when no request has a decode step)
            out.update({k: float(tp[k] or 0.0) for k in GENERATION_SERVING})
        if opts.slos:
            out.update({k: float(tp[k] or 0.0) for k in GOODPUT})
    return out


def _kernels(rows: list[dict[str, Any]], multi_trace: bool) -> tuple[ItemStats, ...]:
    by_name: dict[str, dict[str, list[float]]] = defaultdict(dict)
    maxes: dict[str, float] = defaultdict(float)
    for r in rows:
        dev = f"GPU {r['device']}" if r["device"] >= 0 else "GPU ?"
        if multi_trace:
            dev = f"trace {r['trace_id']} {dev}"
        acc = by_name[r["name"]].setdefault(dev, [0.0, 0.0, 0.0])
        acc[0] += r["count"]
        acc[1] += r["total_ms"]
        acc[2] += r["sq_ms2"]
        maxes[r["name"]] = max(maxes[r["name"]], r["max_ms"])
    out = []
    for name, devs in by_name.items():
        per = tuple((d, Calls(*v)) for d, v in sorted(devs.items()))
        total = Calls(*(sum(c[k] for c in devs.values()) for k in range(3)))
        out.append(ItemStats(name, "", total, maxes[name], None, per))
    out.sort(key=lambda i: (-i.total_ms, i.name))
    return tuple(out)


def _ops(rows: list[dict[str, Any]]) -> tuple[ItemStats, ...]:
    acc: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        a = acc.setdefault((r["name"], r["shape"]), [0.0, 0.0, 0.0, 0.0, 0.0])
        a[0] += r["count"]
        a[1] += r["total_ms"]
        a[2] += r["sq_ms2"]
        a[3] = max(a[3], r["max_ms"])
        a[4] += r["self_ms"]
    out = [ItemStats(n, s, Calls(a[0], a[1], a[2]), a[3], a[4]) for (n, s), a in acc.items()]
    out.sort(key=lambda i: (-i.total_ms, i.name, i.shape))
    return tuple(out)


def _work(ts: TraceSet, per: str | None) -> Work:
    overview = _rows(ts, "compare_gpu_busy")
    its = sum(r["ranges"] for r in ts.query("range_count", range_name=per).to_dicts()) if per else 0
    return Work(sum(r["requests"] for r in overview), sum(r["span_ms"] for r in overview), its)


def _mean_work(works: Sequence[Work], n: int) -> Work:
    return Work(
        sum(w.requests for w in works) / n,
        sum(w.span_ms for w in works) / n,
        sum(w.iterations for w in works) / n,
    )


def _busy(rows: list[dict[str, Any]], multi_trace: bool) -> tuple[DeviceBusy, ...]:
    acc: dict[str, list[float]] = {}
    for r in rows:
        if r["device"] is None:
            dev = "all"
        else:
            dev = f"GPU {r['device']}" if r["device"] >= 0 else "GPU ?"
            if multi_trace:
                dev = f"trace {r['trace_id']} {dev}"
        a = acc.setdefault(dev, [0.0, 0.0])
        a[0] += r["busy_ms"]
        a[1] += r["span_ms"] or 0.0
    order = sorted(acc, key=lambda d: (d == "all", d))
    return tuple(DeviceBusy(d, acc[d][0], acc[d][1]) for d in order)


def extract_run(
    views: RunViews,
    label: str = "",
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    per: str | None = None,
    serving: ServingOptions = NO_SERVING_OPTIONS,
) -> RunMetrics:
    """Metrics of one run, each group of figures read from the run's view for it."""
    opened: dict[tuple[Path, ...], TraceSet] = {}

    def ts(paths: tuple[Path, ...]) -> TraceSet:
        if paths not in opened:
            opened[paths] = open_traces(list(paths), stage_rules=stage_rules, refresh=refresh)
        return opened[paths]

    try:
        stages, samples = _stage_part(ts(views.requests), serving)
        served = _serving(ts(views.requests), serving)
        req = _rows(ts(views.requests), "compare_gpu_busy")
        gpu_over = _rows(ts(views.gpu), "compare_gpu_busy")
        multi = len(gpu_over) > 1
        kernels = _kernels(_rows(ts(views.gpu), "compare_kernels"), multi)
        busy = _busy(_rows(ts(views.gpu), "gpu_busy_by_device"), multi)
        ops_over = _rows(ts(views.ops), "compare_ops")
        ops_work = _work(ts(views.ops), per)
        gpu_work = _work(ts(views.gpu), per)
    finally:
        for t in opened.values():
            t.close()
    return RunMetrics(
        label=label,
        runs=(str(views.run),),
        stages=stages,
        ops=_ops(ops_over),
        kernels=kernels,
        requests=int(sum(r["requests"] for r in req)),
        request_ms=float(sum(r["request_ms"] for r in req)),
        span_ms=float(sum(r["span_ms"] for r in req)),
        gpu_busy_ms=float(sum(r["busy_ms"] for r in gpu_over)),
        gpu_devices=sum(int(r["devices"]) for r in gpu_over),
        devices=busy,
        gpu_work=gpu_work,
        ops_work=ops_work,
        views=tuple(v for v in (views.describe(),) if v),
        gpu_names=tuple(sorted({n for r in gpu_over for n in r["gpu_names"].split(", ") if n})),
        samples=samples,
        serving=served,
    )


def _mean_calls(cs: Sequence[Calls], n: int) -> Calls:
    return Calls(
        sum(c.count for c in cs) / n, sum(c.total_ms for c in cs) / n, sum(c.sq_ms2 for c in cs) / n
    )


def _pool_items(per_run: Sequence[tuple[ItemStats, ...]], n: int) -> tuple[ItemStats, ...]:
    groups: dict[tuple[str, str], list[ItemStats]] = defaultdict(list)
    for items in per_run:
        for i in items:
            groups[(i.name, i.shape)].append(i)
    out = []
    for (name, shape), its in groups.items():
        devs: dict[str, list[Calls]] = defaultdict(list)
        for i in its:
            for d, c in i.devices:
                devs[d].append(c)
        own = [i.self_ms for i in its if i.self_ms is not None]
        out.append(
            ItemStats(
                name,
                shape,
                _mean_calls([i.calls for i in its], n),
                max(i.max_ms for i in its),
                sum(own) / n if own else None,
                tuple((d, _mean_calls(c, n)) for d, c in sorted(devs.items())),
            )
        )
    out.sort(key=lambda i: (-i.total_ms, i.name, i.shape))
    return tuple(out)


def _pool_busy(per_run: Sequence[tuple[DeviceBusy, ...]], n: int) -> tuple[DeviceBusy, ...]:
    acc: dict[str, list[float]] = {}
    for busy in per_run:
        for b in busy:
            a = acc.setdefault(b.device, [0.0, 0.0])
            a[0] += b.busy_ms
            a[1] += b.span_ms
    order = sorted(acc, key=lambda d: (d == "all", d))
    return tuple(DeviceBusy(d, acc[d][0] / n, acc[d][1] / n) for d in order)


def pool(
    runs: Sequence[RunMetrics],
    label: str,
    stages: tuple[StageStats, ...],
    samples: dict[str, np.ndarray],
) -> RunMetrics:
    """One side from its runs: sums of requests, means per run of everything else; stage
    statistics (over all requests of all runs) are computed by the caller in SQL."""
    n = len(runs)
    return RunMetrics(
        label=label,
        runs=tuple(r for m in runs for r in m.runs),
        stages=stages,
        ops=_pool_items([m.ops for m in runs], n),
        kernels=_pool_items([m.kernels for m in runs], n),
        requests=sum(m.requests for m in runs),
        request_ms=sum(m.request_ms for m in runs),
        span_ms=sum(m.span_ms for m in runs),
        gpu_busy_ms=sum(m.gpu_busy_ms for m in runs) / n,
        gpu_devices=max(m.gpu_devices for m in runs),
        devices=_pool_busy([m.devices for m in runs], n),
        gpu_work=_mean_work([m.gpu_work for m in runs], n),
        ops_work=_mean_work([m.ops_work for m in runs], n),
        views=tuple(v for m in runs for v in m.views),
        gpu_names=tuple(sorted({n for m in runs for n in m.gpu_names})),
        samples=samples,
        serving=_pool_serving([m.serving for m in runs]),
    )


def _pool_serving(per_run: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    """The runs' serving figures, each the mean over the runs (None unless every run has them)."""
    if not per_run or any(s is None for s in per_run):
        return None
    runs = [s for s in per_run if s]
    return {k: sum(s[k] for s in runs) / len(runs) for k in SERVING_METRICS
            if all(k in s for s in runs)}  # fmt: skip


def load_side(
    runs: Sequence[str | Path],
    label: str = "",
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    per_run: bool = True,
    per: str | None = None,
    serving: ServingOptions = NO_SERVING_OPTIONS,
) -> tuple[RunMetrics, tuple[RunMetrics, ...]]:
    """(pooled metrics over all `runs`, per-run metrics when there are several runs).

    Each run counts once: of a run seen by nsys and Kineto, requests and stages come from one
    view, kernels and GPU busy from one (nsys when it has GPU rows), ops from one. `per`
    names a range whose occurrences are counted as iterations (diff --per)."""
    views = [run_views(Path(r), stage_rules, refresh) for r in runs]
    each = [extract_run(v, str(v.run), stage_rules, refresh, per, serving) for v in views]
    if len(each) == 1:
        one = each[0]
        pooled = pool(each, label, one.stages, one.samples)
    else:
        req_files = [p for v in views for p in v.requests]
        with open_traces(req_files, stage_rules=stage_rules, refresh=refresh) as ts:
            stages, samples = _stage_part(ts, serving)
        pooled = pool(each, label, stages, samples)
    return pooled, (tuple(each) if per_run and len(each) > 1 else ())
