"""The per-format scrubbers of the format registry (tracekit.ingest.formats): nsys SQLite
and Kineto/Chrome JSON, edited into a temp copy; `tracekit.scrub.scrub_trace` picks one,
checks the paths and renames the result into place.

Secrets are found by what they look like (tracekit.redact: token formats, key blocks,
`key=value` with a secret-named key, credentials in URLs) in every string of the file; and by
where they are: environment blocks, command lines, host names, user names and home paths.

nsys SQLite: the input is copied byte for byte to a temp file beside OUT and only the copy is
edited. Its triggers, views and virtual tables are removed from the schema before anything
runs (scrub copies data, never behaviour), then every TEXT cell of every table is scrubbed,
then the nsys-specific places are blanked, then VACUUM so no freed page keeps the old bytes,
then rename onto OUT. Kineto/Chrome JSON: every string at any depth (keys too) is scrubbed;
env-like, host and command-line keys are dropped outside traceEvents. Trace events are never
dropped, so a scrubbed trace ingests to the same event counts.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import TraceFormatError
from tracekit.ingest.nsys_source import refuse_pending_wal
from tracekit.redact import REDACTED, is_secret_key, redact_text

_ENV_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ENV_KEYS = re.compile(r"env|environ", re.I)
_ARG_KEYS = re.compile(
    r"arg|cmd|command|exec|script_?path|^script$|cwd|workdir|installdir|storagepath", re.I
)
_HOST_KEYS = re.compile(r"host|addr|ip_?address|node_?name|master", re.I)
_SYSTEM_ENV = {"DeviceEnvironment": "env", "Hostname": "hosts", "TargetInstallDir": "args",
               "InjectionFilesStoragePath": "args"}  # fmt: skip
# A home folder: /home/u, /Users/u, /global/homes/j/u (NERSC), /root; users learned from it.
_HOME = re.compile(
    r"(?:/[\w.+-]{1,255}){0,4}?/(?:home|homes|Users|u|usr/home)(?:/[\w-])?/([\w.$+-]{2,64})"
    r"|(?<![\w.-])/root(?=/|\b)"
)
# Environment entries that name the user or the host.
_USER_VARS = ("USER", "LOGNAME", "USERNAME", "SLURM_JOB_USER", "SUDO_USER", "PBS_O_LOGNAME")
_HOST_VARS = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "SLURM_SUBMIT_HOST", "PBS_O_HOST",
              "SLURM_TOPOLOGY_ADDR", "NODE_NAME")  # fmt: skip
_TOO_COMMON = {"root", "user", "users", "home", "nobody", "admin", "local", "localhost", "test"}


@dataclass(frozen=True)
class ScrubOptions:
    keep_env: bool = False
    keep_args: bool = False
    keep_hosts: bool = False


# --- what every string goes through -------------------------------------------------------


class _Scrubber:
    """Scrubs one string: secrets by shape, home paths, learned user and host names."""

    def __init__(self, opt: ScrubOptions, removed: Counter[str]) -> None:
        self.opt, self.removed = opt, removed
        self.users: set[str] = set()
        self.hosts: set[str] = set()
        self._names: re.Pattern[str] | None = None
        self._cache: dict[str, str] = {}

    def learn_env(self, entries: Iterable[str]) -> None:
        for entry in entries:
            name, sep, value = entry.partition("=")
            if not sep:
                continue
            if name in _USER_VARS:
                self.learn_user(value)
            elif name in _HOST_VARS:
                self.learn_host(value)
            elif name == "HOME":
                self.learn_homes(value)

    def learn_user(self, value: str) -> None:
        value = value.strip()
        if len(value) >= 3 and value.lower() not in _TOO_COMMON and "/" not in value:
            self.users.add(value)
            self._forget()

    def learn_host(self, value: str) -> None:
        value = value.strip()
        for name in (value, value.split(".")[0]):
            if len(name) >= 3 and name.lower() not in _TOO_COMMON and "/" not in name:
                self.hosts.add(name)
                self._forget()

    def _forget(self) -> None:
        self._names = None
        self._cache.clear()

    def learn_homes(self, text: str) -> None:
        if "/" in text:
            for m in _HOME.finditer(text):
                if m.group(1):
                    self.learn_user(m.group(1))

    def _names_pattern(self) -> re.Pattern[str] | None:
        if self._names is None and (self.users or self.hosts):
            names = sorted(
                (self.users if not self.opt.keep_args else set())
                | (self.hosts if not self.opt.keep_hosts else set()),
                key=lambda s: (-len(s), s),
            )
            if names:
                alternation = "|".join(re.escape(n) for n in names)
                self._names = re.compile(rf"(?<![A-Za-z0-9])(?:{alternation})(?![A-Za-z0-9])")
        return self._names

    def __call__(self, text: str) -> str:
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        new = redact_text(text, self.removed)
        if not self.opt.keep_args and "/" in new:
            new, n = _HOME.subn("~", new)
            if n:
                self.removed["home paths"] += n
        names = self._names_pattern()
        if names is not None:
            new, n = names.subn(self._name_for, new)
        self._cache[text] = new
        return new

    def _name_for(self, m: re.Match[str]) -> str:
        if m.group(0) in self.hosts:
            self.removed["host names"] += 1
            return "<host>"
        self.removed["user names"] += 1
        return "<user>"


# --- nsys SQLite ---------------------------------------------------------------------------


def _is_env_block(value: str) -> bool:
    """nsys keeps each process's environment as one NUL-separated string of entries; some
    are not NAME=value (bash functions: `BASH_FUNC_ml%%=() { ...`), so one entry shaped
    NAME=value among NUL-separated parts is enough."""
    if "\x00" not in value:
        return False
    return any(_ENV_ENTRY.match(p) for p in value.split("\x00"))


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA trusted_schema = OFF")
    return con


def _strip_behaviour(tmp: Path, removed: Counter[str]) -> None:
    """Delete triggers, views and virtual tables from the copy's schema, without running
    them (a schema edit, not DROP: DROP of an unknown virtual table module fails)."""
    con = _connect(tmp)
    try:
        con.execute("PRAGMA journal_mode = DELETE")
        rows = con.execute(
            "SELECT count(*) FROM sqlite_master WHERE type IN ('trigger', 'view') "
            "OR (type = 'table' AND sql LIKE 'CREATE VIRTUAL%')"
        ).fetchone()
        if rows and rows[0]:
            con.execute("PRAGMA writable_schema = ON")
            con.execute(
                "DELETE FROM sqlite_master WHERE type IN ('trigger', 'view') "
                "OR (type = 'table' AND sql LIKE 'CREATE VIRTUAL%')"
            )
            con.execute("PRAGMA writable_schema = OFF")
            removed["triggers, views, virtual tables"] += rows[0]
    finally:
        con.close()


def scrub_sqlite(source: Path, tmp: Path, opt: ScrubOptions, removed: dict[str, int]) -> None:
    """The registry's nsys scrub: copy `source` byte for byte to `tmp`, then scrub the copy."""
    refuse_pending_wal(source)  # the copy would lack the pages committed to its -wal
    shutil.copyfile(source, tmp)
    counts: Counter[str] = Counter()
    _scrub_sqlite(source, tmp, opt, counts)
    _tally(removed, counts)


def scrub_json(source: Path, tmp: Path, opt: ScrubOptions, removed: dict[str, int]) -> None:
    """The registry's Kineto/Chrome JSON scrub: a scrubbed copy of `source` at `tmp`."""
    counts: Counter[str] = Counter()
    _scrub_json(source, tmp, opt, counts)
    _tally(removed, counts)


def _tally(removed: dict[str, int], counts: Counter[str]) -> None:
    for kind, n in counts.items():
        removed[kind] = removed.get(kind, 0) + n


def _scrub_sqlite(source: Path, tmp: Path, opt: ScrubOptions, removed: Counter[str]) -> None:
    try:
        _strip_behaviour(tmp, removed)
        con = _connect(tmp)
        try:
            con.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
            con.execute("PRAGMA secure_delete = ON")
            con.execute("BEGIN")
            tables = [
                r[0]
                for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
                )
            ]
            scrub = _Scrubber(opt, removed)
            _learn_nsys(con, set(tables), scrub)
            _nsys_places(con, set(tables), opt, removed)
            for table in tables:
                _scrub_text_cells(con, table, scrub, opt, removed)
            con.execute("COMMIT")
            con.execute("VACUUM")
        finally:
            con.close()
    except sqlite3.Error as e:
        raise TraceFormatError(f"{source}: cannot scrub this SQLite file ({e})") from None


def _learn_nsys(con: sqlite3.Connection, tables: set[str], scrub: _Scrubber) -> None:
    """Users and hosts from where nsys keeps them: environment blocks, Hostname, paths."""
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        for name, value in con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"):
            if not isinstance(value, str):
                continue
            if name == "Hostname":
                scrub.learn_host(value)
            elif name == "DeviceEnvironment":
                scrub.learn_env(re.split(r"[\x00\n]", value))
            scrub.learn_homes(value)
    if "StringIds" in tables:
        for (value,) in con.execute("SELECT value FROM StringIds WHERE typeof(value) = 'text'"):
            if "\x00" in value:
                scrub.learn_env(value.split("\x00"))
            scrub.learn_homes(value)
    if "PROCESSES" in tables:
        with contextlib.suppress(sqlite3.Error):
            for (name,) in con.execute("SELECT name FROM PROCESSES WHERE typeof(name) = 'text'"):
                scrub.learn_homes(name)


def _nsys_places(con: sqlite3.Connection, tables: set[str], opt: ScrubOptions,
                 removed: Counter[str]) -> None:  # fmt: skip
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        for name, what in _SYSTEM_ENV.items():
            if not getattr(opt, f"keep_{what}"):
                removed[f"system {what}"] += con.execute(
                    "UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' WHERE name = ? AND value <> ''",
                    (name,),
                ).rowcount
    for table in sorted(
        t for t in tables if t.startswith(("META_DATA", "EXPORT_META", "TARGET_INFO_"))
    ):
        if table != "TARGET_INFO_SYSTEM_ENV":
            _scrub_table(con, table, opt, removed)
    if "PROCESSES" in tables and not opt.keep_args:
        # Keep the program's base name, drop its directory (home, venv, project path).
        with contextlib.suppress(sqlite3.Error):
            rows = con.execute("SELECT rowid, name FROM PROCESSES WHERE name LIKE '%/%'")
            for rowid, name in rows.fetchall():
                con.execute("UPDATE PROCESSES SET name = ? WHERE rowid = ?",
                            (name.rstrip("/").rsplit("/", 1)[-1], rowid))  # fmt: skip
                removed["process paths"] += 1


def _scrub_text_cells(con: sqlite3.Connection, table: str, scrub: _Scrubber, opt: ScrubOptions,
                      removed: Counter[str]) -> None:  # fmt: skip
    """Every TEXT cell of `table`, in one UPDATE per column that holds text."""

    def scrub_value(raw: bytes) -> bytes:
        text = raw.decode("utf-8", "surrogateescape")
        if not opt.keep_env and _is_env_block(text):
            removed["environment blocks"] += 1
            return b""
        return scrub(text).encode("utf-8", "surrogateescape")

    memo: dict[bytes, bytes] = {}

    def changed(raw: bytes) -> bool:
        new = memo.get(raw)
        if new is None:
            new = memo[raw] = scrub_value(raw)
        return new != raw

    def replacement(raw: bytes) -> bytes:
        return memo[raw] if raw in memo else scrub_value(raw)

    con.create_function("tk_changed", 1, _guarded(changed), deterministic=True)
    con.create_function("tk_scrub", 1, _guarded(replacement), deterministic=True)
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({_q(table)})")]
    for col in cols:
        c = _q(col)
        con.execute(
            f"UPDATE {_q(table)} SET {c} = CAST(tk_scrub(CAST({c} AS BLOB)) AS TEXT) "
            f"WHERE typeof({c}) = 'text' AND tk_changed(CAST({c} AS BLOB))"
        )


def _guarded(f: Callable[[bytes], Any]) -> Callable[[Any], Any]:
    def call(value: Any) -> Any:
        return f(value if isinstance(value, bytes) else str(value).encode())

    return call


def _scrub_table(con: sqlite3.Connection, table: str, opt: ScrubOptions,
                 removed: Counter[str]) -> None:  # fmt: skip
    """Key/value tables (name, value) and wide tables alike: blank the matching cells."""
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({_q(table)})")]
    if "name" in cols and "value" in cols:
        for (name,) in con.execute(f"SELECT DISTINCT name FROM {_q(table)}").fetchall():
            what = _classify(str(name))
            if what and not getattr(opt, f"keep_{what}"):
                with contextlib.suppress(sqlite3.IntegrityError):
                    n = con.execute(f"UPDATE {_q(table)} SET value = NULL WHERE name = ?",
                                    (name,)).rowcount  # fmt: skip
                    removed[f"{table} {what}"] += n
        return
    for col in cols:
        what = _classify(col)
        if what and not getattr(opt, f"keep_{what}"):
            with contextlib.suppress(sqlite3.Error):  # NOT NULL columns: leave an empty string
                removed[f"{table}.{col}"] += con.execute(
                    f"UPDATE {_q(table)} SET {_q(col)} = '' WHERE typeof({_q(col)}) = 'text'"
                ).rowcount


def _classify(key: str) -> str | None:
    if _ENV_KEYS.search(key):
        return "env"
    if _HOST_KEYS.search(key):
        return "hosts"
    if _ARG_KEYS.search(key):
        return "args"
    return None


# --- Kineto / Chrome JSON ------------------------------------------------------------------


def _scrub_json(source: Path, tmp: Path, opt: ScrubOptions, removed: Counter[str]) -> None:
    from tracekit.ingest.bounded_gzip import read_document  # lazy: only a gzipped input needs it

    raw = read_document(source)
    with open(source, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{source}: cannot scrub, not UTF-8 JSON ({e})") from None
    del raw
    scrub = _Scrubber(opt, removed)
    _learn_text(text, scrub)
    hook = _object_hook(scrub, opt, removed)
    try:
        doc = json.loads(text, object_pairs_hook=hook)
    except RecursionError:
        raise TraceFormatError(f"{source}: JSON nested too deep to scrub") from None
    except ValueError as e:
        raise TraceFormatError(f"{source}: cannot scrub, not valid JSON ({e})") from None
    del text
    if isinstance(doc, list):
        doc = _scrub_list(doc, scrub)
    if not isinstance(doc, (dict, list)):
        raise TraceFormatError(f"{source}: not a Chrome/Kineto trace")
    if isinstance(doc, dict):
        for key in list(doc):
            if key != "traceEvents":
                value = _drop_by_place(key, doc[key], opt, removed, scrub)
                if value is _DROP:
                    del doc[key]
                else:
                    doc[key] = value
        name = doc.get("traceName")
        if isinstance(name, str) and "/" in name and not opt.keep_args:
            doc["traceName"] = name.rstrip("/").rsplit("/", 1)[-1]
            removed["trace name path"] += 1
    try:
        data = json.dumps(doc).encode()
    except RecursionError:
        raise TraceFormatError(f"{source}: JSON nested too deep to scrub") from None
    with open(tmp, "wb") as f:
        f.write(gzip.compress(data, 6) if gz else data)
        f.flush()
        os.fsync(f.fileno())


_JSON_HOST = re.compile(r'"(?:host_?name|hostname|host|node_?name)"\s*:\s*"([^"\\]{3,255})"', re.I)
_NAME_VARS = "|".join(_USER_VARS + _HOST_VARS)
_JSON_ENV = re.compile(
    rf'"({_NAME_VARS})"\s*:\s*"([^"\\]{{1,255}})"|"((?:{_NAME_VARS})=[^"\\]{{1,255}})"'
)
_HOME_USER = re.compile(r"/(?:home|homes|Users|u|usr/home)(?:/[\w-])?/([\w.$+-]{2,64})")


def _learn_text(text: str, scrub: _Scrubber) -> None:
    """Users and hosts from the raw JSON text, before the parse maps the strings."""
    if "\\/" in text:
        text = text.replace("\\/", "/")
    for m in _HOME_USER.finditer(text):
        scrub.learn_user(m.group(1))
    for m in _JSON_HOST.finditer(text):
        scrub.learn_host(m.group(1))
    for m in _JSON_ENV.finditer(text):
        scrub.learn_env([m.group(3) or f"{m.group(1)}={m.group(2)}"])


def _scrub_list(items: list[Any], scrub: _Scrubber) -> list[Any]:
    """Strings of a list (and of lists inside it; objects were done by the parse hook)."""
    stack = [items]
    while stack:
        node = stack.pop()
        for i, v in enumerate(node):
            if isinstance(v, str):
                node[i] = scrub(v)
            elif isinstance(v, list):
                stack.append(v)
    return items


_Hook = Callable[[list[tuple[str, Any]]], dict[str, Any]]


def _object_hook(scrub: _Scrubber, opt: ScrubOptions, removed: Counter[str]) -> _Hook:
    """Scrubs each object as the parser builds it: keys, string values, lists of strings;
    string values under secret-named keys and env-named keys redacted."""

    # What a string under each key becomes depends on the key alone, and a trace repeats a
    # handful of keys millions of times: (secret-named, env-named) decided once per key.
    rules: dict[str, tuple[bool, bool]] = {}

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = {}
        for k, v in pairs:
            if isinstance(v, str):
                rule = rules.get(k)
                if rule is None:
                    env = not opt.keep_env and _ENV_KEYS.fullmatch(k) is not None
                    rule = rules[k] = (is_secret_key(k), env)
                if rule[0] and v and v != REDACTED:
                    removed["secret-named keys"] += 1
                    v = REDACTED
                elif rule[1]:
                    removed["env"] += 1
                    v = ""
                else:
                    v = scrub(v)
            elif isinstance(v, list):
                v = _scrub_list(v, scrub)
            obj[scrub(k)] = v
        return obj

    return hook


_DROP = object()


def _drop_by_place(key: str, value: Any, opt: ScrubOptions, removed: Counter[str],
                   scrub: _Scrubber) -> Any:  # fmt: skip
    """Outside traceEvents: env, host and command-line keys dropped at any depth (iterative:
    nesting depth costs no stack)."""
    what = _classify(key)
    if what and not getattr(opt, f"keep_{what}"):
        _count_dropped(what, value, removed, scrub)
        return _DROP
    if not isinstance(value, (dict, list)):
        return _drop_env_string(value, opt, removed)
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k in list(node):
                what = _classify(str(k))
                if what and not getattr(opt, f"keep_{what}"):
                    _count_dropped(what, node.pop(k), removed, scrub)
                elif isinstance(node[k], (dict, list)):
                    stack.append(node[k])
                elif _drop_env_string(node[k], opt, removed) is _DROP:
                    del node[k]
        elif isinstance(node, list):
            kept = []
            for v in node:
                if isinstance(v, (dict, list)):
                    stack.append(v)
                    kept.append(v)
                elif _drop_env_string(v, opt, removed) is not _DROP:
                    kept.append(v)
            node[:] = kept
    return value


def _drop_env_string(value: Any, opt: ScrubOptions, removed: Counter[str]) -> Any:
    if isinstance(value, str) and not opt.keep_env and _ENV_ENTRY.match(value):
        removed["env"] += 1
        return _DROP
    return value


def _count_dropped(what: str, value: Any, removed: Counter[str], scrub: _Scrubber) -> None:
    removed[what] += 1
    if what == "hosts" and isinstance(value, str):
        scrub.learn_host(value)
    if what == "env" and isinstance(value, dict):
        scrub.learn_env(f"{k}={v}" for k, v in value.items() if isinstance(v, str))
