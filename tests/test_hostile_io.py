"""Hostile inputs, everything but scrub's content: outputs that alias inputs, special files,
gzip bombs, deep nesting, lone surrogates, malformed sidecars, bad budgets, Ctrl-C, kill -9
leftovers, WAL-mode exports, planted or damaged cached stores, many thread labels.

Each error: exit 2 (130 on Ctrl-C), one line on stderr, no traceback, inputs byte-identical,
nothing left behind. HYPOTHESIS_PROFILE=long (make fuzz) runs many more examples.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import procs
from tests.conftest import shared_traces
from tracekit.cli import main

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
SMALL_KINETO = shared_traces("kineto_a100_alexnet_*.json.gz")
SMALL_NSYS = shared_traces("nsys_2022_gtx1060_*.sqlite")


def examples(n: int) -> Any:
    return settings(
        max_examples=n * 25 if LONG else n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"traceback from {args}: {r.exception!r}")
    return r.exit_code, r.stdout, r.stderr


def one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def tree(root: Path) -> dict[str, bytes | str]:
    """Every path under root with its bytes (files), link target or kind."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_fifo():
            out[rel] = "fifo"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = p.read_bytes()
    return out


def tracekit_cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return procs.run([sys.executable, "-m", "tracekit", *args], capture_output=True,
                          text=True, **kw)  # fmt: skip


# Runs a command and prints its peak RSS (KiB). A child forked straight from pytest would
# report pytest's own peak: Linux keeps the larger of the two across exec.
_PEAK_RSS = """import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
sys.stderr.buffer.write(r.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def cli_peak_rss(*args: str, env: dict[str, str]) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in KiB) of one tracekit run, measured by a small
    wrapper process (see _PEAK_RSS), not from pytest's own RUSAGE_CHILDREN."""
    r = procs.run([sys.executable, "-c", _PEAK_RSS, sys.executable, "-m", "tracekit",
                        *args], capture_output=True, text=True, env=env)  # fmt: skip
    return r.returncode, r.stderr, int(r.stdout.strip())


# --- outputs never destroy inputs ----------------------------------------------------------

COMMANDS = ("sql", "report", "diff", "ingest", "export", "scrub")
ALIASES = ("input", "input-dotted", "input-folder", "folder-above", "link-to-input",
           "hardlink", "fifo", "dev-null-link", "under-a-file", "long-name", "folder")  # fmt: skip


def _output_for(alias: str, root: Path, trace: Path) -> str:
    if alias == "input":
        return str(trace)
    if alias == "input-dotted":
        return str(root / "run" / ".." / "run" / "." / trace.name)
    if alias == "input-folder":
        return str(trace.parent)
    if alias == "folder-above":
        return str(root)
    if alias == "link-to-input":
        (root / "link").symlink_to(trace)
        return str(root / "link")
    if alias == "hardlink":
        os.link(trace, root / "hard")
        return str(root / "hard")
    if alias == "fifo":
        os.mkfifo(root / "fifo")
        return str(root / "fifo")
    if alias == "dev-null-link":
        (root / "stdout").symlink_to("/dev/null")
        return str(root / "stdout")
    if alias == "under-a-file":
        (root / "afile").write_text("x")
        return str(root / "afile" / "out")
    if alias == "folder":
        (root / "adir").mkdir()
        return str(root / "adir")
    return str(root / ("x" * 300))


def _args(command: str, trace: Path, out: str, force: bool) -> list[str]:
    f = ["--force"] if force else []
    return {
        "sql": ["sql", str(trace), "SELECT 1", "-o", out],
        "report": ["report", str(trace), "-o", out, *f],
        "diff": ["diff", str(trace), str(trace), "-o", out, *f],
        "ingest": ["ingest", str(trace), "-o", out, *f],
        "export": ["export", str(trace), "--parquet", out, *f],
        "scrub": ["scrub", str(trace), out, *f],
    }[command]


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
@examples(40)
@given(command=st.sampled_from(COMMANDS), alias=st.sampled_from(ALIASES), force=st.booleans(),
       as_folder=st.booleans())  # fmt: skip
def test_no_output_option_reaches_an_input(tmp_path_factory: pytest.TempPathFactory,
                                           command: str, alias: str, force: bool,
                                           as_folder: bool) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("alias")
    (root / "run").mkdir()
    trace = root / "run" / "trace.json.gz"
    shutil.copyfile(SMALL_KINETO[0], trace)
    out = _output_for(alias, root, trace)
    if alias == "folder" and command == "export" and force:
        return  # replacing an existing export folder with --force is what --force is for
    before = tree(root)
    source = trace.parent if as_folder and command not in ("scrub",) else trace
    code, _, err = run(*_args(command, source, out, force))
    one_line_error(code, err)
    assert tree(root) == before


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
def test_special_files_refused_as_inputs(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.json")
    for args in (["sql", str(tmp_path / "fifo.json"), "SELECT 1"],
                 ["scrub", str(tmp_path / "fifo.json"), str(tmp_path / "o.json")],
                 ["report", "/dev/zero", "-o", str(tmp_path / "r.html")],
                 ["ingest", "/dev/null"]):  # fmt: skip
        r = tracekit_cli(*args)
        one_line_error(r.returncode, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.json"]


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
def test_dash_means_stdout(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    shutil.copyfile(SMALL_KINETO[0], trace)
    code, out, err = run("sql", str(trace), "SELECT 42 AS x", "-o", "-", "--format", "csv")
    assert (code, out) == (0, "x\n42\n"), err
    code, out, err = run("report", str(trace), "-o", "-", "--format", "md")
    assert code == 0 and out.startswith("# tracekit report"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]


# --- bounded decompression -----------------------------------------------------------------


def gzip_bomb(path: Path, compressed_bytes: int) -> None:
    """A gzip of a trace that expands ~1000:1: one deflate block of repeated events, built
    once and repeated (a full flush makes the blocks independent); the CRC is not checked
    before the bound trips."""
    event = b'{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1},' * 20000
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(event) + c.flush(zlib.Z_FULL_FLUSH)
    head = zlib.compressobj(9, zlib.DEFLATED, -15)
    opening = head.compress(b'{"traceEvents": [') + head.flush(zlib.Z_FULL_FLUSH)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + opening)
        while f.tell() < compressed_bytes:
            f.write(block)
        end = zlib.compressobj(9, zlib.DEFLATED, -15)
        f.write(end.compress(b"{}]}") + end.flush() + b"\x00" * 8)


def test_gzip_bomb_fails_bounded(tmp_path: Path) -> None:
    """10 MB of gzip that would expand past 3 GB: one line, bounded memory, no scratch left."""
    bomb = tmp_path / "in" / "bomb.json.gz"
    bomb.parent.mkdir()
    gzip_bomb(bomb, 10 * 1024 * 1024)
    before = bomb.read_bytes()
    cache = tmp_path / "cache"
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(cache), "TMPDIR": str(tmp_path)}
    for args in (["ingest", str(bomb)], ["scrub", str(bomb), str(tmp_path / "out.json.gz")]):
        code, err, peak_kb = cli_peak_rss(*args, env=env)
        one_line_error(code, err)
        assert "TRACEKIT_MAX_UNZIP_RATIO" in err
        assert peak_kb < 500 * 1024, (args, peak_kb)
    assert bomb.read_bytes() == before
    left = [p for p in tmp_path.rglob("*") if p.is_file() and p != bomb]
    assert left == []


def test_gzip_bound_can_be_raised(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb, 200 * 1024)  # ~200 MB expanded: past the 64 MiB floor
    env = {**os.environ, "TRACEKIT_MAX_UNZIP_RATIO": "nan"}
    r = tracekit_cli("ingest", str(bomb), env=env)
    one_line_error(r.returncode, r.stderr)
    assert "TRACEKIT_MAX_UNZIP_RATIO" in r.stderr
    from tracekit.ingest.bounded_gzip import read_document

    os.environ["TRACEKIT_MAX_UNZIP_RATIO"] = "100000"
    try:
        with pytest.raises(Exception, match="truncated|corrupt|CRC|Error"):  # the fake trailer
            read_document(bomb)
    finally:
        del os.environ["TRACEKIT_MAX_UNZIP_RATIO"]


# --- no tracebacks -------------------------------------------------------------------------

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=20))  # fmt: skip
surrogates = st.sampled_from(["\\ud800", "\\udfff", "a\\ud83d", "\\udc00x", "\\u0000"])


@st.composite
def hostile_trace(draw: st.DrawFn) -> bytes:
    """A Kineto trace whose args nest deep, whose names hold lone surrogates, whose fields
    have the wrong types."""
    depth = draw(st.sampled_from([1, 10, 254, 255, 256, 300, 1000, 3000]))
    args = "[" * depth + "1" + "]" * depth
    name = draw(st.sampled_from(["op", "", "x" * 1000])) + draw(surrogates)
    bad = draw(st.sampled_from(['"ts": "x"', '"ts": 1e400', '"dur": -5', '"pid": [1]',
                                '"tid": {"a": 1}', '"ts": 1']))  # fmt: skip
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": 1, '
        f'"dur": 2, "args": {{"deep": {args}, "{draw(surrogates)}": 1}}}}',
        f'{{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "dur": 1, {bad}}}',
    ]
    top = draw(st.sampled_from(['"traceName": "\\ud800"', '"deviceProperties": "x"',
                                '"distributedInfo": [1]', '"schemaVersion": {}']))  # fmt: skip
    return f'{{{top}, "traceEvents": [{", ".join(events)}]}}'.encode()


@examples(8)
@given(doc=hostile_trace(), gz=st.booleans())
def test_hostile_json_no_traceback(tmp_path_factory: pytest.TempPathFactory, doc: bytes,
                                   gz: bool) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("json")
    trace = root / ("t.json.gz" if gz else "t.json")
    trace.write_bytes(gzip.compress(doc) if gz else doc)
    for args in (["sql", str(trace), "SELECT count(*) FROM events"],
                 ["scrub", str(trace), str(root / f"s{trace.name}")]):  # fmt: skip
        code, _, err = run(*args)
        if code != 0:
            one_line_error(code, err)
    assert trace.read_bytes() == (gzip.compress(doc) if gz else doc) or gz


@examples(10)
@given(where=st.sampled_from(["name", "value", "key", "nested", "thread"]), lone=surrogates,
       engine=st.sampled_from(["duckdb", "python"]))  # fmt: skip
def test_lone_surrogate_ingests(tmp_path_factory: pytest.TempPathFactory, where: str,
                                lone: str, engine: str, monkeypatch: pytest.MonkeyPatch,
                                ) -> None:  # fmt: skip
    """A lone surrogate (UTF-8 cannot hold it) anywhere in a Kineto event is replaced: the
    trace ingests, every event is kept, nothing in the store holds the surrogate."""
    root = tmp_path_factory.mktemp("surrogate")
    name = f"op{lone}" if where == "name" else "op"
    args = {"value": f'{{"k": "v{lone}"}}', "key": f'{{"k{lone}": 1}}',
            "nested": f'{{"a": [{{"b": ["{lone}"]}}], "big": 123456789012345678901234567890}}',
            }.get(where, '{"k": 1}')  # fmt: skip
    thread = f'"thread {lone}"' if where == "thread" else "1"
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": {thread}, '
        f'"ts": {i}, "dur": 1, "args": {args}}}'
        for i in range(3)
    ]
    trace = root / "t.json"
    doc = f'{{"traceEvents": [{", ".join(events)}]}}'.encode()
    trace.write_bytes(doc)
    monkeypatch.setenv("TRACEKIT_KINETO_ENGINE", engine)
    code, out, err = run("sql", str(trace), "SELECT name, args::VARCHAR AS a FROM events",
                         "--format", "json")  # fmt: skip
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 3
    for row in rows:
        assert row["name"].startswith("op")
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in row["name"] + row["a"])
        assert json.loads(row["a"])  # still JSON
    assert trace.read_bytes() == doc


injection = st.lists(st.sampled_from(["[x](http://e.vil)", "![i](http://e.vil/a.png)",
                                     "<img src=x onerror=alert(1)>", "\x1b[31m", "\x1b]0;t\x07",
                                     "\r", "\n", "|", "`", "op"]), min_size=1, max_size=5
                     ).map("".join)  # fmt: skip


@examples(6)
@given(name=injection)
def test_names_inert_in_markdown_and_terminal(tmp_path_factory: pytest.TempPathFactory,
                                              name: str) -> None:  # fmt: skip
    """Link, image, HTML and escape-sequence syntax in a trace name stays inert in report.md
    and in `tracekit sql`'s terminal table."""
    root = tmp_path_factory.mktemp("inject")
    trace = root / "t.json"
    event = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1, "dur": 5}
    trace.write_text(json.dumps({"traceEvents": [event]}))
    code, out, err = run("report", str(trace), "-o", "-", "--format", "md")
    assert code == 0, err
    assert re.search(r"(?<!\\)\]\(http", out) is None  # (an escaped bracket is inert)
    assert re.search(r"(?<!\\)<img", out) is None and "\x1b" not in out
    code, out, err = run("sql", str(trace), "SELECT name FROM events")
    assert code == 0, err
    assert not any(c in out for c in "\x1b\x07\r")


capture_json = st.one_of(
    st.binary(max_size=50),
    st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(
        st.sampled_from(["files", "role", "path", "traces", "command", "argv"]), c, max_size=4),
        max_leaves=12).map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b'{"files": [{"role": "attributes", "path": "../../etc/passwd", '
                     b'"traces": ["t.json"]}]}', b'{"files": 5}', b"[" * 5000 + b"]" * 5000,
                     b'{"files": [{"role": "torch-trace", "path": "t.json\\u0000"}]}']),
)  # fmt: skip
sidecar_line = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(
        st.sampled_from(["name", "pid", "tid", "start_ns", "ordinal", "attrs"]),
        json_leaf | st.lists(json_leaf, max_size=2), max_size=6)),
)  # fmt: skip


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
@examples(8)
@given(manifest=capture_json, lines=st.lists(sidecar_line, max_size=5))
def test_malformed_sidecars_never_break_sql(
    tmp_path_factory: pytest.TempPathFactory, manifest: bytes, lines: list[bytes]
) -> None:
    root = tmp_path_factory.mktemp("run")
    trace = root / "t.json"
    trace.write_bytes(gzip.decompress(SMALL_KINETO[0].read_bytes()))
    (root / "capture.json").write_bytes(manifest)
    (root / "attributes").mkdir()
    (root / "attributes" / "attributes-1.jsonl").write_bytes(b"\n".join(lines))
    before = tree(root)
    code, out, err = run("sql", str(trace), "SELECT count(*) AS n FROM events", "--format", "csv")
    assert code == 0, err
    code, _, err = run("report", str(root), "-o", "-", "--format", "json")
    if code != 0:
        one_line_error(code, err)
    assert tree(root) == before


_NOT_FINITE = ["x<=nan", "inference.p99_ms<=nan", "inference.p99_ms<=inf",
               "inference.p99_ms<=-inf", "inference.p99_ms<=1e400"]  # fmt: skip


@pytest.mark.parametrize("budget", _NOT_FINITE)
def test_budget_not_finite(budget: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    one_line_error(*run("check", str(trace), "--budget", budget)[::2])


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
def test_output_errors_are_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    shutil.copyfile(SMALL_KINETO[0], trace)
    for out in ("/proc/version", "/proc/tracekit-x.csv", str(tmp_path / ("é" * 200))):
        one_line_error(*run("sql", str(trace), "SELECT 1", "-o", out)[::2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
def test_ctrl_c_during_query_exits_130(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    shutil.copyfile(SMALL_KINETO[0], trace)
    assert tracekit_cli("ingest", str(trace)).returncode == 0
    p = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "sql", str(trace),
         "SELECT count(*) FROM range(1000000000000) a"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(3)  # (let it reach the query; not an assertion on time)
    p.send_signal(signal.SIGINT)
    _, err = procs.communicate(p)
    assert (p.returncode, err) == (130, "Error: interrupted\n")


# --- leftovers -----------------------------------------------------------------------------


def _kill_when(p: subprocess.Popen[bytes], folder: Path, pattern: str) -> bool:
    for _ in range(6000):
        if list(folder.glob(pattern)):
            p.kill()
            p.wait()
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.01)
    p.kill()
    p.wait()
    return False


@pytest.mark.skipif(not shared_traces("kineto_trace_diff_control_*"), reason="no big trace")
def test_kill_9_leftovers_are_swept(tmp_path: Path) -> None:
    src = shared_traces("kineto_trace_diff_control_*")[0]
    out = tmp_path / "out" / "shared.json.gz"
    p = subprocess.Popen([sys.executable, "-m", "tracekit", "scrub", str(src), str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    if not _kill_when(p, tmp_path, "out/.shared.json.gz.*.tmp"):
        pytest.skip("scrub finished before it could be killed")
    assert list(out.parent.glob(".shared.json.gz.*.tmp"))
    assert tracekit_cli("scrub", str(src), str(out)).returncode == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["shared.json.gz"]


def test_wal_mode_export_leaves_nothing_beside_it(tmp_path: Path) -> None:
    if not SMALL_NSYS:
        pytest.skip("no shared nsys export")
    src = tmp_path / "w.sqlite"
    shutil.copyfile(SMALL_NSYS[0], src)
    src.chmod(0o644)
    con = sqlite3.connect(src)
    assert con.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    con.close()
    before = src.read_bytes()
    code, out, err = run("sql", str(src), "SELECT count(*) AS n FROM events", "--format", "csv")
    assert code == 0, err
    assert int(out.splitlines()[1]) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.sqlite"]
    assert src.read_bytes() == before


# --- caches are never trusted blindly ------------------------------------------------------


@pytest.mark.skipif(not SMALL_KINETO, reason="no shared Kineto trace")
def test_planted_or_damaged_store_is_rebuilt(tmp_path: Path) -> None:
    from tracekit.store.build import cache_path_for

    trace = tmp_path / "t.json.gz"
    shutil.copyfile(SMALL_KINETO[0], trace)
    query = ("sql", str(trace), "SELECT count(*) AS n FROM events", "--format", "csv")
    code, good, err = run(*query)
    assert code == 0, err
    store = cache_path_for(trace)
    secret = tmp_path / "secret.txt"
    secret.write_text("local file contents")
    con = duckdb.connect(str(store))
    con.execute("ALTER TABLE events RENAME TO events_real")
    con.execute(f"CREATE VIEW events AS SELECT * FROM events_real, read_text('{secret}')")
    con.close()
    code, out, err = run(*query)
    assert (code, out) == (0, good) and "not usable" in err and "views" in err
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 2])  # truncated
    code, out, err = run(*query)
    assert (code, out) == (0, good) and "not usable" in err
    # A store given as input is checked before anything in it runs.
    planted = tmp_path / "planted.duckdb"
    shutil.copyfile(store, planted)
    con = duckdb.connect(str(planted))
    con.execute("CREATE MACRO evil() AS 1")
    con.close()
    one_line_error(*run("sql", str(planted), "SELECT 1")[::2])


def test_many_thread_labels_cost_proportional(tmp_path: Path) -> None:
    """200k distinct thread labels (was: minutes at 40k): ingests, every label kept."""
    n = 200_000 if LONG else 50_000
    events = []
    for i in range(n):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": i,
                       "args": {"name": f"worker-{i}"}})  # fmt: skip
        events.append({"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": i, "ts": i,
                       "dur": 1})  # fmt: skip
    trace = tmp_path / "threads.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    code, out, err = run("sql", str(trace), "SELECT count(DISTINCT thread_name) AS n FROM threads",
                         "--format", "csv")  # fmt: skip
    assert code == 0, err
    assert out == f"n\n{n}\n"
