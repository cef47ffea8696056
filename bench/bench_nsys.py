"""Time tracekit on nsys SQLite exports against `nsys stats -r gpukernsum` on the same file.

    python bench/bench_nsys.py [--kernels 1e6,5e6] [--repeat 1] [--dir /tmp/tkbench-nsys]
                               [--lock /tmp/bench.lock]

For each kernel count, bench/gen_nsys.py writes an export (kept in --dir and reused when it is
already there), then each measurement runs in its own fresh process, timed around the work
only (imports excluded), with that process's peak RSS:

  ingest (cold)      tracekit.store.build.ensure_trace_store(path, [], refresh=True): read the
                     export, derive, write the store
  kernel summary     tracekit.open on the cached store + the top_kernels query (every kernel
                     kept: limit 10**9)
  ingest + summary   the sum of the two rows above (what `tracekit query top_kernels` costs
                     on a trace seen for the first time)
  cold report        `python -m tracekit report FILE` in a fresh process with an empty cache
                     (ingest, every report query, the HTML written)
  warm report        the same with the store the cold run left
  nsys stats (5 reports)  `nsys stats -r nvtxkernsum,gpukernsum,cudaapisum,nvtxsum,
                     gpumemtimesum`: the same insight from nsys alone
  nsys gpukernsum    `nsys stats -q -r gpukernsum --format csv -o <tmp> <file>.sqlite`
                     (cuda_gpu_kern_sum on nsys 2023.1+); given the .sqlite itself, nsys
                     reads it directly: there is no .nsys-rep to export or reuse. Peak RSS
                     is the largest process nsys ran.

Then it checks that top_kernels' per-kernel count and total time, summed over stages, equal
gpukernsum's, summed over grid/block rows (OK / MISMATCH). With --lock, every measurement
runs under `flock <lock>` (the lock is held for one measurement at a time, and the wait is
not timed), so runs do not overlap with other benchmarks on a shared machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench_ingest import SNIPPETS as KINETO_SNIPPETS  # noqa: E402  (same rows, same child)
from bench_ingest import child_env, machine  # noqa: E402

# The work of a whole-process row: `cmd` run with `env`, failing the benchmark if it fails.
_RUN = (
    "p = subprocess.run(cmd, capture_output=True, text=True, env=env)\n"
    "assert p.returncode == 0, p.stderr[-2000:]\n"
    "N = 0"
)


def _report(cold: bool) -> tuple[str, str]:
    """`python -m tracekit report FILE` as a user runs it, with OUT/cache as its cache: emptied
    first for the cold run, the store the cold run left for the warm one."""
    clear = "shutil.rmtree(cache, ignore_errors=True)\n" if cold else ""
    return (
        "import os, shutil, subprocess, sys\n"
        "cache = os.path.join(OUT, 'cache')\n" + clear +
        "env = dict(os.environ, TRACEKIT_CACHE_DIR=cache)\n"
        "cmd = [sys.executable, '-m', 'tracekit', 'report', PATH, '--force', '-o',\n"
        "       os.path.join(OUT, 'report.html')]",
        _RUN,
    )  # fmt: skip


def _nsys_stats(out_name: str, reports: str) -> tuple[str, str]:
    """`nsys stats -r <reports>` to CSV files OUT/<out_name>_<report>.csv (`reports` names a
    variable of the child: REPORT or FIVE)."""
    return (
        "import os, shutil, subprocess\n"
        "env = None\n"
        "cmd = [shutil.which('nsys'), 'stats', '-q', '--force-overwrite', 'true', '--format',\n"
        f"       'csv', '-o', os.path.join(OUT, '{out_name}'), '-r', {reports}, PATH]",
        _RUN,
    )


# Each snippet gets PATH and OUT (a scratch folder) and must set N after the timed work.
SNIPPETS = {
    "ingest (cold)": KINETO_SNIPPETS["ingest (cold)"],
    "kernel summary": (
        "import json, os, tracekit",
        "t = tracekit.open(PATH, stage_rules=[])\n"
        "df = t.query('top_kernels', limit=10**9)\n"
        "t.close(); N = len(df)\n"
        "json.dump(df.select('stage', 'name', 'count', 'total_ms').rows(),\n"
        "          open(os.path.join(OUT, 'top_kernels.json'), 'w'))"),
    "cold report": _report(cold=True),
    "warm report": _report(cold=False),
    "nsys stats (5 reports)": _nsys_stats("stats5", "FIVE"),
    "nsys gpukernsum": _nsys_stats("stats", "REPORT"),
}  # fmt: skip

CHILD = """
import resource, sys, time
PATH, OUT, REPORT, FIVE = sys.argv[1:5]
{setup}
t0 = time.perf_counter()
{work}
dt = time.perf_counter() - t0
rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
print(dt, N, rss)
"""


def report_name() -> str:
    """gpukernsum (nsys <= 2022.x) or cuda_gpu_kern_sum (2023.1+), whichever nsys has."""
    out = subprocess.run(["nsys", "stats", "--help-reports"], capture_output=True, text=True,
                         timeout=120, check=False).stdout  # fmt: skip
    return "cuda_gpu_kern_sum" if "cuda_gpu_kern_sum" in out else "gpukernsum"


def five_reports(kern: str) -> str:
    """What a user runs for tracekit's insight with nsys alone: kernels per NVTX range, kernels,
    CUDA API, NVTX ranges, memory operations (2023.1+ names where nsys has them)."""
    if kern == "gpukernsum":
        return "nvtxkernsum,gpukernsum,cudaapisum,nvtxsum,gpumemtimesum"
    return "nvtx_kern_sum,cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,cuda_gpu_mem_time_sum"


def run_one(name: str, path: Path, out: Path, report: str, lock: str) -> tuple[float, int, int]:
    """(seconds, rows, peak RSS bytes) of one measurement in a fresh process."""
    setup, work = SNIPPETS[name]
    code = CHILD.format(setup=setup, work=work)
    cmd = [sys.executable, "-c", code, str(path), str(out), report, five_reports(report)]
    if lock:
        cmd = ["flock", lock, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{name} on {path} failed:\n{proc.stderr[-3000:]}")
    dt, n, rss_kib = proc.stdout.split("\n")[-2].split()
    return float(dt), int(n), int(rss_kib) * 1024


def export_for(kernels: int, folder: Path) -> Path:
    path = folder / f"nsys_{kernels:.0e}.sqlite".replace("+", "")
    if not path.exists():
        part = path.with_name(path.name + ".part")  # a killed generation is never reused
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_nsys.py"),
                        "--kernels", str(kernels), "-o", str(part)], check=True)  # fmt: skip
        os.replace(part, path)
        print(f"  generated in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def check_totals(out: Path, report: str) -> str:
    """OK when top_kernels and gpukernsum give every kernel the same count and total ns."""
    ours: dict[str, list[int]] = {}
    for _stage, name, count, total_ms in json.loads((out / "top_kernels.json").read_text()):
        acc = ours.setdefault(name, [0, 0])
        acc[0] += int(count)
        acc[1] += round(total_ms * 1e6)
    theirs: dict[str, list[int]] = {}
    with open(out / f"stats_{report}.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            acc = theirs.setdefault(row["Name"], [0, 0])
            acc[0] += int(row["Instances"])
            acc[1] += int(row["Total Time (ns)"])
    if ours == theirs:
        return f"OK ({len(ours)} kernels, {sum(v[0] for v in ours.values())} launches)"
    diff = [(k, ours.get(k), theirs.get(k)) for k in sorted(set(ours) | set(theirs))
            if ours.get(k) != theirs.get(k)][:4]  # fmt: skip
    return f"MISMATCH (name, tracekit [count, ns], nsys [count, ns]): {diff}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="1e6,5e6", help="comma-separated kernel counts")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row (median is shown)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tkbench-nsys"))
    ap.add_argument("--lock", default="", help="run each measurement under `flock LOCK`")
    ap.add_argument("--skip", default="", help="comma-separated row names to leave out")
    args = ap.parse_args()
    if shutil.which("nsys") is None:
        raise SystemExit("nsys is not on PATH: install Nsight Systems (docs/environment.md)")
    args.dir.mkdir(parents=True, exist_ok=True)
    report = report_name()
    names = [n for n in SNIPPETS if n not in args.skip.split(",")]
    print(f"machine: {machine()}", flush=True)
    for kernels in (int(float(k)) for k in args.kernels.split(",")):
        path = export_for(kernels, args.dir)
        rows: dict[str, tuple[float, int, int]] = {}
        with tempfile.TemporaryDirectory(prefix="tkbench-nsys-") as tmp:
            out = Path(tmp)
            if "kernel summary" in names and "ingest (cold)" not in names:
                run_one("ingest (cold)", path, out, report, args.lock)  # summary needs a store
            for name in names:
                runs = [run_one(name, path, out, report, args.lock) for _ in range(args.repeat)]
                secs = statistics.median(r[0] for r in runs)
                rows[name] = (secs, max(r[1] for r in runs), max(r[2] for r in runs))
            ok = ""
            if "kernel summary" in rows and "nsys gpukernsum" in rows:
                ok = check_totals(out, report)
        if "ingest (cold)" in rows and "kernel summary" in rows:
            a, b = rows["ingest (cold)"], rows["kernel summary"]
            rows["ingest + summary"] = (a[0] + b[0], a[1], max(a[2], b[2]))
        base = rows.get("ingest + summary", (0.0, 0, 0))[0]
        events = rows.get("ingest (cold)", (0.0, 0, 0))[1]
        mb = path.stat().st_size / 1e6
        print(f"\n{path.name}: {kernels} kernels, {events} event rows stored, {mb:.0f} MB, "
              f"median of {args.repeat}")  # fmt: skip
        print(f"{'':24} {'seconds':>8} {'Mkernels/s':>11} {'peak RSS':>9} {'x tracekit':>11}")
        for name, (secs, _, rss) in rows.items():
            ratio = f"{secs / base:10.2f}x" if base else ""
            print(f"{name:24} {secs:8.2f} {kernels / secs / 1e6:11.2f} {rss / 2**20:7.0f} M "
                  f"{ratio:>11}", flush=True)  # fmt: skip
        five = rows.get("nsys stats (5 reports)", (0.0, 0, 0))[0]
        for name, target in (("cold report", 1.0), ("warm report", 0.2)):
            if five and name in rows:
                ratio = rows[name][0] / five
                verdict = "met" if ratio <= target else "not met"
                print(
                    f"{name} / nsys stats (5 reports): {ratio:.2f}x (target {target}x: {verdict})"
                )
        if ok:
            print(f"per-kernel totals, top_kernels vs {report}: {ok}")
    print(f"\ncommand: {' '.join([Path(sys.executable).name, *sys.argv])}")
    version = subprocess.run(["nsys", "--version"], capture_output=True, text=True, check=False)
    print(f"nsys: {version.stdout.strip()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}")


if __name__ == "__main__":
    main()
