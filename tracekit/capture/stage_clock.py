"""What the program itself did, from the ranges it wrote to its attribute sidecars: how many
requests and stages it entered and their mean duration (the runner's own clock), and whether
the nsys trace recorded them (a plain install can silently record none)."""

from __future__ import annotations

import importlib.metadata
import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

NVTX_TRAP = (0, 2, 13)  # nvtx >= this calls nvtxDomainIsEnabled, which nsys < 2023 lacks


@dataclass
class StageClock:
    """Ranges the program entered, by name: count and total ns (requests under 'request')."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    total_ns: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def ranges(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """'16 requests; preprocess 1.93 ms, inference 14.07 ms (mean per range)'."""
        parts = [f"{self.counts['request']} requests"] if "request" in self.counts else []
        if "batch" in self.counts:
            parts.append(f"{self.counts['batch']} batches")
        stages = [f"{name} {self.total_ns[name] / n / 1e6:.2f} ms"
                  for name, n in self.counts.items()
                  if name not in ("request", "batch")]  # fmt: skip
        if stages:
            parts.append(", ".join(stages) + " (mean per range)")
        return "; ".join(parts)


def read_stage_clock(attributes_dir: Path) -> StageClock:
    """The ranges in `attributes_dir/attributes-*.jsonl`, in first-seen order."""
    clock = StageClock()
    for path in sorted(attributes_dir.glob("attributes-*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                    name, dur = str(r["name"]), int(r["end_ns"]) - int(r["start_ns"])
                except (ValueError, KeyError, TypeError):
                    continue  # a half-written last line of a killed program
                name = name.split("[", 1)[0]  # request[<id>], batch[<ids>]: one line each
                clock.counts[name] += 1
                clock.total_ns[name] += dur
    return clock


def nsys_tracekit_ranges(sqlite_path: Path) -> int:
    """NVTX ranges in domain `tracekit` in an nsys SQLite export (0 when it has no NVTX)."""
    uri = f"file:{sqlite_path}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error:
        return 0
    try:
        row = con.execute(
            """SELECT count(*) FROM NVTX_EVENTS e JOIN NVTX_EVENTS d
               ON d.eventType = 75 AND d.domainId = e.domainId
               AND d.globalTid / 16777216 = e.globalTid / 16777216
               WHERE e.eventType IN (59, 60) AND d.text = 'tracekit'"""
        ).fetchone()
        return int(row[0])
    except sqlite3.Error:  # no NVTX_EVENTS table: nothing recorded
        return 0
    finally:
        con.close()


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split("."):
        digits = "".join(c for c in p if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def empty_nsys_cause(nsys_year: int | None) -> str:
    """Why nsys recorded none of the program's ranges, and the fix, as far as we can tell."""
    try:
        nvtx = importlib.metadata.version("nvtx")
    except importlib.metadata.PackageNotFoundError:
        return "the nvtx package is not installed, so no NVTX ranges are emitted; fix: " \
               "pip install 'nvtx>=0.2.10,<0.2.13'"  # fmt: skip
    if nsys_year is not None and nsys_year < 2023 and version_tuple(nvtx) >= NVTX_TRAP:
        return (
            f"nvtx {nvtx} calls nvtxDomainIsEnabled, which nsys {nsys_year}.x lacks, so nsys "
            "drops every range; fix: pip install 'nvtx>=0.2.10,<0.2.13', or nsys 2023.1 or newer"
        )
    return f"cause unknown (nvtx {nvtx}); run `tracekit doctor`"
