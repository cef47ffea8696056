"""The oracle for nsys ingest: nsys's own `nsys stats` reports, run on the same file.

Runs the installed nsys (2022.4 short report names, or the 2023.1+ long names when the
installed nsys has them), parses its CSV output, and folds it into plain dicts that the tests
compare with the store.
"""

from __future__ import annotations

import csv
import shutil
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

from tests import procs

# Our name for a report -> (2023.1+ name, 2022.4 name).
REPORTS = {
    "nvtxsum": ("nvtx_sum", "nvtxsum"),
    "gpukernsum": ("cuda_gpu_kern_sum", "gpukernsum"),
    "cudaapisum": ("cuda_api_sum", "cudaapisum"),
    "gpumemtimesum": ("cuda_gpu_mem_time_sum", "gpumemtimesum"),
    "nvtxgpuproj": ("nvtx_gpu_proj_trace", "nvtxgpuproj"),
}


def nsys_path() -> str | None:
    return shutil.which("nsys")


@cache
def available_reports() -> frozenset[str]:
    nsys = nsys_path()
    if nsys is None:
        return frozenset()
    out = procs.run(
        [nsys, "stats", "--help-reports"], capture_output=True, text=True, check=False
    ).stdout
    names = set()
    for line in out.splitlines():
        word = line.strip().split(" ", 1)[0]
        if word and "--" not in word:
            names.add(word.split("[", 1)[0])
    return frozenset(names)


def report_name(ours: str) -> str:
    new, old = REPORTS[ours]
    return new if new in available_reports() else old


def run_stats(sqlite: Path, reports: list[str], outdir: Path) -> dict[str, list[dict[str, str]]]:
    """Run `nsys stats --format csv` for our report names; {ours: rows} ([] = no data)."""
    nsys = nsys_path()
    assert nsys is not None, "nsys is not on PATH"
    outdir.mkdir(parents=True, exist_ok=True)
    names = {ours: report_name(ours) for ours in reports}
    prefix = outdir / "stats"
    cmd = [
        nsys,
        "stats",
        "-q",
        "--force-overwrite",
        "true",
        "--format",
        "csv",
        "-o",
        str(prefix),
        "-r",
        ",".join(names.values()),
        str(sqlite),
    ]
    proc = procs.run(cmd, capture_output=True, text=True, check=False)  # a hang fails the test
    out: dict[str, list[dict[str, str]]] = {}
    for ours, theirs in names.items():
        f = Path(f"{prefix}_{theirs}.csv")
        if not f.is_file():
            # nsys skips a report whose tables are missing ("does not contain ... data").
            out[ours] = []
            continue
        with open(f, newline="") as fh:
            out[ours] = list(csv.DictReader(fh))
    if proc.returncode not in (0,) and not any(out.values()):
        raise AssertionError(f"`nsys stats` failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out


def _get(row: dict[str, str], *keys: str) -> str:
    for k in keys:
        if k in row:
            return row[k]
    raise KeyError(f"none of {keys} in {list(row)}")


def totals(rows: list[dict[str, str]], name_keys: tuple[str, ...]) -> dict[str, list[int]]:
    """{name: [count, total_ns]} summed over rows of one name (gpukernsum splits by grid)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        name = _get(r, *name_keys)
        count = int(_get(r, "Instances", "Num Calls", "Count"))
        acc[name][0] += count
        acc[name][1] += int(_get(r, "Total Time (ns)", "Total Time"))
    return dict(acc)


def nvtx_sum(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(range name, style): {count, total, avg, med, min, max, stddev}} from nvtxsum."""
    out = {}
    for r in rows:
        out[(_get(r, "Range", "Name"), r.get("Style", ""))] = {
            "count": int(_get(r, "Instances")),
            "total": int(_get(r, "Total Time (ns)")),
            "avg": float(_get(r, "Avg (ns)")),
            "med": float(_get(r, "Med (ns)")),
            "min": int(_get(r, "Min (ns)")),
            "max": int(_get(r, "Max (ns)")),
            "stddev": float(_get(r, "StdDev (ns)")),
        }
    return out


def gpu_projection(rows: list[dict[str, str]]) -> dict[tuple[str, int, int], tuple[int, ...]]:
    """{(name, orig start, tid): (proj start, proj dur, gpu ops, level, children)}."""
    out = {}
    for r in rows:
        key = (_get(r, "Name"), int(_get(r, "Orig Start (ns)")), int(_get(r, "TID")))
        out[key] = (
            int(_get(r, "Projected Start (ns)")),
            int(_get(r, "Projected Duration (ns)")),
            int(_get(r, "NumGPUOps")),
            int(_get(r, "Lvl")),
            int(_get(r, "NumChild")),
        )
    return out
