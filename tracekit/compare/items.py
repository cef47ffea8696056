"""Ops and kernels compared per call, with the change split into "more calls" and "slower calls".

For each item (an op by name and input shapes, on inclusive time; a kernel by name):
count, total and mean per call on both sides (per run), and

    Δtotal = Δcount · mean_before  +  count_after · Δmean      (exact)

the first part from the number of calls, the second from the time per call. Where the two
sides hold different amounts of work, the same split is made per unit of work (per request,
or per second of trace span when a side has no requests): counts become calls per unit.
Rows are ranked by the per-call part per unit, not by the raw total. A per-call change is
*beyond noise* when the 95% interval of Δmean (Welch: ±1.96·√(s²_b/n_b + s²_a/n_a) over the
calls) excludes 0 and, with several runs per side, |Δmean| exceeds the run-to-run spread of
the per-call mean; it is *material* when |Δmean| ≥ min_change of the mean before (2% by
default: clocks and neighbours move kernels that much between runs). Status: `slower` /
`faster` (material and beyond noise), `unsure` (material, within noise), `same`, `appeared`,
`vanished`. docs/diff-check.md has the method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.compare.metrics import Calls, ItemStats, Work
from tracekit.errors import ConfigError

MIN_CHANGE = 0.02
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Unit:
    """The unit of work items are normalized by, with how many each side holds per run."""

    name: str  # "request" | "s of trace span" | "'NAME' range" (diff --per NAME)
    before: float
    after: float

    @property
    def label(self) -> str:
        return f"per {self.name}"


@dataclass(frozen=True)
class DeviceChange:
    device: str
    before_count: float
    after_count: float
    before_mean_ms: float | None
    after_mean_ms: float | None


@dataclass(frozen=True)
class ItemDelta:
    """One op (name + shape, inclusive time) or kernel: per call, per run and per unit of work."""

    name: str
    shape: str
    status: str  # slower | faster | unsure | same | appeared | vanished
    before_count: float  # calls per run
    after_count: float
    before_ms: float  # total per run
    after_ms: float
    before_mean_ms: float | None  # per call
    after_mean_ms: float | None
    delta_ms: float  # after_ms - before_ms
    count_part_ms: float  # Δcount · mean_before (per run)
    time_part_ms: float  # count_after · Δmean (per run); count_part + time_part = delta
    per_call_change: float | None  # Δmean / mean_before
    ci_low_ms: float | None  # 95% interval of Δmean
    ci_high_ms: float | None
    spread_ms: float | None  # run-to-run spread of the per-call mean (several runs)
    beyond_noise: bool
    unit: str  # what the *_per_unit figures are per
    delta_per_unit_ms: float
    count_part_per_unit_ms: float  # Δ(calls per unit) · mean_before
    time_part_per_unit_ms: float  # calls per unit after · Δmean
    before_max_ms: float = 0.0
    after_max_ms: float = 0.0
    before_self_ms: float | None = None  # ops: self time per run (no direct children)
    after_self_ms: float | None = None
    devices: tuple[DeviceChange, ...] = ()

    @property
    def weight_ms(self) -> float:
        """What ranks the row: the per-call part per unit (whole change when (dis)appeared)."""
        if self.status in ("appeared", "vanished"):
            return self.delta_per_unit_ms
        return self.time_part_per_unit_ms


def welch_ci(b: Calls, a: Calls, runs_b: int = 1, runs_a: int = 1) -> tuple[float, float] | None:
    """95% interval of mean_after - mean_before over the calls (normal approximation)."""
    nb, na = b.count * runs_b, a.count * runs_a
    if nb < 2 or na < 2:
        return None
    d = a.mean_ms - b.mean_ms
    half = Z95 * math.sqrt(b.var_ms2 / nb + a.var_ms2 / na)
    return d - half, d + half


def _spread(key: tuple[str, str], runs: Sequence[Sequence[ItemStats]]) -> float | None:
    means = [i.mean_ms for items in runs for i in items if (i.name, i.shape) == key and i.count]
    return max(means) - min(means) if len(means) >= 2 else None


def _devices(b: ItemStats | None, a: ItemStats | None) -> tuple[DeviceChange, ...]:
    bd = dict(b.devices) if b else {}
    ad = dict(a.devices) if a else {}
    out = []
    for d in sorted(bd.keys() | ad.keys()):
        cb, ca = bd.get(d), ad.get(d)
        out.append(
            DeviceChange(
                d,
                cb.count if cb else 0.0,
                ca.count if ca else 0.0,
                cb.mean_ms if cb and cb.count else None,
                ca.mean_ms if ca and ca.count else None,
            )
        )
    return tuple(out)


def compare_item(
    b: ItemStats | None,
    a: ItemStats | None,
    unit: Unit,
    b_runs: Sequence[Sequence[ItemStats]] = (),
    a_runs: Sequence[Sequence[ItemStats]] = (),
    min_change: float = MIN_CHANGE,
) -> ItemDelta:
    """The per-call comparison of one item (either side may be missing)."""
    item = a if a is not None else b
    assert item is not None
    key = (item.name, item.shape)
    cb, ca = (b.count if b else 0.0), (a.count if a else 0.0)
    tb, ta = (b.total_ms if b else 0.0), (a.total_ms if a else 0.0)
    mb = b.mean_ms if b and b.count else None
    ma = a.mean_ms if a and a.count else None
    ub, ua = unit.before or 1.0, unit.after or 1.0
    # Missing side: no per-call change; the whole change is in the number of calls.
    ref = mb if mb is not None else (ma or 0.0)
    dmean = (ma - mb) if (ma is not None and mb is not None) else 0.0
    count_part, time_part = (ca - cb) * ref, ca * dmean
    count_pu, time_pu = (ca / ua - cb / ub) * ref, (ca / ua) * dmean
    ci = spread = None
    beyond = False
    if b is None or not cb:
        status = "appeared"
    elif a is None or not ca:
        status = "vanished"
    else:
        ci = welch_ci(b.calls, a.calls, max(len(b_runs), 1), max(len(a_runs), 1))
        spreads = [s for s in (_spread(key, b_runs), _spread(key, a_runs)) if s is not None]
        spread = max(spreads) if spreads else None
        excl = ci is not None and (ci[0] > 0 or ci[1] < 0)
        beyond = excl and (spread is None or abs(dmean) > spread)
        material = mb is not None and mb > 0 and abs(dmean) >= min_change * mb
        if not material:
            status = "same"
        elif not beyond:
            status = "unsure"
        else:
            status = "slower" if dmean > 0 else "faster"
    return ItemDelta(
        name=item.name,
        shape=item.shape,
        status=status,
        before_count=cb,
        after_count=ca,
        before_ms=tb,
        after_ms=ta,
        before_mean_ms=mb,
        after_mean_ms=ma,
        delta_ms=ta - tb,
        count_part_ms=count_part,
        time_part_ms=time_part,
        per_call_change=(dmean / mb) if mb and ma is not None else None,
        ci_low_ms=ci[0] if ci else None,
        ci_high_ms=ci[1] if ci else None,
        spread_ms=spread,
        beyond_noise=beyond or status in ("appeared", "vanished"),
        unit=unit.name,
        delta_per_unit_ms=ta / ua - tb / ub,
        count_part_per_unit_ms=count_pu,
        time_part_per_unit_ms=time_pu,
        before_max_ms=b.max_ms if b else 0.0,
        after_max_ms=a.max_ms if a else 0.0,
        before_self_ms=b.self_ms if b else None,
        after_self_ms=a.self_ms if a else None,
        devices=_devices(b, a),
    )


ORDER = {"slower": 0, "faster": 0, "appeared": 0, "vanished": 0, "unsure": 0, "same": 1}


def diff_items(
    before: Sequence[ItemStats],
    after: Sequence[ItemStats],
    unit: Unit,
    b_runs: Sequence[Sequence[ItemStats]] = (),
    a_runs: Sequence[Sequence[ItemStats]] = (),
    min_change: float = MIN_CHANGE,
) -> tuple[ItemDelta, ...]:
    """Match by (name, shape). Rows that moved per call (or appeared, vanished) first, by
    |per-call part per unit|; then the same-per-call rows by |Δtotal| (their change is calls)."""
    bmap = {(i.name, i.shape): i for i in before}
    amap = {(i.name, i.shape): i for i in after}
    out = [
        compare_item(bmap.get(k), amap.get(k), unit, b_runs, a_runs, min_change)
        for k in bmap.keys() | amap.keys()
    ]
    out.sort(
        key=lambda i: (
            ORDER[i.status],
            -abs(i.weight_ms if ORDER[i.status] == 0 else i.delta_per_unit_ms),
            i.name,
            i.shape,
        )
    )
    return tuple(out)


def work_unit(b: Work, a: Work, per: str | None = None) -> Unit:
    """Per `per` range (an iteration) when asked, else per request when both sides have
    requests, else per second of trace span."""
    if per is not None:
        for side, w in (("baseline", b), ("candidate", a)):
            if not w.iterations:
                raise ConfigError(
                    f"--per {per!r}: the {side} has no range of that name "
                    "(exact NVTX message or record_function name)"
                )
        return Unit(f"{per!r} range", b.iterations, a.iterations)
    if b.requests > 0 and a.requests > 0:
        return Unit("request", b.requests, a.requests)
    return Unit("s of trace span", b.span_ms / 1e3, a.span_ms / 1e3)
