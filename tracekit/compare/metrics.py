"""Metric extraction for diff/check: stage latency, ops, kernels, GPU busy, throughput.

Every figure comes from the `queries/compare_*.sql` files run over the store tables (stages,
requests, events, traces), so users can reproduce any number by hand with `tracekit query`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracekit.errors import TraceFormatError
from tracekit.stages import StageRule
from tracekit.traceset import TraceSet, find_traces, open_traces

STAGE_METRICS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms", "share", "count")


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
class ItemStats:
    """An op (name + input shapes) or kernel (name, shape '') with its count and total time."""

    name: str
    shape: str
    count: float
    total_ms: float


@dataclass(frozen=True)
class RunMetrics:
    """Everything diff/check compare, for one run or the pool of several runs of one side.

    For a pool, stage percentiles are over all requests of all runs, while op/kernel counts
    and totals, GPU busy and span are means per run (so N vs M runs stay comparable).
    """

    label: str
    runs: tuple[str, ...]
    stages: tuple[StageStats, ...]
    ops: tuple[ItemStats, ...]
    kernels: tuple[ItemStats, ...]
    requests: int
    request_ms: float  # summed request wall time, all runs
    span_ms: float  # summed trace span, all runs
    gpu_busy_ms: float  # per run
    gpu_devices: int
    samples: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

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
        """GPU busy / (span x devices with activity)."""
        n = len(self.runs) or 1
        window = self.span_ms / n * max(self.gpu_devices, 1)
        return self.gpu_busy_ms / window if window > 0 and self.gpu_devices else None


def expand_runs(path: str | Path) -> list[Path]:
    """One input → its runs: a trace/store file or a run folder is one run; a folder with
    no traces of its own whose subfolders hold traces is a folder of runs (sorted)."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such file or directory")
    if not p.is_dir():
        return [p]
    try:
        find_traces(p)
        return [p]
    except TraceFormatError:
        pass
    runs = []
    for sub in sorted(q for q in p.iterdir() if q.is_dir()):
        try:
            find_traces(sub)
        except TraceFormatError:
            continue
        runs.append(sub)
    if not runs:
        raise TraceFormatError(f"{p}: no trace files here nor in its subfolders (runs)")
    return runs


def extract_metrics(traces: TraceSet, label: str = "", runs: Sequence[str] = (),
                    n_runs: int = 1) -> RunMetrics:  # fmt: skip
    """Metrics over every trace in `traces`; per-run figures are divided by `n_runs`."""
    stats = traces.query("compare_stage_stats")
    samples_df = traces.query("compare_stage_samples")
    ops = traces.query("compare_ops")
    kernels = traces.query("compare_kernels")
    gpu = traces.query("compare_gpu_busy")
    samples = {
        str(stage): np.asarray(part["dur_ns"].to_numpy(), dtype=np.float64) / 1e6
        for (stage,), part in samples_df.partition_by("stage", as_dict=True).items()
    }
    n = max(n_runs, 1)
    return RunMetrics(
        label=label,
        runs=tuple(runs),
        stages=tuple(
            StageStats(**{k: r[k] for k in StageStats.__dataclass_fields__})
            for r in stats.to_dicts()
        ),  # fmt: skip
        ops=tuple(
            ItemStats(r["name"], r["shape"], r["count"] / n, r["total_ms"] / n)
            for r in ops.to_dicts()
        ),  # fmt: skip
        kernels=tuple(
            ItemStats(r["name"], "", r["count"] / n, r["total_ms"] / n) for r in kernels.to_dicts()
        ),  # fmt: skip
        requests=int(gpu["requests"].sum()),
        request_ms=float(gpu["request_ms"].sum()),
        span_ms=float(gpu["span_ms"].sum()),
        gpu_busy_ms=float(gpu["busy_ms"].sum()) / n,
        gpu_devices=max((int(v) for v in gpu["devices"].to_list()), default=0),
        samples=samples,
    )


def load_side(runs: Sequence[str | Path], label: str = "",
              stage_rules: Sequence[StageRule] | None = None, refresh: bool = False,
              per_run: bool = True) -> tuple[RunMetrics, tuple[RunMetrics, ...]]:  # fmt: skip
    """(pooled metrics over all `runs`, per-run metrics when there are several runs)."""
    names = tuple(str(r) for r in runs)
    with open_traces(list(runs), stage_rules=stage_rules, refresh=refresh) as ts:
        pooled = extract_metrics(ts, label, names, len(runs))
    each: list[RunMetrics] = []
    if per_run and len(runs) > 1:
        for r in runs:
            with open_traces([r], stage_rules=stage_rules, refresh=refresh) as ts:
                each.append(extract_metrics(ts, str(r), (str(r),), 1))
    return pooled, tuple(each)
