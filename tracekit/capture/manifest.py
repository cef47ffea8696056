"""capture.json: what a capture ran, with which versions, and which files it wrote."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from tracekit.atomic import write_text_atomic
from tracekit.version import __version__

MANIFEST = "capture.json"
MANIFEST_VERSION = 1

ROLES = {
    ".sqlite": "nsys-sqlite",
    ".nsys-rep": "nsys-report",
    ".qdstrm": "nsys-qdstrm",
    ".json": "torch-trace",
    ".jsonl": "attributes",
}


def file_entries(
    run_dir: Path, files: list[Path], run: str, traces: list[Path]
) -> list[dict[str, Any]]:
    """Entries for capture.json: path relative to the run dir, role, run, size; attribute
    sidecars also name the trace files of the same run they describe."""
    rel_traces = [str(t.relative_to(run_dir)) for t in traces]
    entries = []
    for f in sorted(files):
        role = ROLES.get(f.suffix, "other")
        entry: dict[str, Any] = {"path": str(f.relative_to(run_dir)), "role": role, "run": run,
                                 "bytes": f.stat().st_size}  # fmt: skip
        if role == "attributes":
            entry["traces"] = rel_traces
        entries.append(entry)
    return entries


def versions(nsys_version: str | None, probe: dict[str, Any]) -> dict[str, str | None]:
    return {
        "tracekit": __version__,
        "python": probe.get("python") or platform.python_version(),
        "torch": probe.get("torch"),
        "nvtx": probe.get("nvtx"),
        "nsys": nsys_version,
    }


def write_manifest(run_dir: Path, data: dict[str, Any]) -> Path:
    path = run_dir / MANIFEST
    body = {"manifest_version": MANIFEST_VERSION, **data}
    write_text_atomic(path, json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_manifest(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / MANIFEST).read_text()))
