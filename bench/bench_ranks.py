"""Time `tracekit report` over a folder of rank traces, warm (stores cached), against a report
of one rank of the same folder.

    python bench/bench_ranks.py [--ranks 8,64] [--events 5000] [--repeat 3] [--dir DIR]

For each N in --ranks, a folder of N synthetic rank traces (bench/gen_kineto.py, one
distributedInfo rank each, --events events per rank: 5000 is the size of the shared torchrec
rank traces) is written once under --dir and ingested once (cold, not timed here); then, in
--repeat interleaved rounds, in this process (imports excluded):

  one rank      the HTML report of the folder's first rank alone: the floor per rank
  N ranks       the HTML report of the whole folder (the cross-rank section + every rank's)
    open        of which: opening the N cached stores as one TraceSet
    context     of which: every report query (build_report_context)
    render      of which: the HTML
  per trace     the same with each query run once per trace (as before the report ran each
                query once for all the traces), for N <= --per-trace-upto
  shared 2      the shared torchrec folder (2 real ranks of one job), when ../shared is here

Medians are printed with each folder's time as a ratio to N x one rank (1.00x: a rank costs as
much in the folder as alone; under 1: the folder shares work across ranks) and per rank.
The goals of issue 38: 8 ranks <= 1.5 s warm, 64 ranks <= 10 s warm.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_kineto  # noqa: E402

import tracekit  # noqa: E402
from tracekit.report import report_rows  # noqa: E402
from tracekit.report.context import build_report_context  # noqa: E402
from tracekit.report.render import render  # noqa: E402

GOALS = {8: 1.5, 64: 10.0}  # issue 38: seconds, warm
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
TORCHREC = SHARED / "kineto_ampere_torchrec_2of128ranks_sampled_hta"


def make_folder(root: Path, ranks: int, events: int) -> Path:
    folder = root / f"ranks{ranks}_e{events}"
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        out = folder / f"rank-{r}.json.gz"
        if out.exists():
            continue
        part = out.with_name(out.name + ".part")
        with gzip.open(part, "wt", compresslevel=1, encoding="utf-8") as f:
            gen_kineto.generate(f, events, seed=r, rank=r, world=ranks)
        part.replace(out)
    return folder


def report_parts(path: Path, per_trace: bool = False) -> tuple[float, float, float, float]:
    """(total, open, context, render) seconds of one HTML report over `path` (per_trace: each
    query once per trace, not once for all of them)."""
    each = report_rows._each
    if per_trace:
        report_rows._each = lambda ts, job, ids: {  # type: ignore[assignment]
            i: ts.query_dicts(job.query, trace_id=i, **job.params) for i in ids
        }
    try:
        return _report_parts(path)
    finally:
        report_rows._each = each  # type: ignore[assignment]


def _report_parts(path: Path) -> tuple[float, float, float, float]:
    t0 = time.perf_counter()
    with tracekit.open(path) as ts:
        t1 = time.perf_counter()
        ctx = build_report_context(ts, [path])
        t2 = time.perf_counter()
    html = render(ctx, "html")
    t3 = time.perf_counter()
    assert html
    return t3 - t0, t1 - t0, t2 - t1, t3 - t2


def median_of(runs: list[tuple[float, ...]], i: int) -> float:
    return statistics.median(r[i] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="8,64")
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--per-trace-upto", type=int, default=8)
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="tk-bench-ranks-"))
    os.environ.setdefault("TRACEKIT_CACHE_DIR", str(root / "cache"))
    cases: list[tuple[str, int, Path]] = []
    for n in (int(x) for x in args.ranks.split(",")):
        t0 = time.perf_counter()
        folder = make_folder(root, n, args.events)
        with tracekit.open(folder):  # cold: ingest every rank once
            pass
        print(f"{n} ranks: {folder} (generated + ingested in {time.perf_counter() - t0:.1f} s)")
        cases.append((f"{n} ranks", n, folder))
    if TORCHREC.is_dir():
        cases.append(("shared 2", 2, TORCHREC))
    runs: dict[str, list[tuple[float, ...]]] = {}
    work: list[tuple[str, Callable[[], tuple[float, ...]]]] = []
    for name, n, folder in cases:
        first = sorted(folder.glob("*.json.gz"))[0]
        work.append((f"{name}: one rank", lambda p=first: report_parts(p)))
        work.append((name, lambda p=folder: report_parts(p)))
        if n <= args.per_trace_upto:
            work.append((f"{name}: per trace", lambda p=folder: report_parts(p, per_trace=True)))
    for _ in range(args.repeat):  # interleaved: a drift in the machine's load hits every row
        for key, fn in work:
            runs.setdefault(key, []).append(fn())
    print(f"\nwarm HTML report, median of {args.repeat} (seconds; this process, imports excluded)")
    print(f"{'':22} {'total':>7} {'open':>7} {'context':>8} {'render':>7} {'per rank':>9} "
          f"{'x N one':>8}  goal")  # fmt: skip
    for name, n, _ in cases:
        one = median_of(runs[f"{name}: one rank"], 0)
        r = runs[name]
        total = median_of(r, 0)
        goal = GOALS.get(n) if not name.startswith("shared") else None
        verdict = f"<= {goal:g} s: {'met' if total <= goal else 'not met'}" if goal else ""
        print(f"{name + ': one rank':22} {one:7.2f}")
        parts = " ".join(f"{median_of(r, i):{w}.2f}" for i, w in ((1, 7), (2, 8), (3, 7)))
        print(f"{name:22} {total:7.2f} {parts} {total / n:9.3f} {total / (n * one):7.2f}x  "
              f"{verdict}")  # fmt: skip
        if f"{name}: per trace" in runs:
            seq = median_of(runs[f"{name}: per trace"], 0)
            print(f"{name + ': per trace':22} {seq:7.2f} {'':24} {seq / n:9.3f} "
                  f"{seq / (n * one):7.2f}x  (all at once: {seq / total:.2f}x faster)")  # fmt: skip
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
