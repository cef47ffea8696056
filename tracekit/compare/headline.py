"""The diff's headline: the few changes that explain most of the delta, one sentence each.

Candidates are stages whose mean per request moved beyond noise by at least min_change, and
ops/kernels whose status is slower, faster, unsure (material but within noise), appeared or
vanished. They are ranked by what they add per unit of work (ms per request, or per second of
trace span): the per-call part for a matched item, the whole change for one that appeared or
vanished. Up to MAX_ENTRIES are named, each at least a tenth of the first. Each sentence
says whether its change is beyond noise.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from tracekit.compare.items import ItemDelta, Unit
from tracekit.compare.result import DeviceDelta, Headline, MetricDelta, StageDelta

MAX_ENTRIES = 3
KEEP_FRACTION = 0.1
MAX_NAME = 90
NESTED_MATCH = 0.1


def _strip_args(s: str) -> str:
    """Drop a trailing top-level `(...)` argument list."""
    depth = 0
    for i in range(len(s) - 1, 0, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                return s[:i] if s.endswith(")") else s
    return s


def short_name(name: str, limit: int = MAX_NAME) -> str:
    """A readable kernel/op name within `limit` characters: past it, casts, `void`,
    namespaces, lambdas and the argument list are dropped, then the rest cut with '…'.
    Renderers show the full name on hover and in JSON."""
    if len(name) <= limit:
        return name
    s = re.sub(r"\((?:unsigned )?(?:int|long|bool|char|short)\)", "", name)
    s = re.sub(r"^void\s+|(?<=[<,\s])void\s+", "", s)
    s = re.sub(r"\[lambda[^\]]*\]", "λ", s)
    s = re.sub(r"(?:[A-Za-z_]\w*|<unnamed>|\(anonymous namespace\))::", "", s)
    s = re.sub(r"\s+", " ", _strip_args(s)).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _ms(v: float) -> str:
    return f"{v:,.3f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v * 100:+.1f}%"


def _stage_sentence(s: StageDelta) -> str:
    m, p50 = s.metric("mean_ms"), s.metric("p50_ms")
    rel = m.delta / m.before if m.delta is not None and m.before else None
    return (
        f"Stage {s.stage}: mean {_ms(m.before or 0)} → {_ms(m.after or 0)} ms per request "
        f"({_pct(rel)}, beyond noise; p50 {_ms(p50.before or 0)} → {_ms(p50.after or 0)} ms)."
    )


def _unit_words(unit: Unit) -> str:
    return f"per {unit.name}"


def _item_sentence(i: ItemDelta, kind: str, unit: Unit) -> str:
    what = f"{kind} {short_name(i.name)}" + (f" {short_name(i.shape, 40)}" if i.shape else "")
    per = _unit_words(unit)
    if i.status == "appeared":
        return (
            f"{what} appeared: {i.after_count:,.0f} calls per run, {_ms(i.after_mean_ms or 0)} "
            f"ms per call, adds {i.delta_per_unit_ms:+,.3f} ms {per}."
        )
    if i.status == "vanished":
        return (
            f"{what} vanished: it took {_ms(i.before_ms)} ms per run "
            f"({i.delta_per_unit_ms:+,.3f} ms {per})."
        )
    text = (
        f"{what}: {_ms(i.before_mean_ms or 0)} → {_ms(i.after_mean_ms or 0)} ms per "
        f"call ({_pct(i.per_call_change)}); at {i.after_count:,.0f} calls per run that is "
        f"{i.time_part_ms:+,.3f} ms per run, {i.time_part_per_unit_ms:+,.3f} ms {per}"
    )
    devs = [d for d in i.devices if d.before_mean_ms is not None and d.after_mean_ms is not None]
    if len(devs) > 1:
        text += (
            " ("
            + ", ".join(
                f"{d.device}: {_ms(d.before_mean_ms or 0)} → "
                f"{_ms(d.after_mean_ms or 0)} ms per call"
                for d in devs
            )
            + ")"
        )
    elif len(i.devices) == 1:
        text += f" (on {i.devices[0].device})"
    if i.beyond_noise:
        return text + "; beyond noise."
    ci = ""
    if i.ci_low_ms is not None and i.ci_high_ms is not None:
        ci = f": 95% interval of the per-call change {i.ci_low_ms:+,.3f} to {i.ci_high_ms:+,.3f} ms"
    tail = ""
    if i.after_max_ms > 3 * (i.after_mean_ms or 0) or i.before_max_ms > 3 * (i.before_mean_ms or 0):
        tail = (
            f"; a few long calls drive the mean (longest {_ms(i.before_max_ms)} → "
            f"{_ms(i.after_max_ms)} ms)"
        )
    return text + f"; within noise{ci}{tail}."


def _serving_sentence(serving: Sequence[MetricDelta]) -> str:
    """'Served: 38.2 → 105.9 requests/s (×2.77); queue p50 0.41 → 6.46 ms, p99 ...'."""
    m = {d.metric: d for d in serving}

    def move(key: str, unit: str, digits: int) -> str:
        d = m[key]
        if d.before is None or d.after is None:
            return "–"
        ratio = f" (×{d.after / d.before:.2f})" if d.before else ""
        return f"{d.before:,.{digits}f} → {d.after:,.{digits}f}{unit}{ratio}"

    ttft = (
        f"TTFT p50 {move('ttft_p50_ms', ' ms', 2)}, TPOT p50 {move('tpot_p50_ms', ' ms', 2)}; "
        if "ttft_p50_ms" in m
        else ""
    )
    return (
        f"Served: {move('requests_per_s', ' requests/s', 1)}; queue p50 "
        f"{move('queue_p50_ms', ' ms', 2)}, p99 {move('queue_p99_ms', ' ms', 2)}; {ttft}end-to-end "
        f"p50 {move('end_to_end_p50_ms', ' ms', 2)}, p99 {move('end_to_end_p99_ms', ' ms', 2)}; "
        f"mean batch {move('mean_batch', '', 1)}."
    )


def _context(
    stages: Sequence[StageDelta],
    devices: Sequence[DeviceDelta],
    k_unit: Unit,
    kernels: Sequence[ItemDelta],
) -> str:
    e2e = next((s for s in stages if s.stage == "end_to_end"), None)
    if e2e is not None and e2e.before_count and e2e.after_count:
        m, p50 = e2e.metric("mean_ms"), e2e.metric("p50_ms")
        rel = m.delta / m.before if m.delta is not None and m.before else None
        verdict = "beyond noise" if m.noise and m.noise.exceeds else "within noise"
        return (
            f"End-to-end: mean {_ms(m.before or 0)} → {_ms(m.after or 0)} ms per request "
            f"({_pct(rel)}, {verdict}; p50 {_ms(p50.before or 0)} → {_ms(p50.after or 0)} ms) "
            f"over {e2e.before_count} vs {e2e.after_count} requests."
        )
    allg = next((d for d in devices if d.device == "all"), None)
    if allg is not None and kernels:
        u = allg.utilization
        util = (
            f"{(u.before or 0) * 100:.1f}% → {(u.after or 0) * 100:.1f}% of the trace span"
            if u.before is not None and u.after is not None
            else ""
        )
        return (
            f"No requests: work compared per {k_unit.name} ({_amount(k_unit)}). "
            f"GPU busy {util} ({_ms(allg.busy.before or 0)} → "
            f"{_ms(allg.busy.after or 0)} ms per run, summed over devices)."
        )
    return f"No requests and no GPU kernels: ops compared per {k_unit.name}."


def _amount(u: Unit) -> str:
    if u.name.startswith("s "):
        return f"spans {u.before:,.3f} vs {u.after:,.3f} s"
    return f"{u.before:,.0f} vs {u.after:,.0f} per run"


def _note(
    kernels: Sequence[ItemDelta],
    ops: Sequence[ItemDelta],
    named: int,
    min_change: float,
    units: tuple[Unit, Unit],
) -> str:
    parts = []
    # ops are compared per (name, input shapes): a new padding changes every shape
    kinds = (("kernels", kernels, units[0]), ("ops by name and input shape", ops, units[1]))
    for kind, items, unit in kinds:
        if not items:
            continue
        same = sum(i.status == "same" for i in items)
        unsure = sum(i.status == "unsure" for i in items)
        changed = sum(i.status in ("slower", "faster", "appeared", "vanished") for i in items)
        parts.append(
            f"{kind}: {changed} changed beyond noise, {unsure} unsure, {same} the same "
            f"per call (within {min_change * 100:g}% or noise)"
        )
        both = [i for i in items if i.before_count and i.after_count]
        if len(both) < 3:
            continue
        raw = statistics.median(i.after_count / i.before_count for i in both)
        scale = (unit.before or 1.0) / (unit.after or 1.0)
        per = statistics.median(i.after_count / i.before_count * scale for i in both)
        if abs(per - 1) >= 0.02:
            parts[-1] += (
                f"; calls per {unit.name} ×{per:.2f} (median over {len(both)} {kind}): "
                f"the candidate holds {'less' if per < 1 else 'more'} work per {unit.name}"
            )
        elif abs(raw - 1) >= 0.02:
            parts[-1] += (
                f"; calls per run ×{raw:.2f} but ×{per:.2f} per {unit.name} (median over "
                f"{len(both)} {kind}): the same work per {unit.name}, more or fewer of them"
            )
    text = "; ".join(parts)
    beyond = any(i.beyond_noise for i in (*kernels, *ops))
    lead = (
        ""
        if named
        else ("No large change beyond noise. " if beyond else "No change beyond noise. ")
    )
    return lead + (text[0].upper() + text[1:] + ".") if text else lead.strip()


def outermost(ops: Sequence[ItemDelta]) -> list[ItemDelta]:
    """Ops without the likely children of a larger one: an op nested in another (aten::item
    around aten::_local_scalar_dense) has the same calls and nearly the same change, and
    would name one change twice. Of ops with equal calls whose per-call part is within
    NESTED_MATCH of each other, the one with the longer time per call (the parent) stays."""
    kept: list[ItemDelta] = []
    for i in sorted(ops, key=lambda x: -(x.after_mean_ms or x.before_mean_ms or 0.0)):
        if any(
            k.before_count == i.before_count
            and k.after_count == i.after_count
            and abs(k.weight_ms - i.weight_ms) <= NESTED_MATCH * abs(k.weight_ms)
            for k in kept
        ):
            continue
        kept.append(i)
    return kept


def headline(
    stages: Sequence[StageDelta],
    kernels: Sequence[ItemDelta],
    ops: Sequence[ItemDelta],
    k_unit: Unit,
    o_unit: Unit,
    devices: Sequence[DeviceDelta],
    min_change: float,
    gpus: tuple[Sequence[str], Sequence[str]] = ((), ()),
    serving: Sequence[MetricDelta] = (),
) -> Headline:
    """The headline of a diff (see the module docstring)."""
    cands: list[tuple[float, str, bool]] = []
    staged = any(s.stage not in ("end_to_end", "unattributed") for s in stages)
    for s in stages:
        m = s.metric("mean_ms")
        if s.stage == "end_to_end" or (s.stage == "unattributed" and not staged):
            continue  # the context line says it (no stages: unattributed is end-to-end)
        if m.delta is None or not m.before or m.noise is None:
            continue
        if m.noise.exceeds and abs(m.delta) >= min_change * m.before:
            cands.append((m.delta, _stage_sentence(s), True))
    groups: tuple[tuple[str, Sequence[ItemDelta], Unit], ...] = (
        ("Kernel", kernels, k_unit),
        ("Op", outermost(ops), o_unit),
    )
    for kind, items, unit in groups:
        for i in items:
            if i.status in ("slower", "faster", "unsure", "appeared", "vanished"):
                cands.append((i.weight_ms, _item_sentence(i, kind, unit), i.beyond_noise))
    cands.sort(key=lambda c: -abs(c[0]))
    entries = [c for c in cands[:MAX_ENTRIES] if abs(c[0]) >= KEEP_FRACTION * abs(cands[0][0])]
    note = _note(kernels, ops, any(c[2] for c in entries), min_change, (k_unit, o_unit))
    context = _context(stages, devices, k_unit, kernels)
    if serving:
        context = _serving_sentence(serving) + " " + context
    if gpus[0] and gpus[1] and set(gpus[0]) != set(gpus[1]):
        context += (
            f" The sides ran on different GPUs ({', '.join(gpus[0])} vs {', '.join(gpus[1])}):"
            " per-call changes include the hardware."
        )
    return Headline(context, tuple(c[1] for c in entries), note)
