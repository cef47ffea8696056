"""Nsight Systems: find it, build `nsys profile` argv, repair a leftover .qdstrm, export SQLite."""

from __future__ import annotations

import functools
import glob
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tracekit.capture.process import run_bounded

BASE_TRACES = ("cuda", "nvtx", "osrt")
OPTIONAL_TRACES = ("cudnn", "cublas")
IMPORTER = "QdstrmImporter"
_IMPORTER_GLOBS = (
    "/usr/lib/nsight-systems/host-linux-x64",
    "/opt/nvidia/nsight-systems/*/host-linux-x64",
    "/usr/local/cuda*/nsight-systems*/host-linux-x64",
    "/usr/local/cuda*/NsightSystems*/host-linux-x64",
)


@dataclass(frozen=True)
class Nsys:
    path: Path
    version: str  # e.g. '2022.4.2.1'

    @property
    def year(self) -> int:
        m = re.match(r"(\d{4})", self.version)
        return int(m.group(1)) if m else 0


def find_nsys(path_env: str | None = None) -> Nsys | None:
    """nsys on PATH (or on `path_env`) with its version; None when absent or broken."""
    exe = shutil.which("nsys", path=path_env)
    if exe is None:
        return None
    version = nsys_version(exe)
    return Nsys(Path(exe), version) if version else None


@functools.lru_cache(maxsize=8)
def nsys_version(exe: str) -> str:
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out)
    return m.group(1) if m else ""


@functools.lru_cache(maxsize=8)
def supported_traces(exe: str) -> tuple[str, ...]:
    """The `-t` values this nsys accepts: cuda,nvtx,osrt plus cudnn,cublas when listed."""
    try:
        text = subprocess.run(
            [exe, "profile", "--help"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    m = re.search(r"--trace=(.*?)Select the API", text, re.S)
    listed = set(re.findall(r"'([a-z0-9-]+)'", m.group(1))) if m else set()
    return BASE_TRACES + tuple(t for t in OPTIONAL_TRACES if t in listed)


def find_importer(nsys: Nsys) -> Path | None:
    """QdstrmImporter beside the nsys install (resolved through symlinks) or in usual places."""
    real = nsys.path.resolve()
    candidates = [p / "host-linux-x64" / IMPORTER for p in list(real.parents)[:3]]
    for pattern in _IMPORTER_GLOBS:
        candidates += [Path(d) / IMPORTER for d in sorted(glob.glob(pattern))]
    return next((c for c in candidates if c.is_file()), None)


def profile_argv(
    nsys: Nsys, output: Path, command: list[str], duration: float | None, cuda: bool = True
) -> list[str]:
    """`nsys profile` for one run. CPU sampling and context switches are off: they make the
    report large and slow to import, and tracekit reads neither."""
    traces = [t for t in supported_traces(str(nsys.path)) if cuda or t == "nvtx" or t == "osrt"]
    argv = [str(nsys.path), "profile", "-t", ",".join(traces), "-s", "none",
            "--cpuctxsw", "none", "-f", "true", "-o", str(output)]  # fmt: skip
    if duration:
        argv += ["-d", f"{duration:g}"]
    return argv + command


def report_paths(output: Path) -> tuple[Path, Path]:
    """The report `nsys profile -o output` writes, and the .qdstrm it leaves when it cannot
    import it."""
    return output.with_name(output.name + ".nsys-rep"), output.with_name(output.name + ".qdstrm")


def finish_report(nsys: Nsys, output: Path, timeout: float | None) -> tuple[list[Path], list[str]]:
    """After `nsys profile -o output`: import a leftover .qdstrm, export SQLite.

    Returns (files written, notices)."""
    notices: list[str] = []
    rep, qdstrm = report_paths(output)
    if not rep.exists() and qdstrm.exists():
        importer = find_importer(nsys)
        if importer is None:
            notices.append(
                f"nsys left {qdstrm.name} and no {IMPORTER} was found: import it by hand "
                f"({IMPORTER} -i {qdstrm}) or fix the nsys install (tracekit doctor)"
            )
            return [qdstrm], notices
        notices.append(f"nsys could not import its own report; imported it with {importer}")
        res = run_bounded([str(importer), "-f", "-i", str(qdstrm)], timeout=timeout, quiet=True)
        if res.returncode != 0 or not rep.exists():
            notices.append(f"{IMPORTER} failed (exit {res.returncode}); kept {qdstrm.name}")
            return [qdstrm], notices
        qdstrm.unlink()
    if not rep.exists():
        notices.append("nsys wrote no report")
        return [], notices
    sqlite = output.with_name(output.name + ".sqlite")
    res = run_bounded(
        [str(nsys.path), "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(rep)],
        timeout=timeout,
        quiet=True,
    )
    if res.returncode != 0 or not sqlite.exists():
        notices.append(f"nsys export --type sqlite failed (exit {res.returncode}): {res.tail}")
        return [rep], notices
    return [rep, sqlite], notices
