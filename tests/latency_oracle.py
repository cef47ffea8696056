"""The latency oracle: a plain json pass over a Kineto trace (shares no code with tracekit).

A step is a ProfilerStep# or step[...] user_annotation; the GPU work it launched = the
kernels/memcpys/memsets whose runtime call (same correlation id, graph launches included)
starts inside the step on the step's thread. Latency = max(host end, last such GPU end) -
start. Busy per step = the union of every GPU interval per device clipped to that latency
window, summed over the trace's devices, over window x devices.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.kineto_oracle import load

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}


def _events(path: Path) -> list[dict[str, Any]]:
    doc = load(path)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]


def _union(iv: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(iv):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def oracle_steps(path: Path, pattern: str) -> list[dict[str, float]]:
    """Per step (start order): host_ms, latency_ms, busy share over its latency window."""
    evs = _events(path)
    runtime = {}
    for e in evs:
        if str(e.get("cat", "")).lower() in RUNTIME_CATS:
            runtime.setdefault((e.get("args") or {}).get("correlation"), e)
    gpu = [e for e in evs if str(e.get("cat", "")).lower() in GPU_CATS]
    per_device: dict[Any, list[tuple[float, float]]] = {}
    for g in gpu:
        per_device.setdefault(g.get("pid"), []).append((g["ts"], g["ts"] + g["dur"]))
    steps = sorted(
        (e for e in evs if str(e.get("cat", "")).lower() == "user_annotation"
         and re.match(pattern, e["name"])),
        key=lambda e: e["ts"],
    )  # fmt: skip
    out = []
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        ends = [
            g["ts"] + g["dur"]
            for g in gpu
            if (r := runtime.get((g.get("args") or {}).get("correlation"))) is not None
            and (r.get("pid"), r.get("tid")) == (s.get("pid"), s.get("tid"))
            and a <= r["ts"] <= b
        ]
        end = max([b, *ends])
        busy = sum(
            _union([(max(x, a), min(y, end)) for x, y in iv if min(y, end) > max(x, a)])
            for iv in per_device.values()
        )
        out.append(
            {
                "host_ms": (b - a) / 1e3,
                "latency_ms": (end - a) / 1e3,
                "tail_ms": (end - b) / 1e3,
                "util": busy / ((end - a) * len(per_device)),
            }
        )
    return out
