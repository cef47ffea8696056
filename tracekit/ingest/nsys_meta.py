"""Trace-level facts of an nsys export: versions, host, GPUs, clock offset, safe metadata.

Read with sqlite3 from the small key/value and TARGET_INFO tables. Environment variables,
command lines, user names and absolute paths are never copied (they hold secrets and private
paths): metadata only records that they exist.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from tracekit.ingest.common import int64_or_none
from tracekit.ingest.nsys_source import Probe, key_values

# Export-metadata keys safe to keep (no paths, users or hosts).
SAFE_META_KEYS = (
    "EXPORT_PRODUCT_NAME",
    "EXPORT_PRODUCT_VERSION",
    "EXPORT_SCHEMA_VERSION",
    "EXPORT_PLATFORM",
    "EXPORT_ARCH",
    "EXPORT_TIME_UTC",
    "EXPORT_LAZY",
    "EXPORT_PARAM_LAZY",
)
SAFE_CAPTURE_KEYS = ("RUN_DURATION_MS", "CUDA_GRAPH_TRACE_OPTIONS:MODE", "CUDA_TRACE_SCOPE")
SAFE_ENV_KEYS = ("CudaDriverVersion", "NvDriverVersion", "CpuCores", "OsDescription")
SECRET_MARKERS = ("ENVIRONMENT", "COMMAND", "ARGUMENT", "WORKING_DIR", "USER", "PATH")
GPU_FIELDS = (
    "busLocation",
    "uuid",
    "chipName",
    "totalMemory",
    "smCount",
    "clockRate",
    "memoryBandwidth",
    "l2CacheSize",
    "computeMajor",
    "computeMinor",
    "isDiscrete",
)


def export_meta(con: sqlite3.Connection, p: Probe) -> tuple[str | None, dict[str, str]]:
    """(table name, key/values) of META_DATA_EXPORT (newer) or EXPORT_META_DATA (<= 2022)."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in p.columns:
            return table, key_values(con, p, table)
    return None, {}


def _rows(con: sqlite3.Connection, p: Probe, table: str) -> list[dict[str, Any]]:
    if not p.has(table):
        return []
    cur = con.execute(f'SELECT * FROM "{table}"')
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def devices(con: sqlite3.Connection, p: Probe) -> list[dict[str, Any]]:
    """GPUs from TARGET_INFO_GPU, with per-process CUDA ordinals from TARGET_INFO_CUDA_DEVICE.

    `id` is the CUDA ordinal (what events.device holds) when nsys recorded one, and
    `nsys_gpu_id` is nsys's own GPU id.
    """
    cuda = _rows(con, p, "TARGET_INFO_CUDA_DEVICE")
    out = []
    for g in _rows(con, p, "TARGET_INFO_GPU"):
        d: dict[str, Any] = {
            "id": g.get("cuDevice", g.get("id")),
            "nsys_gpu_id": g.get("id"),
            "name": g.get("name"),
        }
        d.update({k: g[k] for k in GPU_FIELDS if g.get(k) not in (None, "")})
        procs = [
            {"pid": c.get("pid"), "cuda_id": c.get("cudaId")}
            for c in cuda
            if c.get("gpuId") == g.get("id")
        ]
        if procs:
            d["processes"] = procs
        out.append(d)
    if not out:
        for c in cuda:
            out.append(
                {
                    "id": c.get("cudaId"),
                    "nsys_gpu_id": c.get("gpuId"),
                    "name": c.get("name"),
                    "uuid": c.get("uuid"),
                    "pid": c.get("pid"),
                }
            )
    return out


def clock_offset(con: sqlite3.Connection, p: Probe) -> tuple[int | None, dict[str, Any]]:
    """Unix-epoch ns of event time 0, and the session facts it came from.

    wall = utcEpochNs + t for exports on a session-relative clock (2022.x-2024.x). Exports
    that keep the raw clock also write systemClockNs (the raw time of session start), so
    wall = utcEpochNs + (t - systemClockNs) there.
    """
    rows = _rows(con, p, "TARGET_INFO_SESSION_START_TIME")
    if not rows or rows[0].get("utcEpochNs") is None:
        return None, {}
    r = rows[0]
    utc, raw = int64_or_none(r["utcEpochNs"]), int64_or_none(r.get("systemClockNs") or 0)
    if utc is None or raw is None or int64_or_none(utc - raw) is None:
        return None, {}  # not a time stamp (text, a REAL, wider than 64 bits): no wall clock
    offset = utc - raw
    return offset, {
        "utcEpochNs": r["utcEpochNs"],
        "utcTime": r.get("utcTime"),
        "systemClockNs": r.get("systemClockNs"),
    }


def host_and_env(con: sqlite3.Connection, p: Probe) -> tuple[str | None, dict[str, Any]]:
    """Target host name and a few harmless system facts; secrets only noted as present."""
    if "TARGET_INFO_SYSTEM_ENV" not in p.columns:
        return None, {}
    env = key_values(con, p, "TARGET_INFO_SYSTEM_ENV")
    facts: dict[str, Any] = {k: env[k] for k in SAFE_ENV_KEYS if env.get(k) is not None}
    if "DeviceEnvironment" in env:
        facts["environment_recorded"] = True  # the value itself is never copied
    host = env.get("Hostname")
    return (host if host else None), facts


def capture_meta(con: sqlite3.Connection, p: Probe) -> dict[str, Any]:
    """Safe capture settings of META_DATA_CAPTURE; counts of the redacted ones."""
    if "META_DATA_CAPTURE" not in p.columns or not p.col("META_DATA_CAPTURE", "name"):
        return {}
    out: dict[str, Any] = {}
    redacted = 0
    for name, value in con.execute('SELECT name, value FROM "META_DATA_CAPTURE"'):
        key = str(name)
        if key in SAFE_CAPTURE_KEYS:
            out[key] = value
        elif any(m in key.upper() for m in SECRET_MARKERS):
            redacted += 1
    if redacted:
        out["redacted_entries"] = redacted
    return out


def analysis(con: sqlite3.Connection, p: Probe) -> dict[str, Any]:
    rows = _rows(con, p, "ANALYSIS_DETAILS")
    if not rows:
        return {}
    r = rows[0]
    return {k: r.get(k) for k in ("duration", "startTime", "stopTime") if k in r}


def diagnostics(con: sqlite3.Connection, p: Probe) -> dict[str, int]:
    """Counts of nsys's own capture diagnostics by severity (lost events, overflows ...)."""
    if not p.has("DIAGNOSTIC_EVENT") or not p.col("DIAGNOSTIC_EVENT", "severity"):
        return {}
    sev = {0: "unknown", 1: "info", 2: "warning", 3: "error", 4: "verbose"}
    out: dict[str, int] = {}
    for s, n in con.execute('SELECT severity, count(*) FROM "DIAGNOSTIC_EVENT" GROUP BY 1'):
        key = sev.get(s, str(s))
        out[key] = out.get(key, 0) + int(n)
    return out
