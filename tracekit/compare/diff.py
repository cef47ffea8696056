"""`diff_runs(baseline, candidate)`: what changed between two runs (or two sets of runs).

Stage latency (p50/p90/p99/mean, incl. `end_to_end` and `unattributed`), throughput, GPU
busy, and ops/kernels that grew, shrank, appeared or vanished. With a bootstrap over
requests (fixed seed) and, when a side has several runs, the run-to-run spread, each p50/p99
change says whether it exceeds the noise. docs/diff-check.md describes the method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracekit.compare.metrics import ItemStats, RunMetrics, expand_runs, load_side
from tracekit.stages import StageRule

DIFF_METRICS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
NOISE_METRICS = {"p50_ms": 50.0, "p99_ms": 99.0}
RESAMPLES = 1000
SEED = 0


@dataclass(frozen=True)
class Noise:
    """Bootstrap 95% interval of the change and the run-to-run spread."""

    ci_low: float  # 2.5th percentile of bootstrapped (after - before)
    ci_high: float  # 97.5th percentile
    spread: float | None  # max over sides of (max - min of the per-run values); None: 1 run each
    exceeds: bool  # interval excludes 0 and |delta| > spread (when known)


@dataclass(frozen=True)
class MetricDelta:
    metric: str
    before: float | None
    after: float | None
    delta: float | None  # after - before
    ratio: float | None  # after / before
    noise: Noise | None = None


@dataclass(frozen=True)
class StageDelta:
    stage: str
    before_count: int
    after_count: int
    metrics: tuple[MetricDelta, ...]

    def metric(self, name: str) -> MetricDelta:
        return next(m for m in self.metrics if m.metric == name)


@dataclass(frozen=True)
class ItemDelta:
    """One op (name + shape) or kernel: per-run count and total time before and after."""

    name: str
    shape: str
    status: str  # grew | shrank | appeared | vanished | unchanged
    before_count: float
    after_count: float
    before_ms: float
    after_ms: float
    delta_ms: float
    ratio: float | None


@dataclass(frozen=True)
class Side:
    label: str
    runs: tuple[str, ...]
    requests: int
    rps_request_time: float | None  # requests / summed request wall time
    rps_span: float | None  # requests / summed trace span
    gpu_busy_ms: float  # per run
    gpu_utilization: float | None


@dataclass(frozen=True)
class DiffResult:
    """The comparison, ready for a renderer (tracekit.compare.render)."""

    baseline: Side
    candidate: Side
    stages: tuple[StageDelta, ...]
    ops: tuple[ItemDelta, ...]  # sorted by |delta_ms|, largest first
    kernels: tuple[ItemDelta, ...]
    throughput: tuple[MetricDelta, ...]  # rps_request_time, rps_span
    gpu: tuple[MetricDelta, ...]  # gpu_busy_ms, gpu_utilization
    resamples: int
    seed: int


def _delta(metric: str, before: float | None, after: float | None,
           noise: Noise | None = None) -> MetricDelta:  # fmt: skip
    if before is None or after is None:
        return MetricDelta(metric, before, after, None, None, noise)
    ratio = after / before if before else None
    return MetricDelta(metric, before, after, after - before, ratio, noise)


def bootstrap_delta_ci(
    before: np.ndarray, after: np.ndarray, q: float, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """95% interval of percentile_q(after) - percentile_q(before), resampling requests."""
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 2_000_000 // max(len(before), len(after), 1)))
    for lo in range(0, resamples, chunk):
        k = min(chunk, resamples - lo)
        b = before[rng.integers(0, len(before), (k, len(before)))]
        a = after[rng.integers(0, len(after), (k, len(after)))]
        out[lo : lo + k] = np.percentile(a, q, axis=1) - np.percentile(b, q, axis=1)
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
            spreads = [s for s in (_spread(b_runs, stage, m), _spread(a_runs, stage, m))
                       if s is not None]  # fmt: skip
            spread = max(spreads) if spreads else None
            d = (after or 0.0) - (before or 0.0)
            exceeds = (low > 0 or high < 0) and (spread is None or abs(d) > spread)
            noise = Noise(low, high, spread, exceeds)
        metrics.append(_delta(m, before, after, noise))
    return StageDelta(stage, sb.count if sb else 0, sa.count if sa else 0, tuple(metrics))


def diff_items(before: Sequence[ItemStats], after: Sequence[ItemStats]) -> tuple[ItemDelta, ...]:
    """Match by (name, shape); sorted by |change| then name."""
    bmap = {(i.name, i.shape): i for i in before}
    amap = {(i.name, i.shape): i for i in after}
    out = []
    for key in bmap.keys() | amap.keys():
        b, a = bmap.get(key), amap.get(key)
        bms, ams = (b.total_ms if b else 0.0), (a.total_ms if a else 0.0)
        d = ams - bms
        if b is None:
            status = "appeared"
        elif a is None:
            status = "vanished"
        elif math.isclose(ams, bms, rel_tol=1e-9, abs_tol=1e-9):
            status = "unchanged"
        else:
            status = "grew" if d > 0 else "shrank"
        out.append(ItemDelta(key[0], key[1], status, b.count if b else 0, a.count if a else 0,
                             bms, ams, d, ams / bms if bms else None))  # fmt: skip
    out.sort(key=lambda i: (-abs(i.delta_ms), i.name, i.shape))
    return tuple(out)


def _side(m: RunMetrics) -> Side:
    return Side(m.label, m.runs, m.requests, m.rps_request_time, m.rps_span, m.gpu_busy_ms,
                m.gpu_utilization)  # fmt: skip


def compare_metrics(b: RunMetrics, a: RunMetrics, b_runs: Sequence[RunMetrics] = (),
                    a_runs: Sequence[RunMetrics] = (), resamples: int = RESAMPLES,
                    seed: int = SEED) -> DiffResult:  # fmt: skip
    """The diff of two already-extracted sides."""
    names = [s.stage for s in b.stages] + [s.stage for s in a.stages if not b.stage(s.stage)]
    order = {"end_to_end": 0, "unattributed": 2}
    names.sort(key=lambda s: (order.get(s, 1), s))
    stages = tuple(_stage_delta(s, b, a, b_runs, a_runs, resamples, seed) for s in names)
    return DiffResult(
        baseline=_side(b),
        candidate=_side(a),
        stages=stages,
        ops=diff_items(b.ops, a.ops),
        kernels=diff_items(b.kernels, a.kernels),
        throughput=(
            _delta("rps_request_time", b.rps_request_time, a.rps_request_time),
            _delta("rps_span", b.rps_span, a.rps_span),
        ),  # fmt: skip
        gpu=(
            _delta("gpu_busy_ms", b.gpu_busy_ms, a.gpu_busy_ms),
            _delta("gpu_utilization", b.gpu_utilization, a.gpu_utilization),
        ),  # fmt: skip
        resamples=resamples,
        seed=seed,
    )


def diff_runs(baseline_paths: Sequence[str | Path], candidate_paths: Sequence[str | Path],
              stage_rules: Sequence[StageRule] | None = None, refresh: bool = False,
              resamples: int = RESAMPLES, seed: int = SEED) -> DiffResult:  # fmt: skip
    """Compare runs. Each path is a trace/store file, a run folder, or a folder of runs;
    several runs per side are pooled (see docs/diff-check.md)."""
    b_list = [r for p in baseline_paths for r in expand_runs(p)]
    a_list = [r for p in candidate_paths for r in expand_runs(p)]
    b, b_runs = load_side(b_list, _label(b_list), stage_rules, refresh)
    a, a_runs = load_side(a_list, _label(a_list), stage_rules, refresh)
    return compare_metrics(b, a, b_runs, a_runs, resamples, seed)


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
