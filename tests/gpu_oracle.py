"""GPU activity straight from a raw trace file, for tests: per device the kernel, copy and
memset intervals (sqlite3 over an nsys export, json over a Kineto trace), and their union.
Independent of tracekit's ingestors."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

from tests.kineto_oracle import load


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def raw_gpu_intervals(trace: Path) -> dict[int, list[tuple[int, int]]]:
    """device -> [(start, end)] of kernels, copies and memsets, straight from the file."""
    out: dict[int, list[tuple[int, int]]] = {}
    if trace.suffix == ".sqlite":
        con = sqlite3.connect(f"{trace.as_uri()}?mode=ro&immutable=1", uri=True)
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET"):  # fmt: skip
            if t in have:
                for d, s, e in con.execute(f"SELECT deviceId, start, end FROM {t}"):
                    out.setdefault(int(d), []).append((int(s), int(e)))
        con.close()
        return out
    doc = load(trace)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset",
                                                    "Kernel", "Memcpy", "Memset"):  # fmt: skip
            # Kineto microseconds with a fractional part: whole ns, as the ingestor stores them
            # (in decimal: epoch microseconds x 1000 pass 2**53, where a float is 128 ns off)
            s = round(Decimal(str(e["ts"])) * 1000)
            out.setdefault(int(e["args"]["device"]), []).append(
                (s, s + round(Decimal(str(e["dur"])) * 1000))
            )
    return out
