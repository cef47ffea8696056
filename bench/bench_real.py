"""Time tracekit on real traces, whole process, against a plain read of the same file.

    python bench/bench_real.py [FOLDER ...] [--rounds 3] [--dir /tmp/tracekit-bench-real]

Every trace in ../shared/traces (Kineto/Chrome JSON, plain or .gz, and nsys SQLite exports)
and in each FOLDER given is copied into --dir (so caches and reports land there, never
beside the originals), then measured in --rounds interleaved rounds (each round runs every
row of every trace once, so a drift in the machine's speed hits all rows alike); medians are
printed as a markdown table. Each row is its own process, timed from start to exit:

  baseline      the plain read a user would otherwise write, timed around the work only
                (imports and start-up excluded): json.load of the file (through gzip.open
                for .gz) for Kineto; for nsys, sqlite3 reading every row of every table
  cold ingest   `tracekit ingest TRACE` with an empty cache (TRACEKIT_CACHE_DIR empty, no
                store beside the copy): start-up + parse + store build
  cold report   `tracekit report TRACE -o report.html` with an empty cache: ingest + report
  warm report   the same again, the store cached
  warm sql      `tracekit sql TRACE "SELECT count(*) FROM events"`, the store cached
  peak RSS      of the cold ingest's process (ru_maxrss of RUSAGE_CHILDREN in a wrapper
                process of its own); its user + system CPU seconds are shown beside the
                wall time: on a loaded machine they tell tracekit's work from waiting

tracekit runs from this checkout with its bytecode compiled first, as an installed package
has it. The targets of issue 24: cold ingest <= max(0.5x json.load, 1.0 s); cold report <= 2x the
cold ingest. Start-up rows (once per round): `python -c pass` (the interpreter alone, a
measure of how loaded the machine is), `tracekit --help`, and the warm sql above.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
sys.path.insert(0, str(REPO / "bench"))

from bench_ingest import machine  # noqa: E402

BASELINE = """
import gzip, json, sqlite3, sys, time
path = sys.argv[1]
t0 = time.perf_counter()
if path.endswith(".sqlite"):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = bytes  # (some exports hold text that is not UTF-8)
    n = 0
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for _ in con.execute(f'SELECT * FROM "{table.decode()}"'):
            n += 1
else:
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        doc = json.load(f)
    n = len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)
print(time.perf_counter() - t0, n)
"""
ROWS = ("baseline", "cold ingest", "cold report", "warm report", "warm sql")
STARTUP = ("python -c pass", "tracekit --help", "warm sql")
SQL = "SELECT count(*) FROM events"


def is_trace(path: Path) -> bool:
    name = path.name
    return path.is_file() and (name.endswith((".json", ".json.gz", ".sqlite")))


def tracekit(*args: str) -> list[str]:
    return [sys.executable, "-m", "tracekit", *args]


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.cache = work / "cache"
        self.out = work / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, TRACEKIT_PROGRESS="0", TRACEKIT_CACHE_DIR=str(self.cache))
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
        )
        self.times: dict[tuple[str, str], list[float]] = {}
        self.rss: dict[str, list[int]] = {}
        self.events: dict[str, int] = {}

    def clear_cache(self, trace: Path) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)
        self.cache.mkdir(parents=True)
        for stale in trace.parent.glob(f"{glob_escape(trace.name)}.tracekit.duckdb*"):
            stale.unlink()  # (a store beside the copy: the cache of tracekit before issue 24)

    def note(self, trace: str, row: str, seconds: float) -> None:
        self.times.setdefault((trace, row), []).append(seconds)

    def measure(self, trace: Path) -> None:
        name = trace.name
        proc = subprocess.run([sys.executable, "-c", BASELINE, str(trace)],
                              capture_output=True, text=True)  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"baseline of {trace} failed:\n{proc.stderr[-3000:]}")
        out = proc.stdout.split()
        self.note(name, "baseline", float(out[0]))
        self.events[name] = int(out[1])
        self.clear_cache(trace)
        dt, rss, _ = run_isolated(tracekit("ingest", str(trace)), self.env, self.work)
        self.note(name, "cold ingest", dt)
        self.note(name, "cold ingest cpu", CPU_SECONDS[-1])
        self.rss.setdefault(name, []).append(rss)
        self.clear_cache(trace)
        report = self.out / f"{name}.report.html"
        argv = tracekit("report", str(trace), "-o", str(report), "--force")
        self.note(name, "cold report", run_isolated(argv, self.env, self.work)[0])
        self.note(name, "warm report", run_isolated(argv, self.env, self.work)[0])
        dt = run_isolated(tracekit("sql", str(trace), SQL), self.env, self.work)[0]
        self.note(name, "warm sql", dt)
        self.note("(start-up)", "warm sql", dt)
        self.note("(start-up)", "warm sql cpu", CPU_SECONDS[-1])

    def startup(self) -> None:
        for row, argv in (("python -c pass", [sys.executable, "-c", "pass"]),
                          ("tracekit --help", tracekit("--help"))):  # fmt: skip
            self.note("(start-up)", row, run_isolated(argv, self.env, self.work)[0])
            self.note("(start-up)", row + " cpu", CPU_SECONDS[-1])

    def median(self, trace: str, row: str) -> float:
        return statistics.median(self.times[(trace, row)])


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def run_isolated(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    """run() in a process of its own (`python -c` that runs argv and reports its child's
    wall time and ru_maxrss), so each measurement's peak RSS is its own."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "dt = time.perf_counter() - t0\n"
        "sys.stderr.write(p.stderr)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(dt, u.ru_maxrss, p.returncode, u.ru_utime + u.ru_stime)\n"
        "sys.stdout.write(p.stdout)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=env, cwd=cwd)  # fmt: skip
    first, _, rest = proc.stdout.partition("\n")
    dt, rss_kib, rc, cpu = first.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(argv)} failed ({rc}):\n{proc.stderr[-3000:]}")
    CPU_SECONDS.append(float(cpu))
    return float(dt), int(rss_kib) * 1024, rest


CPU_SECONDS: list[float] = []  # user + system seconds of each run_isolated, in order


def table(b: Bench, traces: list[Path]) -> str:
    lines = [
        "| trace | events | MiB | baseline s | cold ingest s (cpu s) | ingest / baseline "
        "| target s | ingest ok | cold report s | report / ingest | warm report s | warm sql s "
        "| peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|",
    ]
    for t in traces:
        n = t.name
        base, ingest = b.median(n, "baseline"), b.median(n, "cold ingest")
        cold, warm, sql = (b.median(n, r) for r in ("cold report", "warm report", "warm sql"))
        target = max(0.5 * base, 1.0)
        rss = statistics.median(b.rss[n]) / 2**20
        mib = t.stat().st_size / 2**20
        kind = "sqlite3 scan" if n.endswith(".sqlite") else "json.load"
        lines.append(
            f"| {n} | {b.events[n]:,} | {mib:.2f} | {base:.3f} ({kind}) | {ingest:.2f} "
            f"({b.median(n, 'cold ingest cpu'):.2f}) "
            f"| {ingest / base:.1f}x | {target:.2f} | {'yes' if ingest <= target else 'NO'} "
            f"| {cold:.2f} | {cold / ingest:.2f}x {'ok' if cold <= 2 * ingest else 'NO'} "
            f"| {warm:.2f} | {sql:.2f} | {rss:.0f} |"
        )
    lines.append("")
    lines.append("| start-up (median) | wall s | cpu s (user + sys) |")
    lines.append("|---|---:|---:|")
    for row in STARTUP:
        wall, cpu = b.median("(start-up)", row), b.median("(start-up)", row + " cpu")
        lines.append(f"| {row} | {wall:.3f} | {cpu:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="more folders of traces")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median shown)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tracekit-bench-real"))
    ap.add_argument("--only", default="", help="substring a trace's name must contain")
    args = ap.parse_args()
    sources = sorted(p for folder in [SHARED, *args.folders] if folder.is_dir()
                     for p in folder.iterdir() if is_trace(p) and args.only in p.name)  # fmt: skip
    if not sources:
        raise SystemExit(f"no traces in {SHARED} or {args.folders}")
    copies = args.dir / "traces"
    copies.mkdir(parents=True, exist_ok=True)
    traces = []
    for src in sources:
        dst = copies / src.name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            shutil.copyfile(src, dst)
        traces.append(dst)
    # tracekit as installed: pip compiles its bytecode at install time. A checkout run with
    # PYTHONDONTWRITEBYTECODE=1 (as on the machines here) has none and would compile every
    # module in every process: ~35 ms of each ingest. (Written beside the sources, git-ignored.)
    compileall.compile_dir(REPO / "tracekit", quiet=1)
    print(f"machine: {machine()}", flush=True)
    uptime = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"load average at start: {' '.join(uptime)}", flush=True)
    bench = Bench(args.dir)
    t0 = time.perf_counter()
    for r in range(args.rounds):
        bench.startup()
        for t in traces:
            bench.measure(t)
        print(f"  round {r + 1}/{args.rounds} done ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)  # fmt: skip
        print(table(bench, traces), file=sys.stderr, flush=True)  # (so far: a crash loses less)
    uptime = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"load average at end: {' '.join(uptime)}; medians of {args.rounds} rounds\n")
    print(table(bench, traces))


if __name__ == "__main__":
    main()
