"""DuckDB vs Spark local mode on Parquet exports of 1, 10 and 100 traces.

    python bench/bench_spark.py [--traces 1,10,100] [--events 1.5e5] [--distinct 10]
                                [--rounds 2] [--master local[*]] [--dir DIR]

Generates `--distinct` synthetic Kineto traces (bench/gen_kineto.py; 1.5e5 generated events
store about 1e5), exports them once (`tracekit export --parquet`), and lays out each folder of
N traces by copying those partitions under new trace_ids (trace k holds the rows of distinct
trace k mod D): the engines read N traces' worth of rows, without N ingests. Then, for each N,
the queries of the catalogue that span every trace (rank_summary, compare_stage_stats,
compare_kernels, compare_gpu_busy) plus one per-trace query (stage_summary, trace 1) run on
DuckDB (`tracekit.open(DIR)`, in process) and on Spark (one session for the whole run,
started once and timed apart), interleaved, `--rounds` times; the median is printed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit  # noqa: E402
from bench.gen_kineto import generate  # noqa: E402
from tracekit.export import export_parquet  # noqa: E402
from tracekit.store.build import TABLES  # noqa: E402

QUERIES = (
    ("rank_summary", {}),
    ("compare_stage_stats", {}),
    ("compare_kernels", {}),
    ("compare_gpu_busy", {}),
    ("stage_summary", {"trace_id": 1}),
)


def make_base(root: Path, distinct: int, events: float) -> Path:
    traces = root / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    for r in range(distinct):
        with open(traces / f"rank{r:03d}.json", "w") as f:
            generate(f, int(events), seed=r, rank=r, world=distinct)
    export_parquet([traces], root / "base")
    return root / "base"


def make_lake(base: Path, out: Path, n: int, distinct: int) -> Path:
    """N traces' partitions, trace k a copy of distinct trace ((k - 1) mod D) + 1."""
    for table in TABLES:
        (out / table).mkdir(parents=True, exist_ok=True)
        for k in range(1, n + 1):
            src = base / table / f"trace_id={(k - 1) % distinct + 1}"
            if src.is_dir():
                shutil.copytree(src, out / table / f"trace_id={k}")
        if not any((out / table).iterdir()):  # an empty table: its schema-only file
            shutil.copytree(base / table / "trace_id=0", out / table / "trace_id=0")
    return out


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="1,10,100")
    ap.add_argument("--events", type=float, default=1.5e5)
    ap.add_argument("--distinct", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="tk-bench-spark-"))
    counts = [int(c) for c in args.traces.split(",")]
    distinct = min(args.distinct, max(counts))
    t0 = time.perf_counter()
    base = make_base(root, distinct, args.events)
    with tracekit.open(base) as t:
        per_trace = t.sql("SELECT count(*) AS n FROM events")["n"][0] / distinct
    print(f"{distinct} distinct traces, ~{per_trace:.0f} stored events each, generated and "
          f"exported in {time.perf_counter() - t0:.1f} s ({root})")  # fmt: skip

    from tracekit.spark import local_session, open_spark

    t0 = time.perf_counter()
    spark = local_session(args.master)
    print(f"Spark session ({args.master}) started in {time.perf_counter() - t0:.1f} s")
    head = ("traces", "events", "query", "duckdb s", "spark s", "spark/duckdb")
    print("{:>6} {:>10} {:<22} {:>9} {:>9} {:>13}".format(*head))
    row = "{:>6} {:>10.0f} {:<22} {:>9.2f} {:>9.2f} {:>12.1f}x"
    for n in counts:
        lake = make_lake(base, root / f"lake{n}", n, distinct)
        times: dict[tuple[str, str], list[float]] = {}
        with tracekit.open(lake) as duck, open_spark([lake], spark=spark) as sp:
            for _ in range(args.rounds):
                for name, params in QUERIES:
                    for engine, src in (("duckdb", duck), ("spark", sp)):
                        seconds = timed(lambda s=src, q=name, p=params: s.query(q, **p))  # type: ignore[misc]
                        times.setdefault((name, engine), []).append(seconds)
        total = {"duckdb": 0.0, "spark": 0.0}
        for name, _ in QUERIES:
            d = statistics.median(times[(name, "duckdb")])
            s = statistics.median(times[(name, "spark")])
            total["duckdb"] += d
            total["spark"] += s
            print(row.format(n, n * per_trace, name, d, s, s / d))
        d, s = total["duckdb"], total["spark"]
        print(row.format(n, n * per_trace, "(all five)", d, s, s / d))
        shutil.rmtree(lake)
    spark.stop()


if __name__ == "__main__":
    main()
