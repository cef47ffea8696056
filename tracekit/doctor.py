"""`tracekit doctor`: is this machine ready to capture and read traces? Each check is data;
the command prints them. A `fail` is a missing essential or a known trap (exit 1)."""

from __future__ import annotations

import importlib.metadata
import subprocess
from dataclasses import dataclass
from typing import Literal

from tracekit.capture.nsys_runner import IMPORTER, find_importer, find_nsys
from tracekit.capture.stage_clock import NVTX_TRAP, version_tuple

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nsys_checks() -> tuple[list[Check], int | None]:
    nsys = find_nsys()
    if nsys is None:
        return [
            Check(
                "nsys",
                "warn",
                "not on PATH: captures will be torch.profiler-only",
                "install Nsight Systems (Debian: nsight-systems from non-free)",
            )
        ], None
    checks = [Check("nsys", "ok", f"{nsys.version} at {nsys.path}")]
    importer = find_importer(nsys)
    own = nsys.path.resolve().parent.parent / "host-linux-x64" / IMPORTER
    if importer is None:
        checks.append(Check("importer", "fail", f"{IMPORTER} not found: nsys leaves only .qdstrm",
                            "reinstall Nsight Systems (host part: nsight-systems)"))  # fmt: skip
    elif not own.is_file():
        checks.append(Check(
            "importer", "warn",
            f"nsys will not find {importer} itself (leaves .qdstrm); tracekit capture imports it",
            f"ln -sfn {importer.parent} {own.parent}",
        ))  # fmt: skip
    else:
        checks.append(Check("importer", "ok", str(importer)))
    try:
        res = subprocess.run([str(nsys.path), "stats", "--help-reports"], capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
        # nsys 2022.4 exits 1 after listing its reports: the listing is what counts.
        listing = res.stdout + res.stderr
        ok = "nvtxsum" in listing or "nvtx_sum" in listing
        detail = "reports available" if ok else f"exit {res.returncode}, no reports listed"
    except (OSError, subprocess.TimeoutExpired) as e:
        ok, detail = False, str(e)
    checks.append(
        Check(
            "nsys stats",
            "ok" if ok else "warn",
            detail,
            "" if ok else "nsys stats is the oracle for tests; check the install",
        )
    )
    return checks, nsys.year


def _torch_check() -> Check:
    if _version("torch") is None:
        return Check("torch", "warn", "not installed: no torch.profiler captures",
                     "pip install torch")  # fmt: skip
    try:
        import torch

        cuda = torch.cuda.is_available()
        devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as e:  # a broken torch install
        return Check("torch", "fail", f"import failed: {e}", "reinstall torch")
    where = f"CUDA available: {', '.join(devices)}" if cuda else "CUDA not available (CPU only)"
    return Check("torch", "ok", f"{torch.__version__}; {where}")


def _sqlite_extension_check() -> Check:
    try:
        from tracekit.ingest.nsys_source import extension_path  # lazy: duckdb, only for this check

        ext = extension_path()
    except ImportError:
        ext = None
    if ext is None:
        return Check(
            "duckdb sqlite",
            "warn",
            "duckdb-extension-sqlite-scanner not installed: nsys files read via sqlite3",
            f"pip install duckdb-extension-sqlite-scanner=={_version('duckdb')}",
        )
    return Check("duckdb sqlite", "ok", str(ext))


def run_checks() -> list[Check]:
    checks, nsys_year = _nsys_checks()
    checks.append(_torch_check())
    nvtx = _version("nvtx")
    if nvtx is None:
        checks.append(Check("nvtx", "warn", "not installed: no NVTX stage ranges for nsys",
                            "pip install 'nvtx>=0.2.10,<0.2.13'"))  # fmt: skip
    elif nsys_year is not None and nsys_year < 2023 and version_tuple(nvtx) >= NVTX_TRAP:
        checks.append(Check(
            "nvtx", "fail",
            f"nvtx {nvtx} with nsys {nsys_year}.x: nsys silently drops EVERY NVTX range "
            "(nvtx >= 0.2.13 calls nvtxDomainIsEnabled, which nsys older than 2023 lacks)",
            "pip install 'nvtx>=0.2.10,<0.2.13'  (or install nsys 2023.1 or newer)",
        ))  # fmt: skip
    else:
        checks.append(Check("nvtx", "ok", nvtx))
    checks.append(_sqlite_extension_check())
    if not any(c.name in ("nsys", "torch") and c.status == "ok" for c in checks):
        checks.append(Check("capture", "fail", "neither nsys nor torch is usable",
                            "install Nsight Systems or torch"))  # fmt: skip
    return checks
