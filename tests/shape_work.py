"""Work a Kineto trace's ops did, from their recorded input shapes: a plain pass over the JSON
(no tracekit code), so that two captures can be compared by what they computed, which load on
the machine cannot change, instead of by how long it took, which it can."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _ops(trace: Path) -> list[dict[str, Any]]:
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def _dims(op: dict[str, Any]) -> list[list[int]]:
    dims = (op.get("args") or {}).get("Input Dims") or []
    return [d for d in dims if isinstance(d, list) and all(isinstance(x, int) for x in d)]


def bmm_macs(trace: Path) -> int:
    """Multiply-accumulates of every aten::bmm: [b, m, k] @ [b, k, n] is b*m*k*n."""
    total = 0
    for op in _ops(trace):
        d = _dims(op)
        if op.get("name") == "aten::bmm" and len(d) >= 2 and len(d[0]) == len(d[1]) == 3:
            b, m, k = d[0]
            total += b * m * k * d[1][2]
    return total


def score_elements(trace: Path) -> int:
    """Elements of the attention-score inputs ([..., L, L], rank >= 4, L >= 8) of all ops."""
    return sum(
        math.prod(x) for op in _ops(trace) for x in _dims(op) if len(x) >= 4 and x[-1] == x[-2] >= 8
    )
