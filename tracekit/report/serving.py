"""Sentences of the report's first screen about how the serving code ran: the host waiting for
the GPU inside a stage, and the GPU work replayed from CUDA/HIP graphs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WAIT_SHARE = 0.1  # a stage's waits are named when they are this much of its time ...
WAIT_MS = 0.1  # ... and at least this long
WAIT_STAGES = 3


def waits_sentence(rows: list[Mapping[str, Any]]) -> str:
    """'postprocess 115.059 ms, of which 113.919 ms (99%) the host waits in aten::to
    (hipMemcpyWithStream) for the GPU.' for the stages that wait most."""
    named = [
        r
        for r in rows
        if (r.get("share_of_stage") or 0) >= WAIT_SHARE and (r.get("wait_ms") or 0) >= WAIT_MS
    ][:WAIT_STAGES]
    if not named:
        return ""
    parts = []
    for r in named:
        where = r["op"] if r["op"] == r["call"] else f"{r['op']} ({r['call']})"
        parts.append(
            f"{r['stage']} {r['stage_ms']:.3f} ms, of which {r['wait_ms']:.3f} ms "
            f"({r['share_of_stage']:.0%}) the host waits in {where} for the GPU"
        )
    return "Host waiting inside stages: " + "; ".join(parts) + "."


def graph_sentence(rows: list[Mapping[str, Any]]) -> str:
    """'CUDA/HIP graphs replay 85% of kernel time ...' when the trace launches graphs."""
    if not rows or not rows[0].get("replayed_kernels"):
        return ""
    g = rows[0]
    return (
        f"Graphs replay {g['share_of_kernel_time']:.0%} of kernel time ({g['replayed_ms']:.3f} "
        f"of {g['kernel_ms']:.3f} ms: {g['replayed_kernels']} of {g['kernels']} kernels from "
        f"{g['graph_launches']} graph launch{'es' if g['graph_launches'] != 1 else ''}); "
        "each replayed kernel takes the stage of its launch."
    )


def serving_sentence(q: Mapping[str, list[dict[str, Any]]]) -> str:
    return " ".join(
        s
        for s in (
            waits_sentence(q.get("stage_host_waits", [])),
            graph_sentence(q.get("graph_replay", [])),
        )
        if s
    )
