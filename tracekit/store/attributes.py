"""Attach the attribute sidecars written by `tracekit.stage(...)`/`request(...)` to a trace.

A sidecar (`attributes-<pid>.jsonl`, format in docs/capture.md) has one record per range:
name, pid, tid, ordinal, start/end on the process's perf_counter clock, attrs. The trace has
the same ranges as events (kind 'range', name 'tracekit:<name>'), with its own pid/tid
numbering and clock. The matching rule:

1. Threads. Each side's threads are (pid, tid) pairs with at least one tracekit range. A
   sidecar thread maps to the trace thread with the same (pid, tid); else to one with the same
   tid; the rest are paired in order of their first range's start (each side on its own
   clock), so a renumbered pid/tid (containers, other tools) still lines up.
2. Ranges. Within a thread pair and a name, the k-th record in start order (the ordinal)
   matches the k-th range in start order. A torch.profiler schedule keeps only some requests:
   when the counts differ and the records flagged `torch_recorded` number exactly as many as
   the trace's ranges, only those records are used. Otherwise the first min(n, m) are paired.
3. Each attribute of a matched record becomes one row (trace_id, event_id, key, JSON value).
   Rows already there for the trace are replaced, so a second call does not duplicate.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from tracekit.store.literals import execute

PREFIX = "tracekit:"
Thread = tuple[int | None, int | None]


@dataclass(frozen=True)
class MatchStats:
    records: int
    matched: int
    rows: int
    unmatched: int


def read_sidecars(files: Iterable[Path]) -> list[dict[str, Any]]:
    """All well-formed records of the sidecar files (a torn last line is skipped)."""
    records = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if _well_formed(rec):
                    records.append(rec)
    return records


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63


def _well_formed(rec: Any) -> bool:
    """A record whose fields have the types the matcher relies on (others are skipped)."""
    return (
        isinstance(rec, dict)
        and isinstance(rec.get("name"), str)
        and all(rec.get(k) is None or _is_int(rec[k]) for k in ("pid", "tid", "start_ns"))
        and (rec.get("ordinal") is None or _is_int(rec["ordinal"]))
        and isinstance(rec.get("attrs") or {}, dict)
    )


def _map_threads(side: dict[Thread, int], trace: dict[Thread, int]) -> dict[Thread, Thread]:
    """Sidecar thread -> trace thread (values: first start of each thread on its own clock)."""
    mapping: dict[Thread, Thread] = {}
    free = set(trace)
    for t in side:
        if t in free:
            mapping[t] = t
            free.discard(t)
    for t in side:
        if t in mapping:
            continue
        same_tid = sorted(u for u in free if u[1] == t[1])
        if len(same_tid) == 1:
            mapping[t] = same_tid[0]
            free.discard(same_tid[0])
    rest_side = sorted((v, t) for t, v in side.items() if t not in mapping)
    rest_trace = sorted((v, u) for u, v in trace.items() if u in free)
    for (_, t), (_, u) in zip(rest_side, rest_trace, strict=False):
        mapping[t] = u
    return mapping


def match_records(
    records: list[dict[str, Any]], ranges: list[tuple[int, str, int | None, int | None, int]]
) -> tuple[list[tuple[dict[str, Any], int]], int]:
    """Pair records with range events `(event_id, name, pid, tid, start_ns)`.

    Returns ([(record, event_id)], number of records left unmatched)."""
    side_groups: dict[tuple[Thread, str], list[dict[str, Any]]] = defaultdict(list)
    side_first: dict[Thread, int] = {}
    for r in records:
        t = (r.get("pid"), r.get("tid"))
        side_groups[(t, r["name"])].append(r)
        start = int(r.get("start_ns") or 0)
        side_first[t] = min(side_first.get(t, start), start)
    trace_groups: dict[tuple[Thread, str], list[tuple[int, int]]] = defaultdict(list)
    trace_first: dict[Thread, int] = {}
    for event_id, name, pid, tid, start in ranges:
        t = (pid, tid)
        trace_groups[(t, name.removeprefix(PREFIX))].append((start, event_id))
        trace_first[t] = min(trace_first.get(t, start), start)
    threads = _map_threads(side_first, trace_first)
    pairs: list[tuple[dict[str, Any], int]] = []
    unmatched = 0
    for (t, name), recs in side_groups.items():
        recs.sort(key=lambda r: (r.get("ordinal", 0), r.get("start_ns", 0)))
        events = sorted(trace_groups.get((threads[t], name), [])) if t in threads else []
        if len(recs) != len(events):
            kept = [r for r in recs if r.get("torch_recorded") is True]
            if kept and len(kept) == len(events):
                unmatched += len(recs) - len(kept)
                recs = kept
        n = min(len(recs), len(events))
        unmatched += len(recs) - n
        pairs += [(recs[i], events[i][1]) for i in range(n)]
    return pairs, unmatched


def apply_attributes_stats(
    con: duckdb.DuckDBPyConnection, trace_id: int, sidecar_files: list[Path]
) -> MatchStats:
    """`apply_attributes`, returning what matched as well."""
    records = read_sidecars(sidecar_files)
    ranges = execute(
        con,
        """
        SELECT event_id, name, pid, tid, start_ns FROM events
        WHERE trace_id = $trace_id AND kind = 'range' AND name LIKE 'tracekit:%'
        ORDER BY pid, tid, start_ns, event_id
        """,
        {"trace_id": trace_id},
    ).fetchall()
    pairs, unmatched = match_records(records, ranges)
    rows = [
        (trace_id, event_id, _utf8(str(key)), json.dumps(value, default=str, sort_keys=True))
        for rec, event_id in pairs
        for key, value in sorted((rec.get("attrs") or {}).items())
    ]
    execute(con, "DELETE FROM attributes WHERE trace_id = $trace_id", {"trace_id": trace_id})
    from tracekit.ingest.common import insert_many  # lazy: only a capture with attributes needs it

    insert_many(con, "attributes", rows)
    return MatchStats(len(records), len(pairs), len(rows), unmatched)


def _utf8(text: str) -> str:
    """Lone surrogates (valid in JSON, not in UTF-8) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def apply_attributes(
    con: duckdb.DuckDBPyConnection, trace_id: int, sidecar_files: list[Path]
) -> int:
    """Fill `attributes` for one trace from sidecar files; returns the rows written."""
    return apply_attributes_stats(con, trace_id, sidecar_files).rows


def sidecars_for(run_dir: Path, trace: Path) -> list[Path]:
    """The sidecars capture.json lists for `trace` (all of `attributes/` when no manifest)."""
    manifest = run_dir / "capture.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        rel = str(trace.resolve().relative_to(run_dir.resolve()))
        files = data.get("files") if isinstance(data, dict) else None
        root = run_dir.resolve()
        found = []
        for f in files if isinstance(files, list) else []:
            if not isinstance(f, dict) or f.get("role") != "attributes":
                continue
            path, traces = f.get("path"), f.get("traces")
            if not isinstance(path, str) or not isinstance(traces, list) or rel not in traces:
                continue
            candidate = run_dir / path
            if root in candidate.resolve().parents:  # never a file outside the run folder
                found.append(candidate)
        return found
    return sorted((run_dir / "attributes").glob("**/attributes-*.jsonl"))
