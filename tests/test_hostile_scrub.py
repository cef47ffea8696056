"""Hostile inputs, scrub: secrets planted anywhere in both formats are gone from OUT; every
shared trace scrubbed leaves nothing an independent scanner (written here, not scrub's own
patterns) finds; triggers and views in the input never run nor reach OUT.

HYPOTHESIS_PROFILE=long (make fuzz) runs many more examples.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_params
from tracekit.scrub import scrub_trace

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def examples(n: int) -> Any:
    return settings(
        max_examples=n * 25 if LONG else n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# --- the independent scanner --------------------------------------------------------------
# Written from the token formats' public descriptions, on bytes, not from tracekit/redact.py.

SHAPES = {
    "huggingface": rb"hf_[A-Za-z0-9]{20,}",
    "github": rb"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",
    "aws": rb"(?:AKIA|ASIA)[0-9A-Z]{16}",
    "openai": rb"sk-[A-Za-z0-9]{20,}",
    "slack": rb"xox[baprs]-[0-9A-Za-z]{6,}",
    "jwt": rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "pem": rb"BEGIN [A-Z ]*PRIVATE KEY-----(?:\\n|\s)*[A-Za-z0-9+/]{16}",
    "bearer": rb"[Bb]earer\s+[A-Za-z0-9._~+/-]{16,}",
    "url credentials": rb"[a-z][a-z0-9+.-]*://[^\s/:@\"'<>]+:[^\s/@\"'<>]+@",
    "home path": rb"/(?:home|homes|Users)/[A-Za-z0-9_][A-Za-z0-9_.-]*",
}


def scan(data: bytes) -> list[tuple[str, bytes]]:
    return [(kind, m.group(0)[:60]) for kind, p in SHAPES.items() for m in re.finditer(p, data)]


def document_bytes(path: Path) -> bytes:
    """The bytes to scan: the file (gunzipped), and for JSON every string decoded too (a
    secret written with \\u escapes is still a secret)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw.startswith(b"SQLite format 3"):
        return raw
    strings: list[str] = []
    stack = [json.loads(raw)]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, dict):
            strings.extend(str(k) for k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return raw + b"\n" + "\n".join(strings).encode("utf-8", "surrogatepass")


def _sqlite_text(path: Path) -> Iterator[tuple[str, str | None, bytes]]:
    """(table, key-column value or None, text) for every TEXT cell of an SQLite file."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = bytes
    try:
        query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        tables = [r[0].decode() for r in con.execute(query)]
        for t in tables:
            cols = [r[1].decode() for r in con.execute(f'PRAGMA table_info("{t}")')]
            key = "name" if "name" in cols and "value" in cols else None
            for c in cols:
                sql = f'SELECT "{c}"{", name" if key else ""} FROM "{t}" WHERE typeof("{c}") = \'text\''  # noqa: E501
                for row in con.execute(sql):
                    yield t, row[1].decode(errors="replace") if key else None, row[0]
    finally:
        con.close()


def oracle_env(path: Path) -> tuple[dict[bytes, bytes], bytes]:
    """(environment variables -> values, every string that is not an environment) of a
    trace, by a plain sqlite3/json pass."""
    env: dict[bytes, bytes] = {}
    other: list[bytes] = []
    if path.read_bytes()[:16] == b"SQLite format 3\x00":
        for _table, key, text in _sqlite_text(path):
            if b"\x00" in text or (key and re.search("env", key, re.I)):
                for entry in re.split(rb"[\x00\n]", text):
                    name, sep, value = entry.partition(b"=")
                    if sep and re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", name):
                        env[name] = value
            else:
                other.append(text)
        return env, b"\n".join(other)
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    stack: list[tuple[Any, bool]] = [(doc, False)]
    env_key: dict[str, bool] = {}  # JSON keys repeat (ph, ts, args...): one search per key
    while stack:
        node, in_env = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in env_key:
                    env_key[k] = bool(re.search("env", k, re.I))
                if isinstance(v, str) and (in_env or env_key[k]):
                    env[k.encode()] = v.encode("utf-8", "surrogatepass")
                else:
                    stack.append((v, in_env or env_key[k]))
        elif isinstance(node, list):
            stack.extend((v, in_env) for v in node)
        elif isinstance(node, str):
            other.append(node.encode("utf-8", "surrogatepass"))
    return env, b"\n".join(other)


def distinctive(value: bytes, other: bytes) -> bool:
    """Worth checking: long, not a plain number or system path, not found outside the
    environment in the original (then the trace itself says it elsewhere)."""
    v = value.strip()
    if len(v) < 8 or re.fullmatch(rb"[0-9.:,;-]*", v) or v in other or b"<" in v:
        return False
    return not v.startswith((b"/usr", b"/etc", b"/opt", b"/bin", b"/lib", b"/sbin", b"/var"))


@pytest.mark.parametrize("trace", shared_params("*.sqlite") + shared_params("*.json.gz"))
def test_scrubbed_shared_trace_leaves_nothing(trace: Path, tmp_path: Path) -> None:
    """Every shared trace scrubbed: no env value, home path, user, host or token left."""
    before = trace.read_bytes()
    out = tmp_path / trace.name
    result = scrub_trace(trace, out)
    assert trace.read_bytes() == before
    data = document_bytes(out)
    assert scan(data) == []
    env, other = oracle_env(trace)
    leaked = [
        (name, value[:40])
        for name, value in env.items()
        if distinctive(value, other) and value.strip() in data
    ]
    assert leaked == []
    names = {env.get(k, b"") for k in (b"USER", b"LOGNAME", b"HOSTNAME", b"SLURMD_NODENAME")}
    for name in names - {b"", b"root"}:
        assert not re.search(rb"(?<![A-Za-z0-9])" + re.escape(name) + rb"(?![A-Za-z0-9])", data)
    if env:
        assert result.removed, "an environment was there: scrub must say what it removed"
    assert sorted(p.name for p in tmp_path.iterdir()) == [trace.name]


# --- secrets planted anywhere --------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits
needle = st.text(ALNUM, min_size=24, max_size=40)
secret_key = st.sampled_from(["password", "db_passwd", "hf_token", "API_KEY", "client_secret",
                              "aws_secret_access_key", "GITHUB_TOKEN", "credentials"])  # fmt: skip


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, str]:
    """(text holding a secret, the part of it that must not survive)."""
    n = draw(needle)
    upper = "".join(c for c in n.upper() if c.isalnum())[:16].ljust(16, "Q")
    kind = draw(st.integers(0, 10))
    text, secret = [
        (f"hf_{n}", n),
        (f"ghp_{n}", n),
        (f"AKIA{upper}", upper),
        (f"sk-{n}", n),
        (f"xoxb-1234-{n}", n),
        (f"eyJhbGciOiJIUzI1NiJ9.eyJ{n}.{n[::-1]}", n),
        (f"-----BEGIN RSA PRIVATE KEY-----\nMII{n}\n-----END RSA PRIVATE KEY-----", n),
        (f"Authorization: Bearer {n}", n),
        (f"https://user:{n}@example.com/repo.git", n),
        (f"{draw(secret_key)}={n}", n),
        (f'{{"{draw(secret_key)}": "{n}"}}', n),
    ][kind]
    before = draw(st.sampled_from(["", "run with ", "cmd: python x.py --flag ", "x\n"]))
    return before + text + draw(st.sampled_from(["", " and more", "\n", ";"])), secret


def _nest(value: Any, depth: int) -> Any:
    for i in range(depth):
        value = {f"level{i}": value} if i % 2 else [value]
    return value


@st.composite
def planted_kineto(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    text, secret = draw(secrets())
    key = draw(st.sampled_from(["note", "comment", "x", "Authorization", "hf_token", "password",
                                "aws_secret_access_key", "desc", "Input Dims"]))  # fmt: skip
    depth = draw(st.integers(0, 40))
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10,
            "dur": 5,
            "args": {"External id": i},
        }  # fmt: skip
        for i in range(5)
    ]
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    where = draw(st.integers(0, 6))
    if where == 0:
        doc[key] = _nest(text, depth)
    elif where == 1:
        doc.setdefault("metadata", {})[key] = _nest(text, depth)
    elif where == 2:
        events[draw(st.integers(0, 4))]["args"][key] = _nest(text, depth)
    elif where == 3:
        events[draw(st.integers(0, 4))]["name"] = text
    elif where == 4:
        events[0]["args"]["list"] = ["a", text, 3]
    elif where == 5:
        events[0]["args"][text] = 1  # a secret as a key
    else:
        doc["distributedInfo"] = {"backend": "nccl", key: text}
    return doc, secret


@examples(60)
@given(planted=planted_kineto(), gz=st.booleans(), ascii_only=st.booleans())
def test_kineto_secret_anywhere_is_removed(planted: tuple[dict[str, Any], str], gz: bool,
                                           ascii_only: bool, tmp_path: Path) -> None:  # fmt: skip
    doc, secret = planted
    src = tmp_path / ("in.json.gz" if gz else "in.json")
    body = json.dumps(doc, ensure_ascii=ascii_only).encode()
    src.write_bytes(gzip.compress(body) if gz else body)
    out = tmp_path / ("out.json.gz" if gz else "out.json")
    result = scrub_trace(src, out, force=True)
    assert secret.encode() not in document_bytes(out)
    assert result.removed  # said what it removed
    kept = json.loads(gzip.decompress(out.read_bytes()) if gz else out.read_bytes())
    assert len(kept["traceEvents"]) == 5


@st.composite
def env_block(draw: st.DrawFn, secret_entry: str) -> str:
    """An environment block as nsys stores it, with entries not shaped NAME=value."""
    odd = st.sampled_from(["BASH_FUNC_ml%%=() {  eval $($LMOD_CMD bash \"$@\")", "}", "",
                           "=weird", "no equals sign", "BASH_FUNC_module()=() { :; }"])  # fmt: skip
    entries = [f"VAR{i}=value{i}" for i in range(draw(st.integers(0, 5)))]
    entries += draw(st.lists(odd, max_size=4))
    entries.insert(draw(st.integers(0, len(entries))), secret_entry)
    return "\x00".join(entries)


@st.composite
def planted_nsys(draw: st.DrawFn) -> tuple[list[str], str, str]:
    """(SQL statements building a small nsys-like export, the secret, the home user)."""
    text, secret = draw(secrets())
    user = "u" + draw(st.text(string.ascii_lowercase, min_size=6, max_size=10))
    home = f"/global/homes/{user[0]}/{user}/proj"
    where = draw(st.integers(0, 4))
    block = draw(env_block(f"HOME={home}" if where else f"SECRETISH={text}"))
    rows = [(1, block), (2, "cudaLaunchKernel"), (3, f"{home}/train.py"), (4, "nvtx range")]
    if where == 1:
        rows.append((5, text))
    sql = [
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)",
        "CREATE TABLE log (what TEXT)",
        f"CREATE TABLE {draw(st.sampled_from(['CUPTI_ACTIVITY_KIND_KERNEL', 'OSRT_API', 'X']))}"
        " (start INTEGER, nameId INTEGER, note TEXT, blob BLOB)",
        "CREATE TRIGGER tk_evil AFTER UPDATE ON StringIds BEGIN "
        "INSERT INTO log VALUES ('fired'); END",
        "CREATE VIEW tk_view AS SELECT * FROM StringIds",
    ]
    sql += [f"INSERT INTO StringIds VALUES ({i}, {_lit(v)})" for i, v in rows]
    sql.append(f"INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('Hostname', 'gpu-node-{user}')")
    table = sql[3].split()[2]
    note = text if where == 2 else "plain"
    sql.append(f"INSERT INTO {table} VALUES (1, 2, {_lit(note)}, x'00ff')")
    if where == 3:
        sql.append(f"INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('Note', {_lit(text)})")
    if where == 4:
        sql.append(f"INSERT INTO StringIds VALUES (9, {_lit('python train.py ' + text)})")
    return sql, secret, user


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''").replace("\x00", "' || char(0) || '") + "'"


@examples(40)
@given(planted=planted_nsys())
def test_nsys_secret_anywhere_is_removed(planted: tuple[list[str], str, str],
                                         tmp_path: Path) -> None:  # fmt: skip
    sql, secret, user = planted
    src = tmp_path / "in.sqlite"
    src.unlink(missing_ok=True)
    con = sqlite3.connect(src)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    before = src.read_bytes()
    out = tmp_path / "out.sqlite"
    result = scrub_trace(src, out, force=True)
    assert src.read_bytes() == before
    data = out.read_bytes()
    assert secret.encode() not in data
    assert user.encode() not in data
    assert scan(data) == []
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        kinds = {r[0] for r in con.execute("SELECT type FROM sqlite_master")}
        assert kinds <= {"table", "index"}  # no trigger, no view: data, not behaviour
        assert con.execute("SELECT count(*) FROM log").fetchone() == (0,)  # never fired
        assert con.execute("SELECT count(*) FROM StringIds").fetchone()[0] >= 4
    finally:
        con.close()
    assert result.removed


def test_scrub_reports_kinds_and_counts(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracekit.cli import main

    src = tmp_path / "t.json"
    doc = {"traceEvents": [], "hf_token": "hf_" + "a1" * 15, "note": "password=hunter2hunter2"}
    src.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["scrub", str(src), str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.stderr
    assert "secret-named keys" in r.stdout and "secret key=value" in r.stdout
    assert "hunter2" not in (tmp_path / "o.json").read_text()
