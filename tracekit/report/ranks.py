"""The cross-rank view: one row per rank (queries/rank_compare.sql over every trace of the
source) and the skew verdict: which rank is late, and how long the others wait for it.

A source is a set of ranks when it holds at least two GPU devices with distinct ranks: several
traces of one job (Kineto distributedInfo ranks, a folder of per-rank files) or several devices
in one nsys export. Two traces of one capture seen by two tools (one device each, no rank)
are not.

The verdict reads communication time. Ranks of one job meet in collectives: a collective ends
on every rank when the last one arrives, so the ranks that arrive early spend the difference
inside their communication kernels. The rank with the least communication time is the one the
others wait for; each other rank's wait is its communication time minus that rank's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Rows = Sequence[Mapping[str, Any]]

MIN_WAIT_MS = 1.0  # a late rank is named when another rank waits at least this long for it


@dataclass(frozen=True)
class Skew:
    late_rank: int | None  # None: no rank is late (no collectives, or waits under MIN_WAIT_MS)
    waits: dict[int, float]  # rank -> ms more in communication than the late rank (0 for it)
    sentence: str


def is_rank_set(rows: Rows) -> bool:
    """At least two ranks, each named once."""
    ranks = [r["rank"] for r in rows]
    return len(ranks) >= 2 and len(set(ranks)) == len(ranks)


def skew(rows: Rows) -> Skew:
    """The late rank and each rank's wait (rows: rank_compare rows of every trace)."""
    comm = {int(r["rank"]): float(r["communication_ms"] or 0) for r in rows}
    talking = {k: v for k, v in comm.items() if v > 0}
    if len(talking) < 2:
        busiest = max(rows, key=lambda r: (float(r["busy_ms"] or 0), -int(r["rank"])))
        return Skew(
            None,
            {},
            "No collectives to compare: fewer than two ranks ran communication kernels, so no "
            f"rank is shown waiting for another. Busiest: rank {busiest['rank']} "
            f"({float(busiest['busy_ms'] or 0):.3f} ms busy).",
        )
    late = min(talking, key=lambda k: (talking[k], k))
    waits = {k: v - talking[late] for k, v in talking.items()}
    longest = max(waits.values())
    if longest < MIN_WAIT_MS:
        return Skew(
            None,
            waits,
            f"No rank is late: communication time differs by {longest:.3f} ms across the "
            f"{len(talking)} ranks (under {MIN_WAIT_MS:g} ms).",
        )
    compute = {int(r["rank"]): float(r["compute_ms"] or 0) for r in rows}
    most = max(compute, key=lambda k: (compute[k], -k))
    why = (
        f"it also computes the most ({compute[late]:.3f} ms of kernels outside communication)"
        if most == late
        else f"its GPU compute, {compute[late]:.3f} ms, is not the most (rank {most}: "
        f"{compute[most]:.3f} ms), so what delays it is not in its kernels"
    )
    others = sorted(((k, w) for k, w in waits.items() if k != late), key=lambda kw: -kw[1])
    listed = ", ".join(f"rank {k} {w:.3f} ms" for k, w in others[:5])
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    return Skew(
        late,
        waits,
        f"Rank {late} is late: it spends the least time in communication kernels "
        f"({talking[late]:.3f} ms); the others spend more there waiting for it ({listed}{more}; "
        f"{sum(w for _, w in others):.3f} ms in all); {why}.",
    )


def rank_rows(rows: Rows, files: Mapping[int, str], skewed: Skew) -> list[dict[str, Any]]:
    """The table's rows: rank_compare rows with the trace's file and each rank's wait."""
    return [
        {
            **r,
            "file": files.get(int(r["trace_id"]), ""),
            "wait_ms": skewed.waits.get(int(r["rank"])),
            "late": "late" if r["rank"] == skewed.late_rank else "",
        }
        for r in sorted(rows, key=lambda r: (r["rank"], r["trace_id"], r["device"]))
    ]
