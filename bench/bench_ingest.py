"""Time tracekit's ingest of synthetic Kineto traces against plain-Python baselines.

    python bench/bench_ingest.py [--sizes 1e5,1e6] [--repeat 3] [--dir /tmp/tracekit-bench]

For each size, bench/gen_kineto.py writes a plain-JSON trace (kept in --dir and reused when
it is already there), then each measurement runs in its own fresh Python process, timed
around the work only (imports excluded), with that process's peak RSS:

  read bytes       open(path).read()
  json.load        json.load of the file
  json.load+pass   json.load, then one plain-Python pass: count and total dur per (cat, name)
  orjson+pass      the same with orjson.loads (when orjson is installed)
  ingest (cold)    tracekit.store.build.ensure_trace_store with no cache: parse + build the store
  reopen (cached)  tracekit.open on the cached store + SELECT count(*) FROM events
  HTA load         HolisticTraceAnalysis TraceAnalysis(trace_dir=...) over the file (when
                   `hta` is installed: pip install HolisticTraceAnalysis psutil). Its load
                   time grows with events x ProfilerStep ranges (add_iteration loops over the
                   steps in Python for each CPU event); gen_kineto writes one step per
                   request (2381 at 1e6), a serving trace's shape, where training traces
                   profiled by a schedule have a handful.
  report (cached)  tracekit.report.write_report (HTML) over the cached store
  gunzip           gzip.open(path.gz).read() in 16 MiB blocks (with --gz)
  ingest .gz       the cold ingest of path.gz (with --gz; the .gz is made once, level 6)

The file is in the OS page cache for every row (it was just written or read), so the rows
compare parsing, not disk. The rows run in --repeat rounds (every row once per round), so a
drift in the machine's speed hits each round's rows alike; the ingest / json.load and .gz /
plain ratios are printed per round as well. Prints seconds (median of --repeat), events/s,
MB/s, peak RSS, and each row's time as a ratio to tracekit's cold ingest (>1: slower than
tracekit).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Each snippet gets PATH (str) and must set N (events seen) after the timed work.
SNIPPETS = {
    "read bytes": (
        "", "data = open(PATH, 'rb').read(); N = 0"),
    "json.load": (
        "import json", "doc = json.load(open(PATH, 'rb')); N = len(doc['traceEvents'])"),
    "json.load+pass": (
        "import json",
        "doc = json.load(open(PATH, 'rb'))\n"
        "agg = {}\n"
        "for e in doc['traceEvents']:\n"
        "    k = (e.get('cat'), e.get('name'))\n"
        "    a = agg.get(k)\n"
        "    if a is None:\n"
        "        agg[k] = a = [0, 0.0]\n"
        "    a[0] += 1\n"
        "    a[1] += e.get('dur', 0) or 0\n"
        "N = sum(a[0] for a in agg.values())"),
    "orjson+pass": (
        "import orjson",
        "doc = orjson.loads(open(PATH, 'rb').read())\n"
        "agg = {}\n"
        "for e in doc['traceEvents']:\n"
        "    k = (e.get('cat'), e.get('name'))\n"
        "    a = agg.get(k)\n"
        "    if a is None:\n"
        "        agg[k] = a = [0, 0.0]\n"
        "    a[0] += 1\n"
        "    a[1] += e.get('dur', 0) or 0\n"
        "N = sum(a[0] for a in agg.values())"),
    "ingest (cold)": (
        "from pathlib import Path\n"
        "from tracekit.store.build import cache_path_for, ensure_trace_store\n"
        "cache_path_for(Path(PATH)).unlink(missing_ok=True)",
        "r = ensure_trace_store(Path(PATH), [], refresh=True); N = r.events"),
    "reopen (cached)": (
        "import tracekit",
        "t = tracekit.open(PATH); N = t.sql('SELECT count(*) AS n FROM events')['n'][0]; "
        "t.close()"),
    "report (cached)": (
        "import os, tempfile\nfrom pathlib import Path\nfrom tracekit.report import write_report\n"
        "out = Path(tempfile.mkdtemp()) / 'r.html'",
        "write_report([Path(PATH)], out, force=True); N = 0; os.unlink(out)"),
    "HTA load": (
        "import os, tempfile\nd = tempfile.mkdtemp()\n"
        "os.symlink(PATH, os.path.join(d, 'rank0.json'))\n"
        "from hta.trace_analysis import TraceAnalysis",
        "ta = TraceAnalysis(trace_dir=d)\n"
        "N = sum(len(t) for t in ta.t.traces.values())"),
    "gunzip": (
        "import gzip",
        "f = gzip.open(PATH + '.gz')\nwhile f.read(16 << 20): pass\nN = 0"),
    "ingest .gz (cold)": (
        "from pathlib import Path\n"
        "from tracekit.store.build import cache_path_for, ensure_trace_store\n"
        "cache_path_for(Path(PATH + '.gz')).unlink(missing_ok=True)",
        "r = ensure_trace_store(Path(PATH + '.gz'), [], refresh=True); N = r.events"),
}  # fmt: skip
GZ_ROWS = ("gunzip", "ingest .gz (cold)")
BASELINES_MAY_FAIL = ("HTA load",)

CHILD = """
import resource, sys, time
PATH = sys.argv[1]
{setup}
t0 = time.perf_counter()
{work}
dt = time.perf_counter() - t0
print(dt, N, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child_env() -> dict[str, str]:
    """The measured process's environment: this checkout's tracekit, no progress bar."""
    env = dict(os.environ, TRACEKIT_PROGRESS="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def run_one(name: str, path: Path) -> tuple[float, int, int]:
    """(seconds, events, peak RSS bytes) of one measurement in a fresh process."""
    setup, work = SNIPPETS[name]
    code = CHILD.format(setup=setup, work=work)
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, env=child_env(), check=False)  # fmt: skip
    if out.returncode != 0:
        if name in BASELINES_MAY_FAIL:  # a peer tool's failure is a result, not a bench bug
            last = (out.stderr.strip().splitlines() or ["?"])[-1]
            print(f"  {name} failed on {path.name}: {last[:200]}", file=sys.stderr)
            return float("nan"), 0, 0
        raise SystemExit(f"{name} on {path} failed:\n{out.stderr[-3000:]}")
    dt, n, rss_kib = out.stdout.split("\n")[-2].split()  # the last line; work may print
    return float(dt), int(n), int(rss_kib) * 1024


def trace_for(events: int, folder: Path) -> Path:
    path = folder / f"kineto_{events:.0e}.json".replace("+", "")
    if not path.exists():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_kineto.py"),
                        "--events", str(events), "-o", str(path)], check=True)  # fmt: skip
        print(f"  generated in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def gzip_beside(path: Path) -> Path:
    gz = Path(f"{path}.gz")
    if not gz.exists():
        import gzip
        import shutil

        with open(path, "rb") as src, gzip.open(f"{gz}.part", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        os.replace(f"{gz}.part", gz)
    return gz


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {cores} cores{mem}; Python {platform.python_version()}, {platform.system()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6", help="comma-separated event counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (median is shown)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tracekit-bench"))
    ap.add_argument("--skip", default="", help="comma-separated row names to leave out")
    ap.add_argument("--gz", action="store_true", help="also time gunzip and a .gz ingest")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    names = [n for n in SNIPPETS if n not in args.skip.split(",")]
    if not args.gz:
        names = [n for n in names if n not in GZ_ROWS]
    for module, row in (("orjson", "orjson+pass"), ("hta", "HTA load")):
        try:
            __import__(module)
        except ImportError:
            if row in names:
                names.remove(row)
    print(f"machine: {machine()}", flush=True)
    for size in (int(float(s)) for s in args.sizes.split(",")):
        path = trace_for(size, args.dir)
        if args.gz:
            gzip_beside(path)
        mb = path.stat().st_size / 1e6
        # Rounds, each running every row once: this VM's speed drifts within minutes, and
        # interleaving puts each round's rows under the same drift (ratios per round below).
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in names}
        for _ in range(args.repeat):
            for name in names:
                runs[name].append(run_one(name, path))
        rows: dict[str, tuple[float, int, int]] = {}
        for name, got in runs.items():
            secs = statistics.median(r[0] for r in got)
            rows[name] = (secs, max(r[1] for r in got), max(r[2] for r in got))
        # Rates use the file's traceEvents count (what every row reads); ingest keeps fewer
        # rows (metadata and flow events become thread names and correlations, not events).
        events = rows["json.load"][1] if "json.load" in rows else size
        stored = rows.get("ingest (cold)", (0.0, 0, 0))[1]
        base = rows.get("ingest (cold)", (0.0, 0, 0))[0]
        print(f"\n{path.name}: {events} trace events ({stored} stored as event rows), "
              f"{mb:.1f} MB, median of {args.repeat}")  # fmt: skip
        print(f"{'':16} {'seconds':>8} {'Mevents/s':>10} {'MB/s':>8} {'peak RSS':>9} "
              f"{'x ingest':>9}")  # fmt: skip
        for name, (secs, _, rss) in rows.items():
            ratio = f"{secs / base:8.2f}x" if base else ""
            print(f"{name:16} {secs:8.3f} {events / secs / 1e6:10.2f} {mb / secs:8.0f} "
                  f"{rss / 2**20:7.0f} M {ratio:>9}", flush=True)  # fmt: skip
        for num, den in (("ingest (cold)", "json.load"), ("ingest .gz (cold)", "ingest (cold)")):
            if num in runs and den in runs:
                per_round = [a[0] / b[0] for a, b in zip(runs[num], runs[den], strict=True)]
                listed = " ".join(f"{r:.2f}" for r in per_round)
                print(f"{num} / {den}, per round: {listed} "
                      f"(median {statistics.median(per_round):.2f})")  # fmt: skip
    print(f"\ncommand: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}")


if __name__ == "__main__":
    main()
