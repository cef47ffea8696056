"""Shareable copies of traces: environment, command lines and host names removed.

nsys SQLite: the input is copied to a temp file beside OUT and only the copy is edited:
environment blocks in StringIds (NUL-separated KEY=VALUE lists that nsys stores per
process), TARGET_INFO_SYSTEM_ENV values (DeviceEnvironment, Hostname, install paths),
command lines in META_DATA_CAPTURE / TARGET_INFO_* / PROCESSES, then VACUUM so no freed
page keeps the old bytes, then rename onto OUT. Kineto/Chrome JSON: env-like, host and
command-line keys are dropped from everything outside traceEvents and path-like trace names
are cut to their base name. Trace events are never dropped, so a scrubbed trace ingests to
the same event counts.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import TraceFormatError, TracekitError
from tracekit.ingest import formats

_ENV_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ENV_KEYS = re.compile(r"env|environ", re.I)
_ARG_KEYS = re.compile(
    r"arg|cmd|command|exec|script_?path|^script$|cwd|workdir|installdir|storagepath", re.I
)
_HOST_KEYS = re.compile(r"host|addr|ip_?address|node_?name|master", re.I)
_SYSTEM_ENV = {"DeviceEnvironment": "env", "Hostname": "hosts", "TargetInstallDir": "args",
               "InjectionFilesStoragePath": "args"}  # fmt: skip


@dataclass(frozen=True)
class ScrubOptions:
    keep_env: bool = False
    keep_args: bool = False
    keep_hosts: bool = False


@dataclass
class ScrubResult:
    source: Path
    output: Path
    format: str
    removed: dict[str, int] = field(default_factory=dict)


def scrub_trace(
    source: Path, out: Path, options: ScrubOptions = ScrubOptions(), force: bool = False
) -> ScrubResult:
    """Write a scrubbed copy of `source` to `out` atomically; `source` is only read."""
    fmt = formats.detect(source)
    if out.exists() and out.resolve() == source.resolve():
        raise TracekitError(f"{out}: is the input; give another OUT path")
    if out.exists() and not force:
        raise TracekitError(f"{out}: exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    result = ScrubResult(source, out, fmt.name)
    try:
        if fmt.scrub is None:
            readable = ", ".join(f.description for f in formats.FORMATS if f.scrub)
            raise TraceFormatError(f"{source}: scrub reads {readable}; this is {fmt.description}")
        fmt.scrub(source, tmp, options, result.removed)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        for leftover in (tmp, Path(f"{tmp}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return result


# --- nsys SQLite ---------------------------------------------------------------------------


def _is_env_block(value: str) -> bool:
    """nsys keeps each process's environment as one NUL-separated KEY=VALUE string."""
    parts = [p for p in value.split("\x00") if p]
    return "\x00" in value and bool(parts) and all(_ENV_ENTRY.match(p) for p in parts)


def scrub_sqlite(source: Path, tmp: Path, opt: ScrubOptions, removed: dict[str, int]) -> None:
    shutil.copyfile(source, tmp)
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA secure_delete = ON")
            con.execute("BEGIN")
            tables = {
                r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            hosts = _nsys_hosts(con, tables)
            if "StringIds" in tables:
                _scrub_strings(con, opt, hosts, removed)
            if "TARGET_INFO_SYSTEM_ENV" in tables:
                for name, what in _SYSTEM_ENV.items():
                    if not getattr(opt, f"keep_{what}"):
                        n = con.execute(
                            "UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                            "WHERE name = ? AND value <> ''",
                            (name,),
                        ).rowcount
                        removed[f"system {what}"] = removed.get(f"system {what}", 0) + n
            for table in sorted(
                t for t in tables if t.startswith(("META_DATA", "EXPORT_META", "TARGET_INFO_"))
            ):
                if table != "TARGET_INFO_SYSTEM_ENV":
                    _scrub_table(con, table, opt, removed)
            if "PROCESSES" in tables and not opt.keep_args:
                # Keep the program's base name, drop its directory (home, venv, project path).
                rows = con.execute("SELECT rowid, name FROM PROCESSES WHERE name LIKE '%/%'")
                for rowid, name in rows.fetchall():
                    con.execute("UPDATE PROCESSES SET name = ? WHERE rowid = ?",
                                (name.rstrip("/").rsplit("/", 1)[-1], rowid))  # fmt: skip
                    removed["process paths"] = removed.get("process paths", 0) + 1
            con.execute("COMMIT")
            con.execute("VACUUM")
        finally:
            con.close()
    except sqlite3.Error as e:
        raise TraceFormatError(f"{source}: cannot scrub this SQLite file ({e})") from None


def _nsys_hosts(con: sqlite3.Connection, tables: set[str]) -> list[str]:
    if "TARGET_INFO_SYSTEM_ENV" not in tables:
        return []
    rows = con.execute("SELECT DISTINCT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
    return [r[0] for r in rows if isinstance(r[0], str) and len(r[0]) >= 3]


def _scrub_strings(con: sqlite3.Connection, opt: ScrubOptions, hosts: list[str],
                   removed: dict[str, int]) -> None:  # fmt: skip
    updates = []
    for sid, value in con.execute("SELECT id, value FROM StringIds").fetchall():
        if not isinstance(value, str):
            continue
        new = value
        if not opt.keep_env and _is_env_block(value):
            new = ""
            removed["environment blocks"] = removed.get("environment blocks", 0) + 1
        elif not opt.keep_hosts:
            for h in hosts:
                new = new.replace(h, "<host>")
        if new != value:
            updates.append((new, sid))
    con.executemany("UPDATE StringIds SET value = ? WHERE id = ?", updates)


def _scrub_table(con: sqlite3.Connection, table: str, opt: ScrubOptions,
                 removed: dict[str, int]) -> None:  # fmt: skip
    """Key/value tables (name, value) and wide tables alike: blank the matching cells."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    if "name" in cols and "value" in cols:
        for (name,) in con.execute(f'SELECT DISTINCT name FROM "{table}"').fetchall():
            what = _classify(str(name))
            if what and not getattr(opt, f"keep_{what}"):
                n = con.execute(f'UPDATE "{table}" SET value = NULL WHERE name = ?',
                                (name,)).rowcount  # fmt: skip
                removed[f"{table} {what}"] = removed.get(f"{table} {what}", 0) + n
        return
    for col in cols:
        what = _classify(col)
        if what and not getattr(opt, f"keep_{what}"):
            with contextlib.suppress(sqlite3.Error):  # NOT NULL columns: leave an empty string
                n = con.execute(f'UPDATE "{table}" SET "{col}" = \'\' '
                                f'WHERE typeof("{col}") = \'text\'').rowcount  # fmt: skip
                removed[f"{table}.{col}"] = n


def _classify(key: str) -> str | None:
    if _ENV_KEYS.search(key):
        return "env"
    if _HOST_KEYS.search(key):
        return "hosts"
    if _ARG_KEYS.search(key):
        return "args"
    return None


# --- Kineto / Chrome JSON ------------------------------------------------------------------


def scrub_json(source: Path, tmp: Path, opt: ScrubOptions, removed: dict[str, int]) -> None:
    raw = source.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    try:
        text = gzip.decompress(raw) if gz else raw
        doc = json.loads(text)
    except (OSError, EOFError, ValueError) as e:
        raise TraceFormatError(f"{source}: cannot scrub, not valid JSON ({e})") from None
    if not isinstance(doc, (dict, list)):
        raise TraceFormatError(f"{source}: not a Chrome/Kineto trace")
    hosts: set[str] = set()
    if isinstance(doc, dict):
        for key in list(doc):
            if key != "traceEvents":
                doc[key] = _scrub_value(key, doc[key], opt, removed, hosts)
                if doc[key] is _DROP:
                    del doc[key]
        name = doc.get("traceName")
        if isinstance(name, str) and "/" in name and not opt.keep_args:
            doc["traceName"] = name.rstrip("/").rsplit("/", 1)[-1]
            removed["trace name path"] = 1
    if hosts and not opt.keep_hosts:
        doc = _replace_strings(doc, sorted(hosts, key=len, reverse=True))
    data = json.dumps(doc).encode()
    with open(tmp, "wb") as f:
        f.write(gzip.compress(data, 6) if gz else data)
        f.flush()
        os.fsync(f.fileno())


_DROP = object()


def _scrub_value(key: str, value: Any, opt: ScrubOptions, removed: dict[str, int],
                 hosts: set[str]) -> Any:  # fmt: skip
    what = _classify(key)
    if what and not getattr(opt, f"keep_{what}"):
        removed[what] = removed.get(what, 0) + 1
        if what == "hosts" and isinstance(value, str) and len(value) >= 3:
            hosts.add(value)
        return _DROP
    if isinstance(value, dict):
        kept = {}
        for k, v in value.items():
            v2 = _scrub_value(str(k), v, opt, removed, hosts)
            if v2 is not _DROP:
                kept[k] = v2
        return kept
    if isinstance(value, list):
        return [v for v in (_scrub_value(key, v, opt, removed, hosts) for v in value)
                if v is not _DROP]  # fmt: skip
    if isinstance(value, str) and not opt.keep_env and _ENV_ENTRY.match(value) and "=" in value:
        removed["env"] = removed.get("env", 0) + 1
        return _DROP
    return value


def _replace_strings(value: Any, hosts: list[str]) -> Any:
    if isinstance(value, str):
        for h in hosts:
            value = value.replace(h, "<host>")
        return value
    if isinstance(value, dict):
        return {_replace_strings(k, hosts): _replace_strings(v, hosts) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, hosts) for v in value]
    return value
