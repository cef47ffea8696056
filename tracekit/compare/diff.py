"""`diff_runs(baseline, candidate)`: what changed between two runs (or two sets of runs).

Stage latency (p50/p90/p99/mean, incl. `end_to_end` and `unattributed`), throughput, GPU
busy per device, and ops/kernels compared per call (tracekit.compare.items) with the change
split into more calls and slower calls, normalized per unit of work; a headline names the
changes that matter (tracekit.compare.headline). With a bootstrap over requests (fixed seed)
and, when a side has several runs, the run-to-run spread, each stage change says whether it
exceeds the noise. docs/diff-check.md describes the method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tracekit.compare.headline import headline
from tracekit.compare.items import MIN_CHANGE, diff_items, work_unit
from tracekit.compare.metrics import SERVING_METRICS, DeviceBusy, RunMetrics, load_side
from tracekit.compare.result import (
    DeviceDelta,
    DiffResult,
    MetricDelta,
    Noise,
    Side,
    StageDelta,
)
from tracekit.compare.views import expand_runs
from tracekit.slo import NO_SERVING_OPTIONS, ServingOptions
from tracekit.store.stages import StageRule

DIFF_METRICS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
NOISE_METRICS: dict[str, float | None] = {"p50_ms": 50.0, "p99_ms": 99.0, "mean_ms": None}
RESAMPLES = 1000
SEED = 0


def _delta(
    metric: str, before: float | None, after: float | None, noise: Noise | None = None
) -> MetricDelta:
    if before is None or after is None:
        return MetricDelta(metric, before, after, None, None, noise)
    ratio = after / before if before else None
    return MetricDelta(metric, before, after, after - before, ratio, noise)


def _stat(q: float | None) -> Callable[[np.ndarray], np.ndarray]:
    if q is None:
        return lambda x: np.mean(x, axis=1)
    return lambda x: np.percentile(x, q, axis=1)


def bootstrap_delta_ci(
    before: np.ndarray,
    after: np.ndarray,
    q: float | None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """95% interval of stat(after) - stat(before), resampling requests; stat is the q-th
    percentile, or the mean when q is None."""
    rng = np.random.default_rng(seed)
    stat = _stat(q)
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 2_000_000 // max(len(before), len(after), 1)))
    for lo in range(0, resamples, chunk):
        k = min(chunk, resamples - lo)
        b = before[rng.integers(0, len(before), (k, len(before)))]
        a = after[rng.integers(0, len(after), (k, len(after)))]
        out[lo : lo + k] = stat(a) - stat(b)
    low, high = np.percentile(out, [2.5, 97.5])
    return float(low), float(high)


def _spread(per_run: Sequence[RunMetrics], stage: str, metric: str) -> float | None:
    vals = [s.metric(metric) for r in per_run if (s := r.stage(stage)) is not None]
    return max(vals) - min(vals) if len(vals) >= 2 else None


def _stage_delta(
    stage: str,
    b: RunMetrics,
    a: RunMetrics,
    b_runs: Sequence[RunMetrics],
    a_runs: Sequence[RunMetrics],
    resamples: int,
    seed: int,
) -> StageDelta:
    sb, sa = b.stage(stage), a.stage(stage)
    metrics = []
    for m in DIFF_METRICS:
        before = sb.metric(m) if sb else None
        after = sa.metric(m) if sa else None
        noise = None
        xb, xa = b.samples.get(stage), a.samples.get(stage)
        if m in NOISE_METRICS and xb is not None and xa is not None and len(xb) and len(xa):
            low, high = bootstrap_delta_ci(xb, xa, NOISE_METRICS[m], resamples, seed)
            spreads = [
                s for s in (_spread(b_runs, stage, m), _spread(a_runs, stage, m)) if s is not None
            ]
            spread = max(spreads) if spreads else None
            d = (after or 0.0) - (before or 0.0)
            exceeds = (low > 0 or high < 0) and (spread is None or abs(d) > spread)
            noise = Noise(low, high, spread, exceeds)
        metrics.append(_delta(m, before, after, noise))
    return StageDelta(stage, sb.count if sb else 0, sa.count if sa else 0, tuple(metrics))


def _side(m: RunMetrics) -> Side:
    return Side(
        m.label,
        m.runs,
        m.requests,
        m.rps_request_time,
        m.rps_span,
        m.gpu_busy_ms,
        m.gpu_utilization,
        m.views,
        m.gpu_names,
    )


def _device_pairs(
    b: Sequence[DeviceBusy], a: Sequence[DeviceBusy]
) -> list[tuple[str, DeviceBusy | None, DeviceBusy | None]]:
    bd = {d.device: d for d in b if d.device != "all"}
    ad = {d.device: d for d in a if d.device != "all"}
    pairs: list[tuple[str, DeviceBusy | None, DeviceBusy | None]]
    if bd.keys() != ad.keys() and len(bd) == len(ad):
        # Different device ids on each side (another machine): pair them in order.
        pairs = [
            (f"{x} → {y}" if x != y else x, bd[x], ad[y])
            for x, y in zip(sorted(bd), sorted(ad), strict=True)
        ]
    else:
        pairs = [(k, bd.get(k), ad.get(k)) for k in sorted(bd.keys() | ad.keys())]
    ball = next((d for d in b if d.device == "all"), None)
    aall = next((d for d in a if d.device == "all"), None)
    if ball or aall:
        pairs.append(("all", ball, aall))
    return pairs


def _devices(b: RunMetrics, a: RunMetrics) -> tuple[DeviceDelta, ...]:
    out = []
    for label, x, y in _device_pairs(b.devices, a.devices):
        out.append(
            DeviceDelta(
                label,
                _delta("busy_ms", x.busy_ms if x else 0.0, y.busy_ms if y else 0.0),
                _delta("utilization", x.utilization if x else None, y.utilization if y else None),
            )
        )
    return tuple(out)


def _serving_deltas(b: RunMetrics, a: RunMetrics) -> tuple[MetricDelta, ...]:
    """A batched server's figures (SERVING_METRICS), when both sides served requests."""
    if b.serving is None or a.serving is None:
        return ()
    return tuple(_delta(k, b.serving.get(k), a.serving.get(k)) for k in SERVING_METRICS
                 if k in b.serving or k in a.serving)  # fmt: skip


def compare_metrics(
    b: RunMetrics,
    a: RunMetrics,
    b_runs: Sequence[RunMetrics] = (),
    a_runs: Sequence[RunMetrics] = (),
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_change: float = MIN_CHANGE,
    per: str | None = None,
) -> DiffResult:
    """The diff of two already-extracted sides."""
    names = [s.stage for s in b.stages] + [s.stage for s in a.stages if not b.stage(s.stage)]
    order = {"end_to_end": 0, "unattributed": 2}
    names.sort(key=lambda s: (order.get(s, 1), s))
    stages = tuple(_stage_delta(s, b, a, b_runs, a_runs, resamples, seed) for s in names)
    k_unit = work_unit(b.gpu_work, a.gpu_work, per)
    o_unit = work_unit(b.ops_work, a.ops_work, per)
    kernels = diff_items(
        b.kernels,
        a.kernels,
        k_unit,
        [r.kernels for r in b_runs],
        [r.kernels for r in a_runs],
        min_change,
    )
    ops = diff_items(
        b.ops, a.ops, o_unit, [r.ops for r in b_runs], [r.ops for r in a_runs], min_change
    )
    devices = _devices(b, a)
    serving = _serving_deltas(b, a)
    return DiffResult(
        baseline=_side(b),
        candidate=_side(a),
        headline=headline(
            stages,
            kernels,
            ops,
            k_unit,
            o_unit,
            devices,
            min_change,
            (b.gpu_names, a.gpu_names),
            serving,
        ),
        stages=stages,
        ops=ops,
        kernels=kernels,
        ops_unit=o_unit,
        kernels_unit=k_unit,
        throughput=(
            _delta("rps_request_time", b.rps_request_time, a.rps_request_time),
            _delta("rps_span", b.rps_span, a.rps_span),
            *serving,
        ),
        gpu=(
            _delta("gpu_busy_ms", b.gpu_busy_ms, a.gpu_busy_ms),
            _delta("gpu_utilization", b.gpu_utilization, a.gpu_utilization),
        ),
        devices=devices,
        min_change=min_change,
        resamples=resamples,
        seed=seed,
    )


def diff_runs(
    baseline_paths: Sequence[str | Path],
    candidate_paths: Sequence[str | Path],
    stage_rules: Sequence[StageRule] | None = None,
    refresh: bool = False,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_change: float = MIN_CHANGE,
    per: str | None = None,
    serving: ServingOptions = NO_SERVING_OPTIONS,
) -> DiffResult:
    """Compare runs (`serving`: --warmup and --slo for a batched server's figures). Each path
    is a trace/store file, a run folder, or a folder of runs;
    several runs per side are pooled (see docs/diff-check.md). Ops and kernels are compared
    per request, per occurrence of the range `per` when given, else per second of span."""
    b_list = [r for p in baseline_paths for r in expand_runs(p)]
    a_list = [r for p in candidate_paths for r in expand_runs(p)]
    b, b_runs = load_side(b_list, _label(b_list), stage_rules, refresh, per=per, serving=serving)
    a, a_runs = load_side(a_list, _label(a_list), stage_rules, refresh, per=per, serving=serving)
    return compare_metrics(b, a, b_runs, a_runs, resamples, seed, min_change, per)


def _run_name(run: Path) -> str:
    # A capture's files have fixed names (torch.pt.trace.json, nsys.sqlite): its folder
    # says which run it is.
    if run.is_file() and (run.parent / "capture.json").is_file():
        return f"{run.parent.name}/{run.name}"
    return run.name


def _label(runs: Sequence[Path]) -> str:
    if len(runs) == 1:
        return _run_name(runs[0])
    return f"{_run_name(runs[0])} (+{len(runs) - 1} runs)"
