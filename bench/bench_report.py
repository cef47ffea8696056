"""Time `tracekit report` on a synthetic Kineto trace of about 1e6 events.

    python bench/bench_report.py [--requests 9000] [--layers 3] [--keep DIR]

Prints the event count and seconds for: ingest (first open), report context (queries),
and each renderer.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit  # noqa: E402
from tests.synth_kineto import generate  # noqa: E402
from tracekit.report.context import build_report_context  # noqa: E402
from tracekit.report.render import render  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=21300)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="tk-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bench.json.gz"
    t0 = time.perf_counter()
    generate(path, requests=args.requests, layers=args.layers)
    print(f"generate  {time.perf_counter() - t0:7.2f} s")
    t0 = time.perf_counter()
    with tracekit.open(path) as ts:
        n = ts.sql("SELECT count(*) AS n FROM events")["n"][0]
        print(f"ingest    {time.perf_counter() - t0:7.2f} s  ({n} events)")
        t0 = time.perf_counter()
        ctx = build_report_context(ts, [path])
        print(f"context   {time.perf_counter() - t0:7.2f} s  (all report queries)")
    for fmt in ("html", "md", "json"):
        t0 = time.perf_counter()
        text = render(ctx, fmt)
        print(f"render {fmt:4} {time.perf_counter() - t0:5.2f} s  ({len(text) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
