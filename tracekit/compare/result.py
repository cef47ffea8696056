"""The diff's result types: what `tracekit.compare.diff` computes, the headline composes
(tracekit.compare.headline) and the renderers format (tracekit.compare.render). Types only, so
that computing, composing and rendering import them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.compare.items import ItemDelta, Unit


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
class DeviceDelta:
    """GPU busy of one device (union of its kernel/memcpy/memset intervals) per run, before
    and after; device 'all' sums the devices (device-time, as the report counts it)."""

    device: str  # 'GPU 0', or 'GPU 3 → GPU 1' when the sides ran on different devices
    busy: MetricDelta  # ms per run
    utilization: MetricDelta  # busy / trace span


@dataclass(frozen=True)
class Side:
    label: str
    runs: tuple[str, ...]
    requests: int
    rps_request_time: float | None  # requests / summed request wall time
    rps_span: float | None  # requests / summed trace span
    gpu_busy_ms: float  # per run, device-time: the devices' busy times summed
    gpu_utilization: float | None
    views: tuple[str, ...] = ()  # per run: which trace gave which figures
    gpu_names: tuple[str, ...] = ()  # GPU models the traces record


@dataclass(frozen=True)
class Headline:
    """First in every format: the work compared, the changes that matter, what else."""

    context: str  # e.g. end-to-end per request, or GPU busy per second of span
    entries: tuple[str, ...]  # one sentence per change, most material first
    note: str  # what the rest did ("everything else within noise"...)


@dataclass(frozen=True)
class DiffResult:
    """The comparison, ready for a renderer (tracekit.compare.render)."""

    baseline: Side
    candidate: Side
    headline: Headline
    stages: tuple[StageDelta, ...]
    ops: tuple[ItemDelta, ...]  # changed first, by |per-call part per unit|
    kernels: tuple[ItemDelta, ...]
    ops_unit: Unit
    kernels_unit: Unit
    throughput: tuple[MetricDelta, ...]  # rps_request_time, rps_span (+ SERVING_METRICS)
    gpu: tuple[MetricDelta, ...]  # gpu_busy_ms (any device), gpu_utilization
    devices: tuple[DeviceDelta, ...]
    min_change: float
    resamples: int
    seed: int
