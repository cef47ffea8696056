"""An independent pass over a Chrome/Kineto trace with Python's json module (the oracle).

Deliberately shares no code with tracekit's ingestor.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

CAT_TO_KIND = {
    "cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "range",
    "gpu_user_annotation": "gpu_range", "cuda_runtime": "runtime", "cuda_driver": "runtime",
    "runtime": "runtime", "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset", "python_function": "python",
    "cuda_sync": "sync",
}  # fmt: skip


@cache  # every caller only reads the document; all the shared ones together are ~600 MB
def load(path: Path) -> dict | list:
    """The trace's JSON document, parsed once per test process (tests of several modules and
    functions read the same shared traces)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def complete_event_stats(path: Path) -> tuple[Counter[str], dict[str, int], dict[str, float]]:
    """(complete events per kind, kernel count per name, kernel total ns per name)."""
    doc = load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kinds: Counter[str] = Counter()
    kcount: dict[str, int] = defaultdict(int)
    kns: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        if cat == "trace":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        if not (math.isfinite(ts) and math.isfinite(dur)) or ts < 0 or dur < 0:
            continue
        kind = CAT_TO_KIND.get(cat, "other")
        kinds[kind] += 1
        if kind == "kernel":
            kcount[e["name"]] += 1
            kns[e["name"]] += dur * 1000.0
    return kinds, dict(kcount), dict(kns)
