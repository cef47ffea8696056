"""Render reports and diffs of a list of traces into a folder, or compare two such folders.

A refactor that must not change the output is checked by rendering with the old code, then with
the new, and comparing the folders byte for byte:

    PYTHONPATH=/path/to/old python3 tools/compare_outputs.py render /tmp/before
    PYTHONPATH=/path/to/new python3 tools/compare_outputs.py render /tmp/after
    python3 tools/compare_outputs.py compare /tmp/before /tmp/after

`render` runs `python3 -m tracekit` with the caller's PYTHONPATH, so the code that renders is the
one PYTHONPATH names. Inputs default to every trace in /work/shared/traces (a folder of rank
traces is one input); diffs default to the shared before/after pairs. `compare` prints each file
that differs or exists on one side only and exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
from pathlib import Path

TRACES = Path("/work/shared/traces")
PAIRS = [
    ("nsys_2026_h100x2_mfu_before.sqlite", "nsys_2026_h100x2_mfu_after.sqlite"),
    ("kineto_trace_diff_control_hta.json.gz", "kineto_trace_diff_test_hta.json.gz"),
]
REPORT_FORMATS = ("json", "md", "html")
DIFF_FORMATS = ("md", "json", "html")


def default_inputs(folder: Path) -> list[Path]:
    """Every trace in the folder: .sqlite and .json.gz files, and folders of rank traces."""
    return sorted(
        p for p in folder.iterdir() if p.is_dir() or p.name.endswith((".sqlite", ".json.gz"))
    )


def _stem(path: Path) -> str:
    for suffix in (".sqlite", ".json.gz"):
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.name


def _run(args: list[str], log: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, check=False
    )
    with log.open("a") as f:
        f.write(f"$ tracekit {' '.join(args)}\nrc={proc.returncode}\n{proc.stderr}\n")
    if proc.returncode != 0:
        print(f"FAILED rc={proc.returncode}: tracekit {' '.join(args)}", file=sys.stderr)


def render(out: Path, inputs: list[Path], pairs: list[tuple[Path, Path]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"  # beside, so the folders compare only outputs
    for src in inputs:
        for fmt in REPORT_FORMATS:
            dest = out / f"{_stem(src)}.report.{fmt}"
            _run(["report", str(src), "--format", fmt, "-o", str(dest), "--force"], log)
            print(f"wrote {dest}")
    for a, b in pairs:
        for fmt in DIFF_FORMATS:
            dest = out / f"{_stem(a)}__vs__{_stem(b)}.diff.{fmt}"
            _run(["diff", str(a), str(b), "--format", fmt, "-o", str(dest), "--force"], log)
            print(f"wrote {dest}")


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differing = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"only in {'after' if not a.exists() else 'before'}: {name}")
            differing += 1
        elif not filecmp.cmp(a, b, shallow=False):
            print(f"differs: {name}")
            differing += 1
    print(f"{len(names)} files, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("render", help="render reports and diffs into OUT")
    r.add_argument("out", type=Path)
    r.add_argument("inputs", type=Path, nargs="*", help="traces (default: the shared set)")
    r.add_argument("--traces", type=Path, default=TRACES, help="folder of the default inputs")
    r.add_argument("--no-diff", action="store_true", help="skip the before/after diffs")
    c = sub.add_parser("compare", help="print the files that differ between two folders")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.mode == "compare":
        return compare(args.before, args.after)
    inputs = args.inputs or default_inputs(args.traces)
    pairs = [] if args.no_diff else [(args.traces / a, args.traces / b) for a, b in PAIRS]
    render(args.out, inputs, pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
