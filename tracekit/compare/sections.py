"""The diff's tables: each section's rows built once from a DiffResult, as the one table model
(tracekit.present_table); the Markdown, terminal and HTML renderers draw them. Trace strings in
cells are untrusted: each format escapes them (present.md_cell, term_text, autoescape)."""

from __future__ import annotations

import math

from tracekit.compare.headline import short_name
from tracekit.compare.items import ItemDelta, Unit
from tracekit.compare.result import DiffResult, MetricDelta
from tracekit.present_table import Cell, Table, columns

TOP_ITEMS = 15
TABLE_NAME = 70


def _num(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:,.{digits}f}"


def count(v: float) -> str:
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def _signed(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:+,.{digits}f}"


def _pct(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v * 100:+.1f}%"


def _rel(m: MetricDelta) -> float | None:
    return m.delta / m.before if m.delta is not None and m.before else None


def _noise(m: MetricDelta) -> str:
    if m.noise is None:
        return ""
    n = m.noise
    spread = f", spread {_num(n.spread)}" if n.spread is not None else ""
    verdict = "beyond noise" if n.exceeds else "within noise"
    return f"95% CI [{_signed(n.ci_low)}, {_signed(n.ci_high)}]{spread}: {verdict}"


def _n(v: float | None, digits: int = 3, signed: bool = False) -> Cell:
    text = _signed(v, digits) if signed else _num(v, digits)
    return Cell(text, "" if v is None else repr(float(v)))


def _c(v: float) -> Cell:
    return Cell(count(v), repr(float(v)))


def _stage_section(d: DiffResult) -> Table:
    rows = []
    for s in d.stages:
        for m in s.metrics:
            rows.append(
                (
                    Cell(s.stage, s.stage, name=True),
                    Cell(m.metric),
                    _n(m.before),
                    _n(m.after),
                    _n(m.delta, signed=True),
                    Cell(_pct(_rel(m)), repr(_rel(m) or 0.0)),
                    Cell(_noise(m)),
                )
            )
    cols = columns(
        (
            ("stage", "stage", False),
            ("metric", "metric", False),
            ("before", "before", True),
            ("after", "after", True),
            ("delta", "delta", True),
            ("change", "change", True),
            ("noise", "noise", False),
        )
    )
    note = (
        "Per request, in ms. `end_to_end` is the request's duration, `unattributed` the "
        "part no stage covers."
    )
    return Table("stages", "Stages (ms per request)", cols, tuple(rows), note)


def _gpu_section(d: DiffResult) -> Table:
    rows = []
    for dev in d.devices:
        label = "all GPUs (sum of devices)" if dev.device == "all" else dev.device
        u = dev.utilization
        rows.append(
            (
                Cell(label),
                _n(dev.busy.before),
                _n(dev.busy.after),
                _n(dev.busy.delta, signed=True),
                Cell(_num_pct(u.before), repr(u.before or 0.0)),
                Cell(_num_pct(u.after), repr(u.after or 0.0)),
            )
        )
    cols = columns(
        (
            ("device", "device", False),
            ("busy_before", "busy ms before", True),
            ("busy_after", "busy ms after", True),
            ("busy_delta", "delta ms", True),
            ("utilization_before", "busy share before", True),
            ("utilization_after", "busy share after", True),
        )
    )
    note = (
        "GPU busy of a device = length of the union of its kernel, memcpy and memset "
        "intervals (streams overlap: never a plain sum), per run; share = busy / trace span. "
        "'all GPUs' sums the devices (device-time, as the report counts it); its share is "
        "busy / (span x devices)."
    )
    return Table("gpu", "GPU busy per device", cols, tuple(rows), note)


def _num_pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _throughput_section(d: DiffResult) -> Table:
    labels = {
        "rps_request_time": "requests/s (of summed request time)",
        "rps_span": "requests/s (of trace span)",
        "requests_per_s": "served requests/s (first arrival to last response)",
        "mean_batch": "mean batch size",
        "queue_p50_ms": "queue p50 ms (arrival to batch start)",
        "queue_p99_ms": "queue p99 ms",
        "end_to_end_p50_ms": "served end-to-end p50 ms",
        "end_to_end_p99_ms": "served end-to-end p99 ms",
        "ttft_p50_ms": "time to first token p50 ms",
        "ttft_p99_ms": "time to first token p99 ms",
        "tpot_p50_ms": "time per output token p50 ms",
        "tpot_p99_ms": "time per output token p99 ms",
        "output_tokens_per_s": "output tokens/s",
        "within_slo": "share of requests within the --slo targets",
        "goodput_per_s": "goodput (requests/s within the targets)",
    }
    rows = tuple(
        (
            Cell(labels[m.metric]),
            _n(m.before),
            _n(m.after),
            _n(m.delta, signed=True),
            Cell(_pct(_rel(m)), repr(_rel(m) or 0.0)),
        )
        for m in d.throughput
    )
    cols = columns(
        (
            ("metric", "", False),
            ("before", "before", True),
            ("after", "after", True),
            ("delta", "delta", True),
            ("change", "change", True),
        )
    )
    return Table("throughput", "Throughput", cols, rows if d.baseline.requests else ())


def _item_section(items: tuple[ItemDelta, ...], unit: Unit, kind: str, shape: bool) -> Table:
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for i in items[:TOP_ITEMS]:
        short = short_name(i.name, TABLE_NAME)
        n = seen[(short, i.shape)] = seen.get((short, i.shape), 0) + 1
        if n > 1:  # two names that shorten alike stay apart
            short += f" #{n}"
        row = [Cell(i.status), Cell(short, i.name, i.name if short != i.name else "", name=True)]
        if shape:
            row.append(Cell(short_name(i.shape, 40), i.shape, i.shape, name=True))
        row += [
            _c(i.before_count),
            _c(i.after_count),
            _n(i.before_mean_ms, 4),
            _n(i.after_mean_ms, 4),
            Cell(_pct(i.per_call_change), repr(i.per_call_change or 0.0)),
            _n(i.delta_ms, signed=True),
            _n(i.count_part_ms, signed=True),
            _n(i.time_part_ms, signed=True),
            _n(i.weight_ms, signed=True),
        ]
        rows.append(tuple(row))
    cols = [("status", "change", False), ("name", kind, False)]
    cols += [("shape", "shape", False)] if shape else []
    cols += [
        ("before_count", "calls before", True),
        ("after_count", "calls after", True),
        ("before_mean_ms", "ms/call before", True),
        ("after_mean_ms", "ms/call after", True),
        ("per_call_change", "per call", True),
        ("delta_ms", "Δ total ms", True),
        ("count_part_ms", "from calls", True),
        ("time_part_ms", "from ms/call", True),
        ("weight_ms", f"ms {unit.label}", True),
    ]
    what = "inclusive time" if kind == "op" else "time"
    note = (
        f"Per run; {what} per call. Δ total = from calls (Δcalls × ms/call before) + from "
        f"ms/call (calls after × Δms/call). Ranked by what the per-call change adds "
        f"{unit.label} (last column; the whole change for rows that appeared or vanished). "
        f"{len(items) - min(len(items), TOP_ITEMS)} more rows in --format json."
    )
    title = f"{kind.capitalize()}s compared per call"
    return Table(f"{kind}s", title, columns(cols), tuple(rows), note)


def sections(d: DiffResult) -> list[Table]:
    """The tables every format shows, in order."""
    out = [_stage_section(d), _throughput_section(d), _gpu_section(d)]
    out.append(_item_section(d.kernels, d.kernels_unit, "kernel", False))
    out.append(_item_section(d.ops, d.ops_unit, "op", True))
    return out
